#include "wsgi_gate.hpp"

#include <cstddef>
#include <cstdint>

#include "handoff_type.hpp"
#include "raised_error.hpp"
#include "wsgi_gate_parts.hpp"

namespace permits::py_wsgi_gate {

PyTypeObject GateType = {PyVarObject_HEAD_INIT(nullptr, 0)};

namespace {

using bind::RaisedError;

// The request's path after its lease was granted. Steals `lease` and `key`.
PyObject* serve(GateObject* g, PyObject* app, PyObject* environ, PyObject* start_response, PyObject* lease,
                PyObject* key) {
    std::int64_t remaining = -1;
    PyObject* ours = nullptr;
    PyObject* handoff = py_handoff::make();
    PyObject* leases = handoff == nullptr ? nullptr
                                          : py_handoff::list(reinterpret_cast<py_handoff::HandoffObject*>(handoff),
                                                             &py_handoff::HandoffObject::route_leases);
    if (leases == nullptr || PyList_Append(leases, lease) < 0) {
        Py_XDECREF(handoff);
        PyObject* r = PyObject_CallMethodNoArgs(lease, g_names.release);
        Py_XDECREF(r);
        Py_DECREF(lease);
        Py_DECREF(key);
        return nullptr;
    }
    auto fail = [&]() -> PyObject* { // the request never runs: its lease goes back now
        RaisedError error = RaisedError::take();
        release_all(handoff);
        error.restore();
        Py_DECREF(handoff);
        Py_XDECREF(ours);
        Py_DECREF(lease);
        Py_XDECREF(key);
        return nullptr;
    };
    if (g->style != kNoHeaders) {
        PyObject* n = g->keyed ? PyObject_CallOneArg(g->available, key) : PyObject_CallNoArgs(g->available);
        if (n == nullptr) {
            return fail();
        }
        const long long got = PyLong_AsLongLong(n);
        Py_DECREF(n);
        if (got == -1 && PyErr_Occurred()) {
            return fail();
        }
        remaining = got < 0 ? 0 : got;
        ours = headers_of(g, remaining);
        if (ours == nullptr) {
            return fail();
        }
    }
    Py_CLEAR(key);
    if (PyDict_SetItem(environ, g_names.handoff, handoff) < 0) {
        return fail();
    }
    StartObject* start = PyObject_GC_New(StartObject, &StartType);
    if (start == nullptr) {
        return fail();
    }
    start->gate = reinterpret_cast<GateObject*>(Py_NewRef(reinterpret_cast<PyObject*>(g)));
    start->start_response = Py_NewRef(start_response);
    start->handoff = Py_NewRef(handoff);
    start->ours = ours; // (taken)
    ours = nullptr;
    start->lease = lease; // (taken)
    start->remaining = remaining;
    start->vectorcall = start_call;
    PyObject_GC_Track(start);
    lease = Py_NewRef(start->lease);
    PyObject* call[] = {environ, reinterpret_cast<PyObject*>(start)};
    PyObject* result = PyObject_Vectorcall(app, call, 2, nullptr);
    Py_DECREF(start);
    if (result == nullptr) {
        return fail(); // the application raised: every lease back at once
    }
    Py_DECREF(lease);
    auto* h = reinterpret_cast<py_handoff::HandoffObject*>(handoff);
    if (py_handoff::size(h, &py_handoff::HandoffObject::charges) >
        0) { // the views have run: their costs are settled on close
        PyObject* args[] = {result, handoff};
        PyObject* r = PyObject_Vectorcall(g->costs, args, 2, nullptr);
        if (r == nullptr) { // (no response to close: the leases go back now)
            RaisedError error = RaisedError::take();
            release_all(handoff);
            error.restore();
        }
        Py_DECREF(result);
        Py_DECREF(handoff);
        return r;
    }
    PyTypeObject* type = PyList_CheckExact(result) || PyTuple_CheckExact(result) ? &SizedResponseType : &ResponseType;
    ResponseObject* response = PyObject_GC_New(ResponseObject, type);
    if (response == nullptr) {
        RaisedError error = RaisedError::take();
        release_all(handoff);
        error.restore();
        Py_DECREF(result);
        Py_DECREF(handoff);
        return nullptr;
    }
    response->result = result;
    response->handoff = handoff;
    PyObject_GC_Track(response);
    return reinterpret_cast<PyObject*>(response);
}

// gate(app, environ, start_response); bound to an app (the middleware): gate(environ, start_response)
PyObject* gate_call(PyObject* self, PyObject* const* given, size_t nargsf, PyObject* kwnames) {
    GateObject* g = as_gate(self);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_SetString(PyExc_TypeError, "a WSGI application takes no keyword arguments");
        return nullptr;
    }
    PyObject* bound[3];
    PyObject* const* args = given;
    if (g->app != nullptr) {
        if (nargs != 2) {
            PyErr_Format(PyExc_TypeError, "a WSGI application takes (environ, start_response), got %zd arguments",
                         nargs);
            return nullptr;
        }
        bound[0] = g->app;
        bound[1] = given[0];
        bound[2] = given[1];
        args = bound;
        if (g->python_gate != nullptr) {
            return PyObject_Vectorcall(g->python_gate, args, 3, nullptr);
        }
    } else if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "WsgiGate(app, environ, start_response)");
        return nullptr;
    }
    if (g->acquire == nullptr) {
        PyErr_SetString(PyExc_TypeError, "the WsgiGate is not initialized (made without its options, never bound)");
        return nullptr;
    }
    PyObject* app = args[0];
    PyObject* environ = args[1];
    PyObject* start_response = args[2];
    if (!PyDict_CheckExact(environ)) {
        return PyObject_Vectorcall(g->fallback, args, 3, nullptr);
    }
    PyObject* outer = dict_get(environ, g_names.handoff);
    if (outer != nullptr || PyErr_Occurred()) { // an outer middleware's handoff: Python's path
        Py_XDECREF(outer);
        return PyErr_Occurred() ? nullptr : PyObject_Vectorcall(g->fallback, args, 3, nullptr);
    }
    PyObject* key = Py_None;
    if (g->key_kind != kNoKey) {
        key = key_of(g, environ);
        if (key == nullptr) {
            return nullptr;
        }
    } else {
        Py_INCREF(key);
    }
    PyObject* lease = nullptr;
    if (g->keyed) {
        PyObject* call[] = {key, g->count};
        lease = PyObject_Vectorcall(g->acquire, call, 2, nullptr);
    } else {
        lease = PyObject_CallOneArg(g->acquire, g->count);
    }
    if (lease == nullptr) {
        Py_DECREF(key);
        return nullptr;
    }
    const int granted = PyObject_IsTrue(lease);
    if (granted <= 0) {
        PyObject* r = nullptr;
        if (granted == 0) {
            PyObject* call[] = {app, environ, start_response, lease, key};
            r = PyObject_Vectorcall(g->refused, call, 5, nullptr);
        }
        Py_DECREF(lease);
        Py_DECREF(key);
        return r;
    }
    return serve(g, app, environ, start_response, lease, key);
}

PyObject* gate_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    if (type != &GateType || (PyTuple_GET_SIZE(args) == 0 && (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0))) {
        PyObject* self = type->tp_alloc(type, 0); // unconfigured: a subclass binds it in its __init__ (_bind)
        if (self != nullptr) {
            as_gate(self)->vectorcall = gate_call;
        }
        return self;
    }
    static const char* kwlist[] = {"acquire",      "available",  "permit_count", "keyed",  "key_kind",
                                   "key_env",      "key_name",   "key_slow",     "style",  "policy_pair",
                                   "state_prefix", "limit_pair", "quota",        "period", "fallback",
                                   "refused",      "merge",      "costs",        nullptr};
    PyObject *acquire, *available, *count, *key_env, *key_name, *key_slow, *policy_pair, *state_prefix, *limit_pair;
    PyObject *fallback, *refused, *merge, *costs;
    int keyed, key_kind, style;
    long long quota, period;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOpiOOOiOOOLLOOOO:WsgiGate", const_cast<char**>(kwlist), &acquire,
                                     &available, &count, &keyed, &key_kind, &key_env, &key_name, &key_slow, &style,
                                     &policy_pair, &state_prefix, &limit_pair, &quota, &period, &fallback, &refused,
                                     &merge, &costs)) {
        return nullptr;
    }
    if (key_kind < kNoKey || key_kind > kPythonKey || style < kNoHeaders || style > kBoth) {
        PyErr_SetString(PyExc_ValueError, "WsgiGate: key_kind or style out of range");
        return nullptr;
    }
    if (!PyLong_CheckExact(count) ||
        (key_kind == kHeader && (!PyUnicode_Check(key_env) || !PyUnicode_Check(key_name))) ||
        (style != kNoHeaders && (!PyUnicode_Check(state_prefix) || !PyCallable_Check(available)))) {
        PyErr_SetString(PyExc_TypeError, "WsgiGate: permit_count, key_env, key_name, state_prefix or available");
        return nullptr;
    }
    auto* g = reinterpret_cast<GateObject*>(type->tp_alloc(type, 0));
    if (g == nullptr) {
        return nullptr;
    }
    g->acquire = Py_NewRef(acquire);
    g->available = Py_NewRef(available);
    g->count = Py_NewRef(count);
    g->keyed = keyed;
    g->key_kind = key_kind;
    g->key_env = Py_NewRef(key_env);
    g->key_name = Py_NewRef(key_name);
    g->key_slow = Py_NewRef(key_slow);
    g->style = style;
    g->policy_pair = Py_NewRef(policy_pair);
    g->state_prefix = Py_NewRef(state_prefix);
    g->limit_pair = Py_NewRef(limit_pair);
    g->quota = quota;
    g->period = period;
    g->fallback = Py_NewRef(fallback);
    g->refused = Py_NewRef(refused);
    g->merge = Py_NewRef(merge);
    g->costs = Py_NewRef(costs);
    g->vectorcall = gate_call;
    return reinterpret_cast<PyObject*>(g);
}

// The gate's configuration's references, in one list: visited, cleared and copied by _bind alike.
constexpr PyObject* GateObject::*kConfigRefs[] = {
    &GateObject::acquire,    &GateObject::available, &GateObject::count,       &GateObject::key_env,
    &GateObject::key_name,   &GateObject::key_slow,  &GateObject::policy_pair, &GateObject::state_prefix,
    &GateObject::limit_pair, &GateObject::fallback,  &GateObject::refused,     &GateObject::merge,
    &GateObject::costs};

int gate_traverse(PyObject* self, visitproc visit, void* arg) {
    GateObject* g = as_gate(self);
    for (PyObject* GateObject::*ref : kConfigRefs) {
        Py_VISIT(g->*ref);
    }
    Py_VISIT(g->app);
    Py_VISIT(g->python_gate);
    return 0;
}

int gate_clear(PyObject* self) {
    GateObject* g = as_gate(self);
    for (PyObject* GateObject::*ref : kConfigRefs) {
        Py_CLEAR(g->*ref);
    }
    Py_CLEAR(g->app);
    Py_CLEAR(g->python_gate);
    return 0;
}

// _bind(app, source): this gate calls `app` for (environ, start_response): with `source`'s C path when
// it is a configured WsgiGate, else through `source(app, environ, start_response)`.
PyObject* gate_bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_bind(app, source)");
        return nullptr;
    }
    GateObject* g = as_gate(self);
    PyObject* source = args[1];
    if (g->app != nullptr || g->acquire != nullptr) {
        PyErr_SetString(PyExc_TypeError, "the gate is bound already");
        return nullptr;
    }
    if (Py_IS_TYPE(source, &GateType) && as_gate(source)->acquire != nullptr && as_gate(source)->app == nullptr) {
        const GateObject* s = as_gate(source);
        for (PyObject* GateObject::*ref : kConfigRefs) {
            g->*ref = Py_NewRef(s->*ref);
        }
        g->keyed = s->keyed;
        g->key_kind = s->key_kind;
        g->style = s->style;
        g->quota = s->quota;
        g->period = s->period;
    } else if (PyCallable_Check(source)) {
        g->python_gate = Py_NewRef(source);
    } else {
        PyErr_SetString(PyExc_TypeError, "_bind: source must be a WsgiGate or a callable");
        return nullptr;
    }
    g->app = Py_NewRef(args[0]);
    g->vectorcall = gate_call;
    Py_RETURN_NONE;
}

PyMethodDef gate_methods[] = {
    {"_bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&gate_bind)), METH_FASTCALL,
     "_bind($self, app, source, /)\n--\n\nCalls app for (environ, start_response) through source's path."},
    {nullptr, nullptr, 0, nullptr}};

void gate_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    PyTypeObject* type = Py_TYPE(self);
    type->tp_free(self);
}

bool add_type(PyObject* m, PyTypeObject& type, const char* name) {
    if (PyType_Ready(&type) < 0) {
        return false;
    }
    if (m == nullptr) {
        return true;
    }
    Py_INCREF(&type);
    if (PyModule_AddObject(m, name, reinterpret_cast<PyObject*>(&type)) < 0) {
        Py_DECREF(&type);
        return false;
    }
    return true;
}

bool intern_names() {
    struct Entry {
        PyObject** slot;
        const char* text;
    };
    const Entry entries[] = {{&g_names.handoff, "permits.handoff"},
                             {&g_names.remote_addr, "REMOTE_ADDR"},
                             {&g_names.ratelimit, "RateLimit"},
                             {&g_names.remaining, "X-RateLimit-Remaining"},
                             {&g_names.reset, "X-RateLimit-Reset"},
                             {&g_names.release, "release"},
                             {&g_names.close, "close"},
                             {&g_names.strip, "strip"},
                             {&g_names.exc_info, "exc_info"},
                             {&g_names.pop, "pop"}};
    for (const Entry& e : entries) {
        *e.slot = PyUnicode_InternFromString(e.text);
        if (*e.slot == nullptr) {
            return false;
        }
    }
    return true;
}

} // namespace

bool register_type(PyObject* m) {
    if (!intern_names()) {
        return false;
    }
    GateType.tp_name = "permits._core.WsgiGate";
    GateType.tp_basicsize = sizeof(GateObject);
    GateType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_BASETYPE;
    GateType.tp_methods = gate_methods;
    GateType.tp_doc = "WsgiGate(*, acquire, available, permit_count, keyed, key_kind, key_env, key_name, key_slow, "
                      "style, policy_pair, state_prefix, limit_pair, quota, period, fallback, refused, merge, costs)"
                      "\n--\n\nThe WSGI middleware's path for a request, called as gate(app, environ, "
                      "start_response) (permits.wsgi builds it).";
    GateType.tp_new = gate_new;
    GateType.tp_dealloc = gate_dealloc;
    GateType.tp_traverse = gate_traverse;
    GateType.tp_clear = gate_clear;
    GateType.tp_vectorcall_offset = offsetof(GateObject, vectorcall);
    GateType.tp_call = PyVectorcall_Call;
    return ready_parts() && add_type(m, GateType, "WsgiGate");
}

} // namespace permits::py_wsgi_gate
