// The Python error that is set, taken out while other calls run and put back afterwards: one
// place for the C API that changed in 3.12 (PyErr_Fetch/PyErr_Restore/PyErr_NormalizeException are
// deprecated there in favour of PyErr_GetRaisedException/PyErr_SetRaisedException).
#pragma once

#include <Python.h>

namespace permits::bind {

/// The error set when it was taken (none: nothing is put back). Restore it exactly once.
class RaisedError {
public:
    /// Takes the error that is set, if any: none is set afterwards.
    static RaisedError take() noexcept {
        RaisedError e;
#if PY_VERSION_HEX >= 0x030C0000
        e.exc_ = PyErr_GetRaisedException();
#else
        PyErr_Fetch(&e.type_, &e.exc_, &e.tb_);
#endif
        return e;
    }
    /// Sets it again (dropping any error set meanwhile), handing its references back.
    void restore() noexcept {
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc_);
#else
        PyErr_Restore(type_, exc_, tb_);
        type_ = nullptr;
        tb_ = nullptr;
#endif
        exc_ = nullptr;
    }
    /// Takes the error that is set as an exception instance (a new reference; nullptr if none).
    static PyObject* take_exception() noexcept {
#if PY_VERSION_HEX >= 0x030C0000
        return PyErr_GetRaisedException();
#else
        PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (value != nullptr && tb != nullptr) {
            PyException_SetTraceback(value, tb);
        }
        Py_XDECREF(type);
        Py_XDECREF(tb);
        return value;
#endif
    }

    /// Sets `exc`, an exception instance, as the error (stealing the reference).
    static void raise(PyObject* exc) noexcept {
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(exc))), exc, PyException_GetTraceback(exc));
#endif
    }

private:
    RaisedError() = default;
    PyObject* exc_ = nullptr; // the exception (3.12+), or the value as fetched
#if PY_VERSION_HEX < 0x030C0000
    PyObject* type_ = nullptr;
    PyObject* tb_ = nullptr;
#endif
};

} // namespace permits::bind
