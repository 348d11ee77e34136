// permits._core.AsgiSend (asgi_send.cpp).
#pragma once

#include <Python.h>

namespace permits::py_asgi_gate {

/// Adds AsgiSend to the module `m`; false with a Python error set.
bool register_send(PyObject* m);

} // namespace permits::py_asgi_gate
