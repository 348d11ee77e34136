// Argument checks shared by the bindings: clear TypeError/ValueError naming the argument.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "permits/limiter.hpp"

namespace permits::bind {

namespace py = pybind11;

/// An int argument (bool refused), as int64; ValueError when it does not fit.
inline std::int64_t int_arg(py::handle v, const char* name) {
    PyObject* o = v.ptr();
    if (PyBool_Check(o) || !PyLong_Check(o)) {
        throw py::type_error(std::string(name) + " must be an int, got " + Py_TYPE(o)->tp_name);
    }
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) {
        throw py::value_error(std::string(name) + " is out of range: " + std::string(py::str(v)));
    }
    return n;
}

/// A bool argument (an int refused), as bool.
inline bool bool_arg(py::handle v, const char* name) {
    if (!PyBool_Check(v.ptr())) {
        throw py::type_error(std::string(name) + " must be a bool, got " + Py_TYPE(v.ptr())->tp_name);
    }
    return v.ptr() == Py_True;
}

/// queue_limit: None is no bound on the queue (the engine's kNoQueueLimit), else an int.
inline std::int64_t queue_limit_arg(py::handle v) {
    return v.is_none() ? kNoQueueLimit : int_arg(v, "queue_limit");
}

/// Queue options as Python sees them (the `_queue` properties): (queue_limit or None for no
/// bound, newest_first).
inline py::tuple queue_tuple(const QueueOptions& q) {
    const py::object limit =
        q.queue_limit == kNoQueueLimit ? py::object(py::none()) : py::object(py::int_(q.queue_limit));
    return py::make_tuple(limit, q.order == QueueOrder::NewestFirst);
}

/// permits.LimiterClosedError, as registered when the module is imported (a strong reference kept
/// for good; set before any function of the module can run).
inline PyObject* g_closed_error = nullptr;
inline PyObject* closed_error_type() {
    return g_closed_error;
}

} // namespace permits::bind
