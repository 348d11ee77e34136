// permits._core.AsgiGate (the ASGI middleware's key, decision and headers in one call) and
// permits._core.AsgiSend (the send that adds the headers): asgi_gate.cpp.
#pragma once

#include <Python.h>

namespace permits::py_asgi_gate {

/// Adds AsgiGate and AsgiSend to the module `m`; false with a Python error set.
bool register_types(PyObject* m);

} // namespace permits::py_asgi_gate
