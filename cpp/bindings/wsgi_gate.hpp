// permits._core.WsgiGate: the WSGI middleware's path for a request in one C call: the built-in
// key read from the environ, the decision, the RateLimit headers' values worked out from the
// lease, the start_response wrapper and the response whose close() releases the leases. What is
// not on that path (a refusal, a handoff from an outer middleware, a route's figures, a cost)
// goes back to the Python callables the gate was given (wsgi_gate.cpp).
#pragma once

#include <Python.h>

namespace permits::py_wsgi_gate {

/// Adds WsgiGate (and its start_response and response types) to the module `m`; false with a
/// Python error set.
bool register_type(PyObject* m);

} // namespace permits::py_wsgi_gate
