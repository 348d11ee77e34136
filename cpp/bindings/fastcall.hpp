// What the METH_FASTCALL entry points share (acquire on a limiter, acquire on a per-key table):
// reading the engine object from a pybind11 instance, turning C++ errors into Python ones, and
// installing the method on the pybind11 type.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>

#include "args.hpp"
#include "permits/outcome.hpp"

namespace permits::bind {

/// acquire, _try_now, and wait_async / acquire_async (the checks and the awaitable; the engine is
/// asked when it is awaited).
enum class FastCall { Acquire, TryNow, WaitAsync, AcquireAsync };

/// The method a FastCall is, as its errors name it.
constexpr const char* fast_call_name(FastCall kind) {
    switch (kind) {
    case FastCall::Acquire: return "acquire";
    case FastCall::TryNow: return "_try_now";
    case FastCall::WaitAsync: return "wait_async";
    case FastCall::AcquireAsync: return "acquire_async";
    }
    return "acquire";
}

/// The shared_ptr holder of `self`, or nullptr with a TypeError set.
template <class T> const std::shared_ptr<T>* holder_of(PyObject* self) {
    auto vh = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder();
    if (!vh.holder_constructed()) {
        PyErr_SetString(PyExc_TypeError, "the limiter's __init__ was not called");
        return nullptr;
    }
    return &vh.template holder<std::shared_ptr<T>>();
}

/// Runs `body` (returning a new reference or nullptr with an error set), translating exceptions.
template <class F> PyObject* guarded(F&& body) {
    try {
        return body();
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ClosedError& e) {
        PyErr_SetString(closed_error_type(), e.what());
    } catch (const py::builtin_exception& e) {
        e.set_error(); // the TypeError / ValueError of an argument check
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

/// Sets `def` (static storage) as a method of the pybind11 class `cls`.
inline void install_method(py::handle cls, PyMethodDef& def) {
    PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def);
    if (descr == nullptr || PyObject_SetAttrString(cls.ptr(), def.ml_name, descr) != 0) {
        Py_XDECREF(descr);
        throw py::error_already_set();
    }
    Py_DECREF(descr);
}

/// The keyword argument of a fastcall method: only `permit_count`; false with a TypeError set.
inline bool only_permit_count_keyword(PyObject* kwnames) {
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) == 1 &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "permit_count") != 0) {
        PyErr_Format(PyExc_TypeError, "got an unexpected keyword argument '%U'", PyTuple_GET_ITEM(kwnames, 0));
        return false;
    }
    return true;
}

} // namespace permits::bind
