#include "handoff_type.hpp"

#include <structmember.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

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
    h->started = Py_NewRef(Py_None);
    h->route_rejected = Py_NewRef(Py_None);
    h->rejection = Py_NewRef(Py_None);
    h->body_size = 0;
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
    Py_VISIT(bind::load_shared(h->charges));
    Py_VISIT(bind::load_shared(h->started));
    Py_VISIT(bind::load_shared(h->route_leases));
    Py_VISIT(h->route_rejected);
    Py_VISIT(bind::load_shared(h->quotas));
    Py_VISIT(h->rejection);
    return 0;
}

// Empties a field that other threads write atomically (started; a list made on first use) with an
// atomic read: the thread that wrote it last may not be the one that frees the handoff.
void clear_shared(PyObject*& field) {
    PyObject* was = bind::load_shared(field);
    bind::store_shared<PyObject*>(field, nullptr);
    Py_XDECREF(was);
}

int handoff_clear(PyObject* self) {
    auto* h = as_handoff(self);
    clear_shared(h->charges);
    clear_shared(h->started);
    clear_shared(h->route_leases);
    Py_CLEAR(h->route_rejected);
    clear_shared(h->quotas);
    Py_CLEAR(h->rejection);
    return 0;
}

void handoff_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    handoff_clear(self);
    PyTypeObject* type = Py_TYPE(self);
    type->tp_free(self);
}

// The lists, by the closure of their getters.
PyObject* HandoffObject::*const kLists[] = {&HandoffObject::charges, &HandoffObject::route_leases,
                                            &HandoffObject::quotas};

PyObject* get_list(PyObject* self, void* which) {
    return Py_XNewRef(list(as_handoff(self), kLists[reinterpret_cast<std::intptr_t>(which)]));
}

// (The lists are read and mutated in place, never replaced: read-only attributes, made when first
// read. The rest may be set; a deleted one reads as an AttributeError, as a Python class's slot would.)
PyGetSetDef handoff_getset[] = {
    {"charges", get_list, nullptr,
     "The routes' cost settlements, called with the response once it has been sent, before the middleware "
     "releases the route leases.",
     reinterpret_cast<void*>(0)},
    {"route_leases", get_list, nullptr,
     "The leases the route's limits granted, released by the middleware once the response has been sent.",
     reinterpret_cast<void*>(1)},
    {"quotas", get_list, nullptr, "The route's limits' figures for the RateLimit headers.", reinterpret_cast<void*>(2)},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef handoff_members[] = {
    {"started", T_OBJECT_EX, offsetof(HandoffObject, started), 0,
     "What a middleware saw of the response's start (its status, headers); None before."},
    {"body_size", T_PYSSIZET, offsetof(HandoffObject, body_size), 0, "The body's bytes sent so far."},
    {"route_rejected", T_OBJECT_EX, offsetof(HandoffObject, route_rejected), 0,
     "What metrics= counts for a request a route's limit did not admit; None while admitted."},
    {"rejection", T_OBJECT_EX, offsetof(HandoffObject, rejection), 0,
     "A route's on_rejected response and its headers, sent in place of the framework's answer; None when "
     "there is none."},
    {nullptr, 0, 0, 0, nullptr}};

} // namespace

PyObject* list(HandoffObject* h, PyObject* HandoffObject::*field) {
    PyObject* made = bind::load_shared(h->*field);
    if (made != nullptr) {
        return made;
    }
    PyObject* fresh = PyList_New(0);
    if (fresh == nullptr) {
        return nullptr;
    }
    if constexpr (bind::kFreeThreaded) { // two threads' first reads: one list wins, the other is dropped
        PyObject* expected = nullptr;
        if (!std::atomic_ref<PyObject*>(h->*field).compare_exchange_strong(expected, fresh,
                                                                           std::memory_order_acq_rel)) {
            Py_DECREF(fresh);
            return expected;
        }
        return fresh;
    }
    h->*field = fresh;
    return fresh;
}

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
    HandoffType.tp_getset = handoff_getset;
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
