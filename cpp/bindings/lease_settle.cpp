// lease.settle(permit_count): keep what the work used, give the rest back (an LLM call reserving
// its most tokens and settling to the count it used, a request whose cost is known after it ran).
#include "lease_object.hpp"

#include <atomic>
#include <thread>

#include "free_threading.hpp"

namespace permits::py_lease::detail {
namespace {

using bind::kFreeThreaded;
using bind::load_shared;
using bind::store_shared;

// settle() takes the lease's `settling` flag (one settle at a time), then looks whether it was
// released; a release claims `released`, then waits while the lease is settling. Sequentially
// consistent, so that one of them sees the other: a release never reads the count while settle()
// changes it, and settle() never gives back a part of a lease whose release gave back all of it.
bool begin_settling(LeaseObject* self) noexcept {
    if constexpr (kFreeThreaded) {
        std::atomic_ref<bool> settling(self->settling);
        bool expected = false;
        while (!settling.compare_exchange_weak(expected, true, std::memory_order_seq_cst)) {
            expected = false;
            std::this_thread::yield(); // another thread's settle: C++ only, a few microseconds at most
        }
        if (std::atomic_ref<bool>(self->released).load(std::memory_order_seq_cst)) {
            settling.store(false, std::memory_order_release);
            return false;
        }
        return true;
    } else {
        return !self->released; // the GIL is held throughout: a release cannot come in between
    }
}

void end_settling(LeaseObject* self) noexcept {
    store_shared(self->settling, false);
}

PyObject* released_error() {
    PyErr_SetString(PyExc_ValueError, "settle() on a released lease: settle it before its release()");
    return nullptr;
}

} // namespace

void wait_for_settle(LeaseObject* self) noexcept {
    if constexpr (kFreeThreaded) {
        while (std::atomic_ref<bool>(self->settling).load(std::memory_order_seq_cst)) {
            std::this_thread::yield(); // (a settle gives back in C++ only: a few microseconds at most)
        }
    }
}

PyObject* lease_settle(LeaseObject* self, PyObject* arg) {
    if (!PyLong_Check(arg) || PyBool_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "permit_count must be an int, got %.100s", Py_TYPE(arg)->tp_name);
        return nullptr;
    }
    if (!self->acquired) {
        PyErr_SetString(PyExc_ValueError, "settle() on a failed lease: it holds no permits");
        return nullptr;
    }
    if (load_shared(self->released)) {
        return released_error();
    }
    const std::int64_t held = load_shared(self->permit_count);
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return nullptr;
    }
    if (overflow != 0 || n < 0 || n > held) {
        PyErr_Format(PyExc_ValueError, "permit_count must be from 0 to the lease's %lld, got %R",
                     static_cast<long long>(held), arg);
        return nullptr;
    }
    if (n == held) {
        Py_RETURN_NONE;
    }
    if (self->on_settle != nullptr) { // a custom or wrapping lease: its callback gives back
        PyObject* cb = Py_NewRef(self->on_settle);
        PyObject* r = PyObject_CallOneArg(cb, arg);
        Py_DECREF(cb);
        if (r == nullptr) {
            return nullptr; // (the lease keeps its count: the callback said it could not)
        }
        Py_DECREF(r);
        store_shared(self->permit_count, static_cast<std::int64_t>(n));
        Py_RETURN_NONE;
    }
    if (self->on_release != nullptr || self->on_refund != nullptr) {
        // A custom lease that cannot give part of its permits back keeps them counted: never looser.
        store_shared(self->permit_count, static_cast<std::int64_t>(n));
        Py_RETURN_NONE;
    }
    if (!begin_settling(self)) {
        return released_error();
    }
    const std::int64_t now_held = load_shared(self->permit_count); // (another thread may have settled)
    if (n > now_held) {
        end_settling(self);
        PyErr_Format(PyExc_ValueError, "permit_count must be from 0 to the lease's %lld, got %R",
                     static_cast<long long>(now_held), arg);
        return nullptr;
    }
    give_back_permits(self, now_held - n, false);
    store_shared(self->permit_count, static_cast<std::int64_t>(n));
    if (n == 0) {
        self->must_release = false; // nothing held: a lease collected unreleased has nothing to say
    }
    end_settling(self);
    Py_RETURN_NONE;
}

} // namespace permits::py_lease::detail
