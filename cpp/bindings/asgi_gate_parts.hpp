// What the ASGI gate's files share (asgi_gate.cpp: the gate, the key, the decision and the headers;
// asgi_send.cpp: the send handed to the application; asgi_call.cpp: the awaitable a request runs in).
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstring>

namespace permits::py_asgi_gate {

enum Style : int { kNoHeaders = 0, kIetf = 1, kLegacy = 2, kBoth = 3 };
enum KeyKind : int { kNoKey = 0, kClientIp = 1, kHeader = 2 };

struct AsgiGateObject {
    PyObject_HEAD PyObject* acquire; // limiter.acquire: (key, n) when keyed, else (n); never blocks
    PyObject* available;             // (key) or () -> int; nullptr without headers
    PyObject* count;                 // permit_count
    int keyed;
    int key_kind;
    PyObject* key_raw;      // kHeader: the header's name as the scope has it (lowercase bytes)
    PyObject* key_name;     // kHeader: the key's first item (str)
    PyObject* key_slow;     // kClientIp: (scope) -> key, what the C reading does not settle
    int style;              // Style
    PyObject* policy_pair;  // (b"ratelimit-policy", value)
    PyObject* state_prefix; // the limiter's name as an RFC 8941 string (bytes)
    PyObject* limit_pair;   // (b"x-ratelimit-limit", quota)
    std::int64_t quota;
    std::int64_t period; // whole seconds until more permits; -1: time frees nothing
    // Set by bind(): the middleware's request as a call (asgi_call.cpp). nullptr until bound.
    PyObject* app;      // the wrapped application
    PyObject* fallback; // (scope, receive, send) -> awaitable: the middleware's Python path
    PyObject* decided;  // (scope, receive, send, lease, key, remaining) -> awaitable: a refusal, a cost
    PyObject* slow;     // AsgiSend's slow: (sender, message) -> awaitable
    PyObject* sent;     // what a dropped message's send returns
    PyObject* settle;   // (handoff) -> None: the routes' cost settlements, once the response is sent
    vectorcallfunc vectorcall;
};

inline AsgiGateObject* as_gate(PyObject* o) {
    return reinterpret_cast<AsgiGateObject*>(o);
}

/// Whether `text` is the str `known` (interned): the same object, as a message's literal type
/// usually is, or equal code points, compared without a call.
inline bool same_text(PyObject* text, PyObject* known) {
    if (text == known) {
        return true;
    }
    if (!PyUnicode_Check(text)) {
        return false;
    }
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    return n == PyUnicode_GET_LENGTH(known) && PyUnicode_KIND(text) == PyUnicode_KIND(known) &&
           std::memcmp(PyUnicode_DATA(text), PyUnicode_DATA(known),
                       static_cast<std::size_t>(n) * PyUnicode_KIND(text)) == 0;
}

/// A request's decision: the lease (granted or not), its key, the headers' pairs (nullptr without
/// headers or for a refusal) and the permits left (-1 then). New references.
struct Decision {
    PyObject* lease = nullptr;
    PyObject* key = nullptr;
    PyObject* ours = nullptr;
    std::int64_t remaining = -1;
    bool granted = false;
};
enum class Admitted { kPython, kDecided, kError };

/// Reads the key from `scope`, acquires and writes the headers. kPython: Python must serve the request
/// (nothing acquired); kError: an error is set (nothing held).
Admitted admit(AsgiGateObject* g, PyObject* scope, Decision& d);
/// A new AsgiSend (asgi_send.cpp); `ours` may be nullptr. nullptr with an error set.
PyObject* new_send(PyObject* send, PyObject* handoff, PyObject* ours, PyObject* slow, PyObject* sent, PyObject* lease,
                   PyObject* scope, PyObject* receive, std::int64_t remaining);
/// The gate's call: (scope, receive, send) -> the request's awaitable (asgi_call.cpp).
PyObject* gate_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);
/// Adds AsgiSend to the module `m`; false with a Python error set.
bool register_send(PyObject* m);
/// Adds AsgiCall, the request's awaitable, to the module `m`; false with a Python error set.
bool register_call(PyObject* m);

} // namespace permits::py_asgi_gate
