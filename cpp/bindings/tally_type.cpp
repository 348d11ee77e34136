#include "tally_type.hpp"

#include <atomic>
#include <cstdint>
#include <new>

namespace permits::py_tally {
namespace {

// A Python limiter's counts of granted and refused leases (statistics()), added to from any
// thread: `self.count += 1` in Python loses additions when threads run it at once without the
// GIL (a free-threaded CPython). Relaxed atomics: the counts are totals, read for reporting.
struct TallyObject {
    PyObject_HEAD std::atomic<std::int64_t> granted;
    std::atomic<std::int64_t> refused;
};

PyTypeObject TallyType = {PyVarObject_HEAD_INIT(nullptr, 0)};

TallyObject* as_tally(PyObject* self) {
    return reinterpret_cast<TallyObject*>(self);
}

PyObject* tally_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Tally() takes no arguments");
        return nullptr;
    }
    PyObject* self = type->tp_alloc(type, 0);
    if (self != nullptr) {
        new (&as_tally(self)->granted) std::atomic<std::int64_t>(0);
        new (&as_tally(self)->refused) std::atomic<std::int64_t>(0);
    }
    return self;
}

PyObject* tally_grant(PyObject* self, PyObject*) {
    as_tally(self)->granted.fetch_add(1, std::memory_order_relaxed);
    Py_RETURN_NONE;
}

PyObject* tally_refuse(PyObject* self, PyObject*) {
    as_tally(self)->refused.fetch_add(1, std::memory_order_relaxed);
    Py_RETURN_NONE;
}

PyObject* tally_granted(PyObject* self, void*) {
    return PyLong_FromLongLong(as_tally(self)->granted.load(std::memory_order_relaxed));
}

PyObject* tally_refused(PyObject* self, void*) {
    return PyLong_FromLongLong(as_tally(self)->refused.load(std::memory_order_relaxed));
}

PyMethodDef tally_methods[] = {
    {"grant", tally_grant, METH_NOARGS, "grant($self, /)\n--\n\nCounts one granted lease."},
    {"refuse", tally_refuse, METH_NOARGS, "refuse($self, /)\n--\n\nCounts one refused lease."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef tally_getset[] = {{"granted", tally_granted, nullptr, "Leases granted so far.", nullptr},
                              {"refused", tally_refused, nullptr, "Leases refused so far.", nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

} // namespace

bool register_type(PyObject* m) {
    TallyType.tp_name = "permits._core.Tally";
    TallyType.tp_basicsize = sizeof(TallyObject);
    TallyType.tp_flags = Py_TPFLAGS_DEFAULT;
    TallyType.tp_doc = "Counts of granted and refused leases, added to from any thread (statistics()).";
    TallyType.tp_new = tally_new;
    TallyType.tp_methods = tally_methods;
    TallyType.tp_getset = tally_getset;
    if (PyType_Ready(&TallyType) < 0) {
        return false;
    }
    Py_INCREF(&TallyType);
    if (PyModule_AddObject(m, "Tally", reinterpret_cast<PyObject*>(&TallyType)) < 0) {
        Py_DECREF(&TallyType);
        return false;
    }
    return true;
}

} // namespace permits::py_tally
