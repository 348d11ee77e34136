// What a lease says when it is garbage-collected unreleased: a warning on the "permits" logger.
#include <atomic>

#include "lease_object.hpp"

namespace permits::py_lease::detail {

// logging.getLogger("permits"), looked up on the first forgotten lease (by one thread or, without
// the GIL, possibly two: the one stored first is kept).
std::atomic<PyObject*> permits_logger{nullptr};

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

// The forgotten lease logged as a warning on the logger "permits": Python ignores a
// ResourceWarning by default, a service's logs are read. Not at interpreter exit, when logging
// may be torn down already. An error of logging's own is reported as unraisable (a dealloc
// cannot raise).
void log_forgotten(std::int64_t permit_count) {
    if (interpreter_finalizing()) {
        return;
    }
    PyObject* logger = permits_logger.load(std::memory_order_acquire);
    if (logger == nullptr) {
        PyObject* logging = PyImport_ImportModule("logging");
        if (logging != nullptr) {
            logger = PyObject_CallMethod(logging, "getLogger", "s", "permits");
            Py_DECREF(logging);
        }
        if (logger == nullptr) {
            PyErr_WriteUnraisable(nullptr);
            return;
        }
        PyObject* expected = nullptr;
        if (!permits_logger.compare_exchange_strong(expected, logger, std::memory_order_acq_rel)) {
            Py_DECREF(logger); // (the same object: logging keeps one logger per name)
            logger = expected;
        }
    }
    PyObject* logged = PyObject_CallMethod(logger, "warning", "sL",
                                           "a concurrency lease of %d permit(s) was garbage-collected without "
                                           "release(); its permits were released",
                                           static_cast<long long>(permit_count));
    if (logged == nullptr) {
        PyErr_WriteUnraisable(nullptr);
        return;
    }
    Py_DECREF(logged);
}

} // namespace permits::py_lease::detail
