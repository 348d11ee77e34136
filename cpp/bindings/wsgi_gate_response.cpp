// The WSGI gate's start_response wrapper (the RateLimit headers added) and its response (whose
// close() releases the request's leases).
#include <cstring>
#include <optional>

#include "free_threading.hpp"
#include "handoff_type.hpp"
#include "raised_error.hpp"
#include "wsgi_gate_parts.hpp"

namespace permits::py_wsgi_gate {

PyTypeObject StartType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject ResponseType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject SizedResponseType = {PyVarObject_HEAD_INIT(nullptr, 0)};

namespace {

using bind::RaisedError;

// getattr(obj, name, None) as a new reference; nullptr with no error when absent.
// (Without the AttributeError a plain getattr would make and drop: a list has no close().)
PyObject* optional_attr(PyObject* obj, PyObject* name) {
    PyObject* found = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject_GetOptionalAttr(obj, name, &found);
#else
    _PyObject_LookupAttr(obj, name, &found);
#endif
    return found;
}

// Whether a response header's name is one the gate adds (the application's own wins): then the

// merge is Python's. ASCII names compared without case.
bool ours_named(PyObject* name) {
    static const char* const kOurs[] = {"ratelimit", "ratelimit-policy", "retry-after"};
    if (!PyUnicode_Check(name) || !PyUnicode_IS_ASCII(name)) {
        return true; // not an ASCII str: Python judges it
    }
    const Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    const auto* c = static_cast<const char*>(PyUnicode_DATA(name));
    for (const char* ours : kOurs) {
        if (static_cast<Py_ssize_t>(std::strlen(ours)) != n) {
            continue;
        }
        bool same = true;
        for (Py_ssize_t i = 0; i < n && same; ++i) {
            const char ch = (c[i] >= 'A' && c[i] <= 'Z') ? static_cast<char>(c[i] - 'A' + 'a') : c[i];
            same = ch == ours[i];
        }
        if (same) {
            return true;
        }
    }
    return false;
}

// ---- the start_response wrapper ----
int start_traverse(PyObject* self, visitproc visit, void* arg) {
    StartObject* s = as_start(self);
    Py_VISIT(reinterpret_cast<PyObject*>(s->gate));
    Py_VISIT(s->start_response);
    Py_VISIT(s->handoff);
    Py_VISIT(s->ours);
    Py_VISIT(s->lease);
    return 0;
}

int start_clear(PyObject* self) {
    StartObject* s = as_start(self);
    Py_CLEAR(s->gate);
    Py_CLEAR(s->start_response);
    Py_CLEAR(s->handoff);
    Py_CLEAR(s->ours);
    Py_CLEAR(s->lease);
    return 0;
}

void start_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    start_clear(self);
    Py_TYPE(self)->tp_free(self);
}

// ---- the response ----
PyObject* response_iter(PyObject* self) {
    return PyObject_GetIter(as_response(self)->result);
}

Py_ssize_t response_len(PyObject* self) {
    return PyObject_Length(as_response(self)->result);
}

int response_traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(as_response(self)->result);
    Py_VISIT(as_response(self)->handoff);
    return 0;
}

int response_clear(PyObject* self) {
    Py_CLEAR(as_response(self)->result);
    Py_CLEAR(as_response(self)->handoff);
    return 0;
}

void response_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    response_clear(self);
    Py_TYPE(self)->tp_free(self);
}

PyObject* response_close(PyObject* self, PyObject*) {
    ResponseObject* r = as_response(self);
    bool ok = true;
    PyObject* close = optional_attr(r->result, g_names.close);
    if (close == nullptr && PyErr_Occurred()) {
        ok = false;
    } else if (close != nullptr) {
        PyObject* done = PyObject_CallNoArgs(close);
        Py_DECREF(close);
        ok = done != nullptr;
        Py_XDECREF(done);
    }
    if (!ok) {
        RaisedError error = RaisedError::take();
        release_all(r->handoff);
        error.restore(); // (the application's close() error wins, as a Python finally would have it)
        return nullptr;
    }
    if (!release_all(r->handoff)) {
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyMethodDef response_methods[] = {
    {"close", response_close, METH_NOARGS,
     "close($self, /)\n--\n\nCloses the application's response and releases the request's leases."},
    {nullptr, nullptr, 0, nullptr}};

PySequenceMethods sized_sequence = {};

// The list's last item, taken out (a new reference); nullptr when it is empty (no error set) or on
// an error (set). Free-threaded, through list.pop(), which locks the list: two threads closing one
// response never take the same lease twice.
PyObject* pop_last(PyObject* list) {
    if constexpr (bind::kFreeThreaded) {
        if (PyList_GET_SIZE(list) == 0) {
            return nullptr;
        }
        PyObject* item = PyObject_CallMethodNoArgs(list, g_names.pop);
        if (item == nullptr && PyErr_ExceptionMatches(PyExc_IndexError)) {
            PyErr_Clear(); // (emptied by another thread meanwhile)
        }
        return item;
    }
    const Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0) {
        return nullptr;
    }
    PyObject* item = Py_NewRef(PyList_GET_ITEM(list, n - 1));
    if (PyList_SetSlice(list, n - 1, n, nullptr) < 0) {
        Py_DECREF(item);
        return nullptr;
    }
    return item;
}

} // namespace

// handoff.started = started (a new reference taken), as a Python attribute assignment does it:
// free-threaded, under the object's critical section, so that the old value is dropped once.
void set_started(py_handoff::HandoffObject* h, PyObject* started) {
    PyObject* was = nullptr;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(reinterpret_cast<PyObject*>(h));
    was = h->started;
    bind::store_shared(h->started, started);
    Py_END_CRITICAL_SECTION();
#else
    was = h->started;
    h->started = started;
#endif
    Py_XDECREF(was);
}

// (Each lease once: a second close() releases nothing; a release that raises does not keep the others.)
bool release_all(PyObject* handoff) {
    PyObject* leases = bind::load_shared(reinterpret_cast<py_handoff::HandoffObject*>(handoff)->route_leases);
    std::optional<RaisedError> first;
    while (leases != nullptr) {
        PyObject* lease = pop_last(leases);
        if (lease == nullptr && !PyErr_Occurred()) {
            break;
        }
        PyObject* r = lease == nullptr ? nullptr : PyObject_CallMethodNoArgs(lease, g_names.release);
        Py_XDECREF(lease);
        if (r == nullptr) {
            if (first) {
                PyErr_Clear();
            } else {
                first.emplace(RaisedError::take());
            }
        }
        Py_XDECREF(r);
    }
    if (first) {
        first->restore();
        return false;
    }
    return true;
}

PyObject* start_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    StartObject* s = as_start(self);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    const bool by_keyword =
        nkw == 1 && nargs == 2 && PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), g_names.exc_info) == 0;
    if (!by_keyword && (nkw != 0 || nargs < 2 || nargs > 3)) {
        PyErr_SetString(PyExc_TypeError, "start_response(status, headers, exc_info=None)");
        return nullptr;
    }
    PyObject* exc_info = nargs + nkw == 3 ? args[2] : Py_None; // (a keyword's value follows the positionals)
    PyObject* status = args[0];
    PyObject* headers = args[1];
    auto* handoff = reinterpret_cast<py_handoff::HandoffObject*>(s->handoff);
    bool simple = PyList_CheckExact(headers) && py_handoff::size(handoff, &py_handoff::HandoffObject::quotas) == 0;
    if (simple && s->ours != nullptr) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers) && simple; ++i) {
            PyObject* item = PyList_GET_ITEM(headers, i);
            simple = PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2 && !ours_named(PyTuple_GET_ITEM(item, 0));
        }
    }
    if (!simple) {
        PyObject* call[] = {
            s->handoff,       s->ours != nullptr ? s->ours : Py_None, nullptr, s->lease, status, headers, exc_info,
            s->start_response};
        call[2] = PyLong_FromLongLong(s->remaining);
        if (call[2] == nullptr) {
            return nullptr;
        }
        PyObject* r = PyObject_Vectorcall(s->gate->merge, call, 8, nullptr);
        Py_DECREF(call[2]);
        return r;
    }
    PyObject* sent = s->ours == nullptr ? Py_NewRef(headers) : PySequence_Concat(headers, s->ours);
    if (sent == nullptr) {
        return nullptr;
    }
    PyObject* started = PyTuple_Pack(2, status, sent);
    if (started == nullptr) {
        Py_DECREF(sent);
        return nullptr;
    }
    set_started(handoff, started);
    PyObject* call[] = {status, sent, exc_info};
    PyObject* r = PyObject_Vectorcall(s->start_response, call, 3, nullptr);
    Py_DECREF(sent);
    return r;
}

bool ready_parts() {
    StartType.tp_name = "permits._core._GateStart";
    StartType.tp_basicsize = sizeof(StartObject);
    StartType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    StartType.tp_doc = "The start_response a gated application is given: the RateLimit headers added.";
    StartType.tp_dealloc = start_dealloc;
    StartType.tp_traverse = start_traverse;
    StartType.tp_clear = start_clear;
    StartType.tp_vectorcall_offset = offsetof(StartObject, vectorcall);
    StartType.tp_call = PyVectorcall_Call;

    for (PyTypeObject* type : {&ResponseType, &SizedResponseType}) {
        type->tp_basicsize = sizeof(ResponseObject);
        type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
        type->tp_doc = "A gated application's response: close() also releases the request's leases.";
        type->tp_dealloc = response_dealloc;
        type->tp_traverse = response_traverse;
        type->tp_clear = response_clear;
        type->tp_iter = response_iter;
        type->tp_methods = response_methods;
    }
    ResponseType.tp_name = "permits._core._GateResponse";
    SizedResponseType.tp_name = "permits._core._GateSizedResponse";
    sized_sequence.sq_length = response_len; // (a list or tuple: a server may use its length)
    SizedResponseType.tp_as_sequence = &sized_sequence;
    return PyType_Ready(&StartType) == 0 && PyType_Ready(&ResponseType) == 0 && PyType_Ready(&SizedResponseType) == 0;
}

} // namespace permits::py_wsgi_gate
