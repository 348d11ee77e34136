// permits._core.AsgiGate and AsgiSend: the ASGI middleware's per-request work in C. The gate's
// admit(scope) reads the built-in key from the scope, decides with the limiter's own acquire and
// writes the RateLimit headers (lowercase names, latin-1 bytes, as an ASGI message carries them);
// AsgiSend is the send handed to the application: it adds them to the response's start and counts
// the body's bytes. What they do not settle (a key read in Python, a route's figures or rejection,
// an application's own header of ours) goes back to Python (permits/asgi.py).
#include "asgi_gate.hpp"

#include "asgi_gate_parts.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "free_threading.hpp"
#include "handoff_type.hpp"
#include "raised_error.hpp"
#include "wsgi_gate_parts.hpp"

namespace permits::py_asgi_gate {
namespace {

using py_wsgi_gate::decimal;
using py_wsgi_gate::dict_get;
using py_wsgi_gate::is_space;
using py_wsgi_gate::pair;
using py_wsgi_gate::plain_ipv4;

struct Names {
    PyObject* client;    // "client"
    PyObject* headers;   // "headers"
    PyObject* handoff;   // "permits.handoff"
    PyObject* ratelimit; // b"ratelimit"
    PyObject* remaining; // b"x-ratelimit-remaining"
    PyObject* reset;     // b"x-ratelimit-reset"
};
Names g_names{};

PyTypeObject AsgiGateType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- the key ----

// kClientIp: scope["client"][0] when it is a dotted-quad IPv4 address; else Python's reading.
PyObject* client_key(AsgiGateObject* g, PyObject* scope) {
    PyObject* client = dict_get(scope, g_names.client);
    if (client == nullptr && PyErr_Occurred()) {
        return nullptr;
    }
    if (client != nullptr && (PyTuple_CheckExact(client) || PyList_CheckExact(client)) && PySequence_Size(client) > 0) {
        PyObject* peer = PySequence_GetItem(client, 0);
        Py_DECREF(client);
        if (peer == nullptr) {
            return nullptr;
        }
        if (PyUnicode_CheckExact(peer) && plain_ipv4(peer)) {
            return peer;
        }
        Py_DECREF(peer);
    } else {
        Py_XDECREF(client);
    }
    return PyObject_CallOneArg(g->key_slow, scope);
}

// kHeader: the first value of the header, decoded as Starlette decodes it (latin-1) and stripped,
// as (name, value); nullptr with no error set when Python must read it (absent, blank, odd shapes:
// its fallback may be a coroutine).
PyObject* header_key(AsgiGateObject* g, PyObject* scope) {
    PyObject* headers = dict_get(scope, g_names.headers);
    if (headers == nullptr || !(PyList_CheckExact(headers) || PyTuple_CheckExact(headers))) {
        Py_XDECREF(headers);
        return nullptr;
    }
    const char* wanted = PyBytes_AS_STRING(g->key_raw);
    const Py_ssize_t wanted_size = PyBytes_GET_SIZE(g->key_raw);
    PyObject* key = nullptr;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(headers, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            break; // (a list pair, or anything else: Python's reading)
        }
        PyObject* name = PyTuple_GET_ITEM(item, 0);
        PyObject* value = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(name) || !PyBytes_CheckExact(value)) {
            break;
        }
        if (PyBytes_GET_SIZE(name) != wanted_size || std::memcmp(PyBytes_AS_STRING(name), wanted, wanted_size) != 0) {
            continue;
        }
        const char* text = PyBytes_AS_STRING(value);
        Py_ssize_t begin = 0;
        Py_ssize_t end = PyBytes_GET_SIZE(value);
        while (begin < end && is_space(static_cast<unsigned char>(text[begin]))) {
            ++begin;
        }
        while (end > begin && is_space(static_cast<unsigned char>(text[end - 1]))) {
            --end;
        }
        if (begin < end) {
            PyObject* decoded = PyUnicode_DecodeLatin1(text + begin, end - begin, nullptr);
            key = decoded == nullptr ? nullptr : PyTuple_Pack(2, g->key_name, decoded);
            Py_XDECREF(decoded);
        }
        break; // (the first value only, as Python's header() reads it)
    }
    Py_DECREF(headers);
    return key;
}

// ---- the headers ----

PyObject* ascii_bytes(const char* begin, const char* end) {
    return PyBytes_FromStringAndSize(begin, end - begin);
}

PyObject* decimal_bytes(std::int64_t value) {
    char buffer[24];
    return ascii_bytes(buffer, decimal(buffer, value));
}

// The RateLimit headers for a granted lease, `remaining` permits left, as a tuple of byte pairs.
PyObject* headers_of(AsgiGateObject* g, std::int64_t remaining) {
    const std::int64_t reset = g->period < 0 ? -1 : (remaining >= g->quota ? 0 : g->period);
    PyObject* items[5] = {};
    Py_ssize_t n = 0;
    bool ok = true;
    if (g->style != kLegacy) {
        const Py_ssize_t size = PyBytes_GET_SIZE(g->state_prefix);
        char buffer[320];
        PyObject* state = nullptr;
        if (size <= static_cast<Py_ssize_t>(sizeof(buffer)) - 64) {
            std::memcpy(buffer, PyBytes_AS_STRING(g->state_prefix), static_cast<std::size_t>(size));
            char* out = buffer + size;
            std::memcpy(out, ";r=", 3);
            out = decimal(out + 3, remaining);
            if (reset >= 0) {
                std::memcpy(out, ";t=", 3);
                out = decimal(out + 3, reset);
            }
            state = ascii_bytes(buffer, out);
        } else {
            state = reset < 0 ? PyBytes_FromFormat("%s;r=%lld", PyBytes_AS_STRING(g->state_prefix),
                                                   static_cast<long long>(remaining))
                              : PyBytes_FromFormat("%s;r=%lld;t=%lld", PyBytes_AS_STRING(g->state_prefix),
                                                   static_cast<long long>(remaining), static_cast<long long>(reset));
        }
        items[n++] = Py_NewRef(g->policy_pair);
        items[n] = pair(g_names.ratelimit, state);
        ok = items[n++] != nullptr;
    }
    if (ok && g->style != kIetf) {
        items[n++] = Py_NewRef(g->limit_pair);
        items[n] = pair(g_names.remaining, decimal_bytes(remaining));
        ok = items[n++] != nullptr;
        if (ok && reset >= 0) {
            items[n] = pair(g_names.reset, decimal_bytes(reset));
            ok = items[n++] != nullptr;
        }
    }
    PyObject* found = ok ? PyTuple_New(n) : nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (found != nullptr) {
            PyTuple_SET_ITEM(found, i, items[i]);
        } else {
            Py_XDECREF(items[i]);
        }
    }
    return found;
}

// ---- the gate ----

// admit(scope): None when Python must serve the request (no key read here, a handoff of an outer
// middleware); else (lease, key, ours, remaining): ours the headers' tuple for a granted lease
// (None without headers or for a refusal, whose headers Python writes), remaining -1 then.
PyObject* gate_admit(PyObject* self, PyObject* scope) {
    Decision d;
    const Admitted found = admit(as_gate(self), scope, d);
    if (found == Admitted::kError) {
        return nullptr;
    }
    if (found == Admitted::kPython) {
        Py_RETURN_NONE;
    }
    PyObject* left = PyLong_FromLongLong(d.remaining);
    PyObject* tuple = left == nullptr ? nullptr : PyTuple_New(4);
    if (tuple == nullptr) {
        Py_XDECREF(left);
        Py_XDECREF(d.ours);
        PyObject* r = PyObject_CallMethod(d.lease, "release", nullptr);
        Py_XDECREF(r);
        Py_DECREF(d.lease);
        Py_DECREF(d.key);
        return nullptr;
    }
    PyTuple_SET_ITEM(tuple, 0, d.lease);
    PyTuple_SET_ITEM(tuple, 1, d.key);
    PyTuple_SET_ITEM(tuple, 2, d.ours != nullptr ? d.ours : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(tuple, 3, left);
    return tuple;
}

PyObject* gate_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    static const char* kwlist[] = {"acquire",      "available",  "permit_count", "keyed",  "key_kind",
                                   "key_raw",      "key_name",   "key_slow",     "style",  "policy_pair",
                                   "state_prefix", "limit_pair", "quota",        "period", nullptr};
    PyObject *acquire, *available, *count, *key_raw, *key_name, *key_slow, *policy_pair, *state_prefix, *limit_pair;
    int keyed, key_kind, style;
    long long quota, period;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOpiOOOiOOOLL:AsgiGate", const_cast<char**>(kwlist), &acquire,
                                     &available, &count, &keyed, &key_kind, &key_raw, &key_name, &key_slow, &style,
                                     &policy_pair, &state_prefix, &limit_pair, &quota, &period)) {
        return nullptr;
    }
    if (key_kind < kNoKey || key_kind > kHeader || style < kNoHeaders || style > kBoth) {
        PyErr_SetString(PyExc_ValueError, "AsgiGate: key_kind or style out of range");
        return nullptr;
    }
    if (!PyLong_CheckExact(count) || (key_kind == kHeader && (!PyBytes_Check(key_raw) || !PyUnicode_Check(key_name))) ||
        (style != kNoHeaders && (!PyBytes_Check(state_prefix) || !PyCallable_Check(available)))) {
        PyErr_SetString(PyExc_TypeError, "AsgiGate: permit_count, key_raw, key_name, state_prefix or available");
        return nullptr;
    }
    auto* g = reinterpret_cast<AsgiGateObject*>(type->tp_alloc(type, 0));
    if (g == nullptr) {
        return nullptr;
    }
    g->acquire = Py_NewRef(acquire);
    g->available = Py_NewRef(available);
    g->count = Py_NewRef(count);
    g->keyed = keyed;
    g->key_kind = key_kind;
    g->key_raw = Py_NewRef(key_raw);
    g->key_name = Py_NewRef(key_name);
    g->key_slow = Py_NewRef(key_slow);
    g->style = style;
    g->policy_pair = Py_NewRef(policy_pair);
    g->state_prefix = Py_NewRef(state_prefix);
    g->limit_pair = Py_NewRef(limit_pair);
    g->quota = quota;
    g->period = period;
    g->vectorcall = gate_call;
    return reinterpret_cast<PyObject*>(g);
}

int gate_traverse(PyObject* self, visitproc visit, void* arg) {
    AsgiGateObject* g = as_gate(self);
    for (PyObject* o : {g->acquire, g->available, g->count, g->key_raw, g->key_name, g->key_slow, g->policy_pair,
                        g->state_prefix, g->limit_pair, g->app, g->fallback, g->decided, g->slow, g->sent, g->settle}) {
        Py_VISIT(o);
    }
    return 0;
}

int gate_clear(PyObject* self) {
    AsgiGateObject* g = as_gate(self);
    for (PyObject** o :
         {&g->acquire, &g->available, &g->count, &g->key_raw, &g->key_name, &g->key_slow, &g->policy_pair,
          &g->state_prefix, &g->limit_pair, &g->app, &g->fallback, &g->decided, &g->slow, &g->sent, &g->settle}) {
        Py_CLEAR(*o);
    }
    return 0;
}

void gate_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    Py_TYPE(self)->tp_free(self);
}

// bind(app, fallback, decided, slow, sent, settle): what calling the gate needs of its middleware
// (asgi_call.cpp). Once: a gate's request never sees it change.
PyObject* gate_bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    AsgiGateObject* g = as_gate(self);
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "bind(app, fallback, decided, slow, sent, settle)");
        return nullptr;
    }
    for (Py_ssize_t i = 0; i < nargs; ++i) {
        if (i != 4 && !PyCallable_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "bind: argument %zd must be callable", i + 1);
            return nullptr;
        }
    }
    if (g->app != nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "AsgiGate.bind: bound already");
        return nullptr;
    }
    PyObject** fields[] = {&g->app, &g->fallback, &g->decided, &g->slow, &g->sent, &g->settle};
    for (Py_ssize_t i = 0; i < nargs; ++i) {
        *fields[i] = Py_NewRef(args[i]);
    }
    Py_RETURN_NONE;
}

PyMethodDef gate_methods[] = {
    {"admit", gate_admit, METH_O,
     "admit($self, scope, /)\n--\n\nNone (Python serves the request), or (lease, key, headers or None, remaining)."},
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(gate_bind)), METH_FASTCALL,
     "bind($self, app, fallback, decided, slow, sent, settle, /)\n--\n\nWhat calling the gate needs of its "
     "middleware: its application and Python paths. Once."},
    {nullptr, nullptr, 0, nullptr}};

bool intern_names() {
    struct Entry {
        PyObject** slot;
        const char* text;
        bool bytes;
    };
    const Entry entries[] = {{&g_names.client, "client", false},
                             {&g_names.headers, "headers", false},
                             {&g_names.handoff, "permits.handoff", false},
                             {&g_names.ratelimit, "ratelimit", true},
                             {&g_names.remaining, "x-ratelimit-remaining", true},
                             {&g_names.reset, "x-ratelimit-reset", true}};
    for (const Entry& e : entries) {
        *e.slot = e.bytes ? PyBytes_FromString(e.text) : PyUnicode_InternFromString(e.text);
        if (*e.slot == nullptr) {
            return false;
        }
    }
    return true;
}

bool add_type(PyObject* m, PyTypeObject& type, const char* name) {
    if (PyType_Ready(&type) < 0) {
        return false;
    }
    Py_INCREF(&type);
    if (PyModule_AddObject(m, name, reinterpret_cast<PyObject*>(&type)) < 0) {
        Py_DECREF(&type);
        return false;
    }
    return true;
}

} // namespace

Admitted admit(AsgiGateObject* g, PyObject* scope, Decision& d) {
    if (!PyDict_CheckExact(scope)) {
        return Admitted::kPython;
    }
    PyObject* outer = dict_get(scope, g_names.handoff);
    if (outer != nullptr || PyErr_Occurred()) {
        Py_XDECREF(outer);
        return PyErr_Occurred() ? Admitted::kError : Admitted::kPython;
    }
    PyObject* key = nullptr;
    if (g->key_kind == kClientIp) {
        key = client_key(g, scope);
    } else if (g->key_kind == kHeader) {
        key = header_key(g, scope);
        if (key == nullptr && !PyErr_Occurred()) {
            return Admitted::kPython;
        }
    } else {
        key = Py_NewRef(Py_None);
    }
    if (key == nullptr) {
        return Admitted::kError;
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
        return Admitted::kError;
    }
    const int granted = PyObject_IsTrue(lease);
    std::int64_t remaining = -1;
    PyObject* ours = nullptr;
    if (granted > 0 && g->style != kNoHeaders) {
        PyObject* n = g->keyed ? PyObject_CallOneArg(g->available, key) : PyObject_CallNoArgs(g->available);
        const long long got = n == nullptr ? -1 : PyLong_AsLongLong(n);
        Py_XDECREF(n);
        if (!(got == -1 && PyErr_Occurred())) {
            remaining = got < 0 ? 0 : got;
            ours = headers_of(g, remaining);
        }
    }
    if (granted < 0 || (granted > 0 && g->style != kNoHeaders && ours == nullptr)) {
        bind::RaisedError error = bind::RaisedError::take(); // the request never runs: its permits go back
        PyObject* r = PyObject_CallMethod(lease, "release", nullptr);
        Py_XDECREF(r);
        error.restore();
        Py_DECREF(lease);
        Py_DECREF(key);
        return Admitted::kError;
    }
    d.lease = lease;
    d.key = key;
    d.ours = ours;
    d.remaining = remaining;
    d.granted = granted > 0;
    return Admitted::kDecided;
}

bool register_types(PyObject* m) {
    if (!intern_names()) {
        return false;
    }
    AsgiGateType.tp_name = "permits._core.AsgiGate";
    AsgiGateType.tp_basicsize = sizeof(AsgiGateObject);
    AsgiGateType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    AsgiGateType.tp_doc = "AsgiGate(*, acquire, available, permit_count, keyed, key_kind, key_raw, key_name, "
                          "key_slow, style, policy_pair, state_prefix, limit_pair, quota, period)\n--\n\nThe ASGI "
                          "middleware's key, decision and headers for a request (permits.asgi builds it); once bound, "
                          "calling it with (scope, receive, send) serves a request.";
    AsgiGateType.tp_new = gate_new;
    AsgiGateType.tp_dealloc = gate_dealloc;
    AsgiGateType.tp_traverse = gate_traverse;
    AsgiGateType.tp_clear = gate_clear;
    AsgiGateType.tp_methods = gate_methods;
    AsgiGateType.tp_vectorcall_offset = offsetof(AsgiGateObject, vectorcall);
    AsgiGateType.tp_call = PyVectorcall_Call;

    return add_type(m, AsgiGateType, "AsgiGate") && register_send(m) && register_call(m);
}

} // namespace permits::py_asgi_gate
