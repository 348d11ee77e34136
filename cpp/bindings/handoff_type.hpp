// permits._core.Handoff: what a server's middleware and a route's limit share for one request.
// A C type because the WSGI gate makes one per request (a Python class's __init__ costs more than
// the whole decision).
#pragma once

#include <Python.h>

#include "free_threading.hpp"

namespace permits::py_handoff {

/// The fields, readable and writable from Python as attributes of the same names.
// The three lists are made on first use (most requests have no route limit): nullptr until then.
struct HandoffObject {
    PyObject_HEAD PyObject* charges; // list: the routes' cost settlements
    PyObject* started;               // what the middleware saw of the response's start
    Py_ssize_t body_size;            // the body's bytes sent so far
    PyObject* route_leases;          // list: released by the middleware once the response is sent
    PyObject* route_rejected;        // str or None
    PyObject* quotas;                // list: the routes' figures for the headers
    PyObject* rejection;             // a route's on_rejected response and its headers, or None
};

/// Adds the type to the module `m`; false with a Python error set.
bool register_type(PyObject* m);
/// A new, empty handoff (a new reference), or nullptr with a Python error set.
PyObject* make();
/// Whether `obj` is a Handoff.
bool check(PyObject* obj);
/// The list in `field` (charges, route_leases or quotas), made if it was not: a borrowed reference, or
/// nullptr with an error set.
PyObject* list(HandoffObject* h, PyObject* HandoffObject::*field);
/// The length of the list in `field`: 0 while it was never made.
inline Py_ssize_t size(HandoffObject* h, PyObject* HandoffObject::*field) {
    PyObject* made = bind::load_shared(h->*field);
    return made == nullptr ? 0 : PyList_GET_SIZE(made);
}

} // namespace permits::py_handoff
