// permits._core.AsgiSend: the send a gated ASGI application is given (permits/asgi.py): it adds the
// RateLimit headers the gate wrote to the response's start and counts the body's bytes; a route's
// rejection or figures, an application's own header of ours and a message that is no dict go back to
// Python (its `slow` callable).
#include "asgi_gate_parts.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "free_threading.hpp"
#include "handoff_type.hpp"
#include "wsgi_gate_parts.hpp"

namespace permits::py_asgi_gate {
namespace {

using py_wsgi_gate::dict_get;
using py_wsgi_gate::set_started;

// The send handed to the application.
struct SendObject {
    PyObject_HEAD PyObject* send;
    PyObject* handoff;
    PyObject* ours; // a tuple of header pairs, or nullptr without headers
    PyObject* slow; // (sender, message) -> awaitable: the start Python answers
    PyObject* sent; // what a dropped message's send returns (an awaitable done at once)
    PyObject* lease;
    PyObject* scope;
    PyObject* receive;
    std::int64_t remaining; // -1 without headers
    int replaced;           // a route's on_rejected response replaced the application's: drop the rest
    vectorcallfunc vectorcall;
};

PyTypeObject SendType = {PyVarObject_HEAD_INIT(nullptr, 0)};

SendObject* as_send(PyObject* o) {
    return reinterpret_cast<SendObject*>(o);
}

struct Names {
    PyObject* type;      // "type"
    PyObject* body;      // "body"
    PyObject* headers;   // "headers"
    PyObject* start;     // "http.response.start"
    PyObject* body_type; // "http.response.body"
};
Names g_names{};

bool intern_names() {
    struct Entry {
        PyObject** slot;
        const char* text;
    };
    const Entry entries[] = {{&g_names.type, "type"},
                             {&g_names.body, "body"},
                             {&g_names.headers, "headers"},
                             {&g_names.start, "http.response.start"},
                             {&g_names.body_type, "http.response.body"}};
    for (const Entry& e : entries) {
        *e.slot = PyUnicode_InternFromString(e.text);
        if (*e.slot == nullptr) {
            return false;
        }
    }
    return true;
}

// Whether a header's name (bytes, any case) is one of ours.
bool is_ours(const char* name, Py_ssize_t size) {
    static constexpr std::string_view kOurs[] = {"ratelimit",         "ratelimit-policy",      "retry-after",
                                                 "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"};
    if (size < 9 || size > 21) { // (their lengths: none is read further)
        return false;
    }
    const char first = static_cast<char>(name[0] | 0x20);
    if (first != 'r' && first != 'x') {
        return false;
    }
    for (std::string_view ours : kOurs) {
        if (static_cast<Py_ssize_t>(ours.size()) != size) {
            continue;
        }
        bool same = true;
        for (Py_ssize_t j = 0; j < size && same; ++j) {
            const char ch = (name[j] >= 'A' && name[j] <= 'Z') ? static_cast<char>(name[j] - 'A' + 'a') : name[j];
            same = ch == ours[static_cast<std::size_t>(j)];
        }
        if (same) {
            return true;
        }
    }
    return false;
}

// Whether an application's response start sets a header of ours (then Python merges: its own wins).
bool sets_ours(PyObject* headers) {
    if (!(PyList_CheckExact(headers) || PyTuple_CheckExact(headers))) {
        return true;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(headers, i);
        if (!(PyTuple_CheckExact(item) || PyList_CheckExact(item)) || PySequence_Fast_GET_SIZE(item) != 2) {
            return true;
        }
        PyObject* name = PySequence_Fast_GET_ITEM(item, 0);
        if (!PyBytes_CheckExact(name) || is_ours(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))) {
            return true;
        }
    }
    return false;
}

// The response's start with our headers after its own: a new dict, the application's untouched.
PyObject* with_ours(PyObject* message, PyObject* headers, PyObject* ours) {
    PyObject* copy = PyDict_Copy(message);
    if (copy == nullptr) {
        return nullptr;
    }
    PyObject* merged = headers == nullptr ? PySequence_List(ours) : PySequence_List(headers);
    if (merged != nullptr && headers != nullptr) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ours) && merged != nullptr; ++i) {
            if (PyList_Append(merged, PyTuple_GET_ITEM(ours, i)) < 0) {
                Py_CLEAR(merged);
            }
        }
    }
    if (merged == nullptr || PyDict_SetItem(copy, g_names.headers, merged) < 0) {
        Py_XDECREF(merged);
        Py_DECREF(copy);
        return nullptr;
    }
    Py_DECREF(merged);
    return copy;
}

PyObject* send_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    SendObject* s = as_send(self);
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "send(message)");
        return nullptr;
    }
    if (s->replaced) {
        return Py_NewRef(s->sent); // the framework's answer to a route's rejection, replaced
    }
    PyObject* message = args[0];
    if (!PyDict_CheckExact(message)) {
        PyObject* call[] = {self, message};
        return PyObject_Vectorcall(s->slow, call, 2, nullptr);
    }
    auto* h = reinterpret_cast<py_handoff::HandoffObject*>(s->handoff);
    PyObject* kind = dict_get(message, g_names.type);
    if (kind == nullptr) {
        if (PyErr_Occurred()) {
            return nullptr;
        }
        PyErr_SetString(PyExc_KeyError, "type");
        return nullptr;
    }
    PyObject* out = Py_NewRef(message);
    if (same_text(kind, g_names.body_type)) {
        PyObject* body = dict_get(message, g_names.body);
        if (body != nullptr) {
            const Py_ssize_t size = PyObject_Length(body);
            Py_DECREF(body);
            if (size < 0) {
                Py_DECREF(kind);
                Py_DECREF(out);
                return nullptr;
            }
            h->body_size += size;
        } else if (PyErr_Occurred()) {
            Py_DECREF(kind);
            Py_DECREF(out);
            return nullptr;
        }
    } else if (same_text(kind, g_names.start)) {
        if (h->rejection != Py_None || py_handoff::size(h, &py_handoff::HandoffObject::quotas) > 0) {
            Py_DECREF(kind);
            Py_DECREF(out);
            PyObject* call[] = {self, message};
            return PyObject_Vectorcall(s->slow, call, 2, nullptr);
        }
        if (s->ours != nullptr) {
            PyObject* headers = dict_get(message, g_names.headers);
            if (headers == nullptr && PyErr_Occurred()) {
                Py_DECREF(kind);
                Py_DECREF(out);
                return nullptr;
            }
            if (headers != nullptr && headers != Py_None && sets_ours(headers)) {
                Py_DECREF(headers);
                Py_DECREF(kind);
                Py_DECREF(out);
                PyObject* call[] = {self, message};
                return PyObject_Vectorcall(s->slow, call, 2, nullptr);
            }
            PyObject* merged = with_ours(message, headers == Py_None ? nullptr : headers, s->ours);
            Py_XDECREF(headers);
            Py_DECREF(out);
            if (merged == nullptr) {
                Py_DECREF(kind);
                return nullptr;
            }
            out = merged;
        }
        set_started(h, Py_NewRef(out));
    } else if (h->started == Py_None) { // a WebSocket's answer: accepted, denied or closed
        set_started(h, Py_NewRef(out));
    }
    Py_DECREF(kind);
    PyObject* r = PyObject_CallOneArg(s->send, out);
    Py_DECREF(out);
    return r;
}

PyObject* send_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
    PyObject *send, *handoff, *ours, *slow, *sent, *lease, *scope, *receive;
    long long remaining = -1;
    if ((kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) ||
        !PyArg_ParseTuple(args, "OOOOOOOOL:AsgiSend", &send, &handoff, &ours, &slow, &sent, &lease, &scope, &receive,
                          &remaining)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "AsgiSend takes positional arguments only");
        }
        return nullptr;
    }
    if (!py_handoff::check(handoff) || (ours != Py_None && !PyTuple_CheckExact(ours))) {
        PyErr_SetString(PyExc_TypeError, "AsgiSend: handoff must be a Handoff, ours a tuple or None");
        return nullptr;
    }
    return new_send(send, handoff, ours == Py_None ? nullptr : ours, slow, sent, lease, scope, receive, remaining);
}

int send_traverse(PyObject* self, visitproc visit, void* arg) {
    SendObject* s = as_send(self);
    for (PyObject* o : {s->send, s->handoff, s->ours, s->slow, s->sent, s->lease, s->scope, s->receive}) {
        Py_VISIT(o);
    }
    return 0;
}

int send_clear(PyObject* self) {
    SendObject* s = as_send(self);
    for (PyObject** o : {&s->send, &s->handoff, &s->ours, &s->slow, &s->sent, &s->lease, &s->scope, &s->receive}) {
        Py_CLEAR(*o);
    }
    return 0;
}

void send_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    send_clear(self);
    Py_TYPE(self)->tp_free(self);
}

PyObject* send_get(PyObject* self, void* which) {
    SendObject* s = as_send(self);
    PyObject* const fields[] = {s->send, s->handoff, s->lease, s->scope, s->receive};
    const auto i = reinterpret_cast<std::intptr_t>(which);
    if (i == 5) {
        return PyLong_FromLongLong(s->remaining);
    }
    if (i == 6) {
        return PyBool_FromLong(s->replaced);
    }
    return Py_NewRef(fields[i] != nullptr ? fields[i] : Py_None);
}

int send_set_replaced(PyObject* self, PyObject* value, void*) {
    const int truth = value == nullptr ? 0 : PyObject_IsTrue(value);
    if (truth < 0) {
        return -1;
    }
    as_send(self)->replaced = truth;
    return 0;
}

PyGetSetDef send_getset[] = {
    {"send", send_get, nullptr, "The server's send.", reinterpret_cast<void*>(0)},
    {"handoff", send_get, nullptr, "The request's Handoff.", reinterpret_cast<void*>(1)},
    {"lease", send_get, nullptr, "The request's lease.", reinterpret_cast<void*>(2)},
    {"scope", send_get, nullptr, "The request's scope.", reinterpret_cast<void*>(3)},
    {"receive", send_get, nullptr, "The request's receive.", reinterpret_cast<void*>(4)},
    {"remaining", send_get, nullptr, "The permits left when the lease was granted; -1 without headers.",
     reinterpret_cast<void*>(5)},
    {"replaced", send_get, send_set_replaced,
     "True once a route's on_rejected response replaced the application's: what follows is dropped.",
     reinterpret_cast<void*>(6)},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

} // namespace

PyObject* new_send(PyObject* send, PyObject* handoff, PyObject* ours, PyObject* slow, PyObject* sent, PyObject* lease,
                   PyObject* scope, PyObject* receive, std::int64_t remaining) {
    auto* s = PyObject_GC_New(SendObject, &SendType);
    if (s == nullptr) {
        return nullptr;
    }
    s->send = Py_NewRef(send);
    s->handoff = Py_NewRef(handoff);
    s->ours = Py_XNewRef(ours);
    s->slow = Py_NewRef(slow);
    s->sent = Py_NewRef(sent);
    s->lease = Py_NewRef(lease);
    s->scope = Py_NewRef(scope);
    s->receive = Py_NewRef(receive);
    s->remaining = remaining;
    s->replaced = 0;
    s->vectorcall = send_call;
    PyObject_GC_Track(s);
    return reinterpret_cast<PyObject*>(s);
}

bool register_send(PyObject* m) {
    if (!intern_names()) {
        return false;
    }
    SendType.tp_name = "permits._core.AsgiSend";
    SendType.tp_basicsize = sizeof(SendObject);
    SendType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    SendType.tp_doc = "AsgiSend(send, handoff, ours, slow, sent, lease, scope, receive, remaining, /)\n--\n\nThe send "
                      "a gated ASGI application is given: the RateLimit headers added to the response's start.";
    SendType.tp_new = send_new;
    SendType.tp_dealloc = send_dealloc;
    SendType.tp_traverse = send_traverse;
    SendType.tp_clear = send_clear;
    SendType.tp_getset = send_getset;
    SendType.tp_vectorcall_offset = offsetof(SendObject, vectorcall);
    SendType.tp_call = PyVectorcall_Call;
    if (PyType_Ready(&SendType) < 0) {
        return false;
    }
    Py_INCREF(&SendType);
    if (PyModule_AddObject(m, "AsgiSend", reinterpret_cast<PyObject*>(&SendType)) < 0) {
        Py_DECREF(&SendType);
        return false;
    }
    return true;
}

} // namespace permits::py_asgi_gate
