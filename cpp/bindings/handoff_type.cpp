#include "handoff_type.hpp"

#include <structmember.h>

#include <cstddef>

namespace permits::py_handoff {
namespace {

PyTypeObject HandoffType = {PyVarObject_HEAD_INIT(nullptr, 0)};

HandoffObject* as_handoff(PyObject* self) {
    return reinterpret_cast<HandoffObject*>(self);
}

PyObject* alloc(PyTypeObject* type) {
    PyObject* self = type->tp_alloc(type, 0);
    if (self == nullptr) {
        return nullptr;
    }
    auto* h = as_handoff(self);
    h->charges = PyList_New(0);
    h->route_leases = PyList_New(0);
    h->quotas = PyList_New(0);
    h->started = Py_NewRef(Py_None);
    h->route_rejected = Py_NewRef(Py_None);
    h->rejection = Py_NewRef(Py_None);
    h->body_size = 0;
    if (h->charges == nullptr || h->route_leases == nullptr || h->quotas == nullptr) {
        Py_DECREF(self);
        return nullptr;
    }
    return self;
}

PyObject* handoff_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Handoff() takes no arguments");
        return nullptr;
    }
    return alloc(type);
}

int handoff_traverse(PyObject* self, visitproc visit, void* arg) {
    auto* h = as_handoff(self);
    Py_VISIT(h->charges);
    Py_VISIT(h->started);
    Py_VISIT(h->route_leases);
    Py_VISIT(h->route_rejected);
    Py_VISIT(h->quotas);
    Py_VISIT(h->rejection);
    return 0;
}

int handoff_clear(PyObject* self) {
    auto* h = as_handoff(self);
    Py_CLEAR(h->charges);
    Py_CLEAR(h->started);
    Py_CLEAR(h->route_leases);
    Py_CLEAR(h->route_rejected);
    Py_CLEAR(h->quotas);
    Py_CLEAR(h->rejection);
    return 0;
}

void handoff_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    handoff_clear(self);
    PyTypeObject* type = Py_TYPE(self);
    type->tp_free(self);
}

// (The lists are read and mutated in place, never replaced: read-only attributes. The rest may be
// set; a deleted one reads as an AttributeError, as a Python class's slot would.)
PyMemberDef handoff_members[] = {
    {"charges", T_OBJECT_EX, offsetof(HandoffObject, charges), READONLY,
     "The routes' cost settlements, called with the response once it has been sent, before the middleware "
     "releases the route leases."},
    {"started", T_OBJECT_EX, offsetof(HandoffObject, started), 0,
     "What a middleware saw of the response's start (its status, headers); None before."},
    {"body_size", T_PYSSIZET, offsetof(HandoffObject, body_size), 0, "The body's bytes sent so far."},
    {"route_leases", T_OBJECT_EX, offsetof(HandoffObject, route_leases), READONLY,
     "The leases the route's limits granted, released by the middleware once the response has been sent."},
    {"route_rejected", T_OBJECT_EX, offsetof(HandoffObject, route_rejected), 0,
     "What metrics= counts for a request a route's limit did not admit; None while admitted."},
    {"quotas", T_OBJECT_EX, offsetof(HandoffObject, quotas), READONLY,
     "The route's limits' figures for the RateLimit headers."},
    {"rejection", T_OBJECT_EX, offsetof(HandoffObject, rejection), 0,
     "A route's on_rejected response and its headers, sent in place of the framework's answer; None when "
     "there is none."},
    {nullptr, 0, 0, 0, nullptr}};

} // namespace

PyObject* make() {
    return alloc(&HandoffType);
}

bool check(PyObject* obj) {
    return PyObject_TypeCheck(obj, &HandoffType) != 0;
}

bool register_type(PyObject* m) {
    HandoffType.tp_name = "permits._core.Handoff";
    HandoffType.tp_basicsize = sizeof(HandoffObject);
    HandoffType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    HandoffType.tp_doc = "Handoff()\n--\n\nWhat a server's middleware and a route's limit share for one request: the "
                         "route's leases (released by the middleware once the response is sent), the route's "
                         "quotas (for the headers) and its on_rejected response.";
    HandoffType.tp_new = handoff_new;
    HandoffType.tp_dealloc = handoff_dealloc;
    HandoffType.tp_traverse = handoff_traverse;
    HandoffType.tp_clear = handoff_clear;
    HandoffType.tp_members = handoff_members;
    if (PyType_Ready(&HandoffType) < 0) {
        return false;
    }
    Py_INCREF(&HandoffType);
    if (PyModule_AddObject(m, "Handoff", reinterpret_cast<PyObject*>(&HandoffType)) < 0) {
        Py_DECREF(&HandoffType);
        return false;
    }
    return true;
}

} // namespace permits::py_handoff
