// What the WSGI gate's files share (wsgi_gate.cpp: the gate; wsgi_gate_request.cpp: the key and the
// headers read and written; wsgi_gate_response.cpp: the start_response wrapper and the response).
#pragma once

#include <Python.h>

#include <cstdint>

#include "handoff_type.hpp"

namespace permits::py_wsgi_gate {

// Header styles, as the Python side numbers them (headers=False, True/"ietf", "legacy", "both").
enum Style : int { kNoHeaders = 0, kIetf = 1, kLegacy = 2, kBoth = 3 };
// How the key is read: none (a plain limiter), REMOTE_ADDR, one header's value, or Python's.
enum KeyKind : int { kNoKey = 0, kClientIp = 1, kHeader = 2, kPythonKey = 3 };

struct Names {
    PyObject* handoff;     // "permits.handoff"
    PyObject* remote_addr; // "REMOTE_ADDR"
    PyObject* ratelimit;   // "RateLimit"
    PyObject* remaining;   // "X-RateLimit-Remaining"
    PyObject* reset;       // "X-RateLimit-Reset"
    PyObject* release;     // "release"
    PyObject* close;       // "close"
    PyObject* strip;       // "strip"
    PyObject* exc_info;    // "exc_info"
    PyObject* pop;         // "pop"
};
extern Names g_names;

struct GateObject {
    PyObject_HEAD PyObject* acquire; // limiter.acquire: (key, n) when keyed, else (n)
    PyObject* available;             // (key) or () -> int; nullptr without headers
    PyObject* count;                 // permit_count, an int
    int keyed;
    int key_kind;
    PyObject* key_env;      // kHeader: the environ's name of the header (HTTP_X_API_KEY)
    PyObject* key_name;     // kHeader: the key's first item, the header's name in lowercase
    PyObject* key_slow;     // (environ) -> key: what the C reading does not settle
    int style;              // Style
    PyObject* policy_pair;  // ("RateLimit-Policy", value), ietf and both
    PyObject* state_prefix; // the limiter's name as an RFC 8941 string
    PyObject* limit_pair;   // ("X-RateLimit-Limit", quota), legacy and both
    std::int64_t quota;
    std::int64_t period; // whole seconds until more permits; -1: time frees nothing (concurrency)
    PyObject* fallback;  // (app, environ, start_response): the whole Python path
    PyObject* refused;   // (app, environ, start_response, lease, key): a lease not granted
    PyObject* merge;     // (handoff, ours, remaining, lease, status, headers, exc_info, start_response)
    PyObject* costs;     // (result, handoff): a response whose routes' costs are settled on close
    vectorcallfunc vectorcall;
    PyObject* app;         // bound (the middleware, a subclass): called (environ, start_response)
    PyObject* python_gate; // bound to a Python gate: (app, environ, start_response) goes to it
};

// The start_response handed to the application.
struct StartObject {
    PyObject_HEAD GateObject* gate;
    PyObject* start_response;
    PyObject* handoff;
    PyObject* ours; // the headers' list, or nullptr without headers
    PyObject* lease;
    std::int64_t remaining; // -1 without headers
    vectorcallfunc vectorcall;
};

// The application's response: iterating it iterates the application's own; close() closes that
// and releases the request's leases (the handoff's route_leases, the gate's lease first in it).
struct ResponseObject {
    PyObject_HEAD PyObject* result;
    PyObject* handoff;
};

inline GateObject* as_gate(PyObject* o) {
    return reinterpret_cast<GateObject*>(o);
}
inline StartObject* as_start(PyObject* o) {
    return reinterpret_cast<StartObject*>(o);
}
inline ResponseObject* as_response(PyObject* o) {
    return reinterpret_cast<ResponseObject*>(o);
}

extern PyTypeObject GateType;
extern PyTypeObject StartType;
extern PyTypeObject ResponseType;
extern PyTypeObject SizedResponseType;

/// Whether `text` (a str) is a dotted-quad IPv4 address as Python's ipaddress reads it.
bool plain_ipv4(PyObject* text);
/// Whether `ch` is whitespace as str.strip() sees it.
bool is_space(Py_UCS4 ch);
/// Writes `value` in decimal at `out`; returns the end.
char* decimal(char* out, std::int64_t value);
/// The header (name, value); `value` a new reference, taken (nullptr: an error is set, or was).
PyObject* pair(PyObject* name, PyObject* value);
/// handoff.started = started (a new reference, taken), as a Python attribute assignment does it.
void set_started(py_handoff::HandoffObject* h, PyObject* started);
/// environ.get(name) as a new reference; nullptr when absent (no error) or on an error (set).
PyObject* dict_get(PyObject* dict, PyObject* name);
/// The request's key (a new reference), or nullptr with an error set.
PyObject* key_of(GateObject* g, PyObject* environ);
/// The RateLimit headers' list for a granted lease, `remaining` permits left.
PyObject* headers_of(GateObject* g, std::int64_t remaining);
/// Releases every lease of the handoff's route_leases (emptying it); false with the first error set.
bool release_all(PyObject* handoff);
/// The start_response wrapper's call.
PyObject* start_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);
/// Readies the start_response and response types; false with an error set.
bool ready_parts();

} // namespace permits::py_wsgi_gate
