// Lease.granted and Lease.denied: the leases of custom limiters (and of the Python layers that
// wrap leases: chains, stores, metrics), with their callbacks and metadata.
#include "lease_object.hpp"

#include <cmath>

namespace permits::py_lease::detail {

// Lease.granted(permit_count=1, *, on_release=None, on_refund=None, metadata=None, lost=None, on_settle=None)
PyObject* lease_granted(PyObject*, PyObject* args, PyObject* kwargs) {
    static const char* kw[] = {"permit_count", "on_release", "on_refund", "metadata", "lost", "on_settle", nullptr};
    PyObject* count = nullptr;
    PyObject* on_release = Py_None;
    PyObject* on_refund = Py_None;
    PyObject* metadata = Py_None;
    PyObject* lost = Py_None;
    PyObject* on_settle = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OOOOO:granted", const_cast<char**>(kw), &count, &on_release,
                                     &on_refund, &metadata, &lost, &on_settle)) {
        return nullptr;
    }
    long long n = 1;
    if (count != nullptr) {
        if (!PyLong_Check(count) || PyBool_Check(count)) {
            PyErr_Format(PyExc_TypeError, "permit_count must be an int, got %.100s", Py_TYPE(count)->tp_name);
            return nullptr;
        }
        int overflow = 0;
        n = PyLong_AsLongLongAndOverflow(count, &overflow);
        if (overflow != 0 || n < 0) {
            PyErr_SetString(PyExc_ValueError, "permit_count must be a non-negative int within 64 bits");
            return nullptr;
        }
    }
    if (on_release != Py_None && !PyCallable_Check(on_release)) {
        PyErr_SetString(PyExc_TypeError, "on_release must be callable or None");
        return nullptr;
    }
    if (on_refund != Py_None && !PyCallable_Check(on_refund)) {
        PyErr_SetString(PyExc_TypeError, "on_refund must be callable or None");
        return nullptr;
    }
    if (lost != Py_None && !PyCallable_Check(lost)) {
        PyErr_SetString(PyExc_TypeError, "lost must be callable or None");
        return nullptr;
    }
    if (on_settle != Py_None && !PyCallable_Check(on_settle)) {
        PyErr_SetString(PyExc_TypeError, "on_settle must be callable or None");
        return nullptr;
    }
    if (!check_metadata(metadata)) {
        return nullptr;
    }
    LeaseObject* self = alloc_lease();
    if (self == nullptr) {
        return nullptr;
    }
    self->acquired = true;
    if (lost != Py_None) {
        self->lost_check = Py_NewRef(lost);
        track(self);
    }
    self->permit_count = n;
    if (on_release != Py_None) {
        Py_INCREF(on_release);
        self->on_release = on_release;
        track(self);
    }
    if (on_refund != Py_None) {
        Py_INCREF(on_refund);
        self->on_refund = on_refund;
        track(self);
    }
    if (on_settle != Py_None) {
        self->on_settle = Py_NewRef(on_settle);
        track(self);
    }
    if (!attach_metadata(self, metadata)) {
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject*>(self);
}

// Lease.denied(reason="limit_reached", *, retry_after=None, metadata=None)
PyObject* lease_denied(PyObject*, PyObject* args, PyObject* kwargs) {
    static const char* kw[] = {"reason", "retry_after", "metadata", nullptr};
    PyObject* reason = nullptr;
    PyObject* retry = Py_None;
    PyObject* metadata = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OO:denied", const_cast<char**>(kw), &reason, &retry,
                                     &metadata)) {
        return nullptr;
    }
    if (reason != nullptr && reason != Py_None && !PyUnicode_Check(reason)) {
        PyErr_SetString(PyExc_TypeError, "reason must be a str");
        return nullptr;
    }
    double retry_after = -1.0;
    if (retry != Py_None) {
        if (PyBool_Check(retry) || !(PyFloat_Check(retry) || PyLong_Check(retry))) {
            PyErr_SetString(PyExc_TypeError, "retry_after must be a number of seconds or None");
            return nullptr;
        }
        // The value itself, not an overridable __float__ of an int subclass.
        retry_after = PyLong_Check(retry) ? PyLong_AsDouble(retry) : PyFloat_AS_DOUBLE(retry);
        if (retry_after == -1.0 && PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "retry_after is too large");
            return nullptr;
        }
        if (!std::isfinite(retry_after) || retry_after < 0) {
            PyErr_SetString(PyExc_ValueError, "retry_after must be a finite, non-negative number of seconds");
            return nullptr;
        }
        retry_after = std::fabs(retry_after); // -0.0 passes the check above: it is 0.0
    }
    if (!check_metadata(metadata)) {
        return nullptr;
    }
    LeaseObject* self = alloc_lease();
    if (self == nullptr) {
        return nullptr;
    }
    self->retry_after = retry_after;
    if (reason == nullptr || reason == Py_None) {
        self->reason = reason_string(Reason::LimitReached);
    } else {
        Py_INCREF(reason);
        self->reason = reason;
    }
    if (!attach_metadata(self, metadata)) {
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject*>(self);
}

// Used by RateLimiter for custom limiters: a denied lease reports the requested count.
PyObject* lease_with_permit_count(LeaseObject* self, PyObject* arg) {
    const long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return nullptr;
    }
    if (!self->acquired) {
        self->permit_count = n;
    }
    Py_INCREF(self);
    return reinterpret_cast<PyObject*>(self);
}

} // namespace permits::py_lease::detail
