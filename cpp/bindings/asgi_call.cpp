// permits._core.AsgiCall: what calling a bound AsgiGate returns, the awaitable one ASGI request runs
// in. Awaited, it does what the middleware's `async def` would, without a Python frame of its own:
// the key, the decision and the headers (admit), then the application behind an AsgiSend, awaited
// by delegating to it (as `await` does); when the application returns, raises, is cancelled or is
// closed, the routes' leases and the request's lease are released. What it does not serve (not an
// HTTP request, a key Python reads, a refusal) it hands to the middleware's Python coroutine and
// delegates to that. Like a coroutine it has send, throw and close (so asyncio.iscoroutine() accepts
// it) and does nothing until first sent to.
#include <Python.h>

#include <cstddef>
#include <initializer_list>

#include "asgi_gate_parts.hpp"
#include "free_threading.hpp"
#include "handoff_type.hpp"
#include "raised_error.hpp"
#include "wsgi_gate_parts.hpp"

namespace permits::py_asgi_gate {
namespace {

using bind::RaisedError;

enum State : int { kFresh = 0, kRunning = 1, kDone = 2 };
// How the awaited application ended: returned (its routes' costs settle), raised, or was closed.
enum class Ended { kReturned, kRaised, kClosed };

struct CallObject {
    PyObject_HEAD PyObject* gate;
    PyObject* scope; // the request, until it starts
    PyObject* receive;
    PyObject* send;
    PyObject* inner;   // the iterator it delegates to, once started
    PyObject* lease;   // the request's lease while this call owns it
    PyObject* handoff; // the request's handoff while this call owns it
    int state;
    bool busy; // a send, throw or close is under way
};

PyTypeObject CallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

CallObject* as_call(PyObject* o) {
    return reinterpret_cast<CallObject*>(o);
}

// One caller at a time, as a coroutine allows: another (a second thread, or the request re-entering
// itself) gets the coroutine's error instead of a request started twice.
class Busy {
public:
    explicit Busy(CallObject* c) : c_(c), ok_(bind::claim(c->busy)) {
        if (!ok_) {
            PyErr_SetString(PyExc_ValueError, "coroutine already executing");
        }
    }
    ~Busy() {
        if (ok_) {
            bind::store_shared(c_->busy, false);
        }
    }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;
    [[nodiscard]] bool ok() const { return ok_; }

private:
    CallObject* c_;
    bool ok_;
};

struct Names {
    PyObject* type;    // "type"
    PyObject* http;    // "http"
    PyObject* handoff; // "permits.handoff"
    PyObject* release; // "release"
    PyObject* throw_;  // "throw"
    PyObject* close;   // "close"
    PyObject* value;   // "value"
};
Names g_names{};

// The iterator `await awaitable` runs: a coroutine (or generator) itself, else what __await__ returns.
PyObject* await_iter(PyObject* awaitable) {
    if (PyCoro_CheckExact(awaitable) || PyGen_CheckExact(awaitable)) {
        return Py_NewRef(awaitable);
    }
    PyAsyncMethods* am = Py_TYPE(awaitable)->tp_as_async;
    if (am == nullptr || am->am_await == nullptr) {
        PyErr_Format(PyExc_TypeError, "object %.100s can't be used in 'await' expression", Py_TYPE(awaitable)->tp_name);
        return nullptr;
    }
    PyObject* it = am->am_await(awaitable);
    if (it != nullptr && (PyCoro_CheckExact(it) || !PyIter_Check(it))) {
        PyErr_Format(PyExc_TypeError, "__await__() returned %s",
                     PyCoro_CheckExact(it) ? "a coroutine" : "non-iterator");
        Py_CLEAR(it);
    }
    return it;
}

// Python's `finally`: an error raised while cleaning up replaces the one in flight, its context.
void chain(PyObject*& pending) {
    PyObject* now = RaisedError::take_exception();
    if (pending != nullptr && now != pending) {
        PyException_SetContext(now, pending); // (steals pending)
    } else {
        Py_XDECREF(pending);
    }
    pending = now;
}

// The end of the request: the routes' costs settled (when the application returned), their leases
// and the request's released. With `ended` kRaised an error is set on entry; false: one is set on exit.
bool finish(CallObject* c, Ended ended) {
    c->state = kDone;
    Py_CLEAR(c->inner);
    PyObject* handoff = c->handoff;
    PyObject* lease = c->lease;
    c->handoff = nullptr;
    c->lease = nullptr;
    PyObject* pending = ended == Ended::kRaised ? RaisedError::take_exception() : nullptr;
    if (handoff != nullptr) {
        auto* h = reinterpret_cast<py_handoff::HandoffObject*>(handoff);
        if (ended == Ended::kReturned && py_handoff::size(h, &py_handoff::HandoffObject::charges) > 0) {
            PyObject* r = PyObject_CallOneArg(as_gate(c->gate)->settle, handoff);
            if (r == nullptr) {
                chain(pending);
            }
            Py_XDECREF(r);
        }
        if (!py_wsgi_gate::release_all(handoff)) {
            chain(pending);
        }
        Py_DECREF(handoff);
    }
    if (lease != nullptr) {
        PyObject* r = PyObject_CallMethodNoArgs(lease, g_names.release);
        if (r == nullptr) {
            chain(pending);
        }
        Py_XDECREF(r);
        Py_DECREF(lease);
    }
    if (pending != nullptr) {
        RaisedError::raise(pending);
        return false;
    }
    return true;
}

// Whether `scope` is a plain HTTP request's (false: Python serves it); -1 on an error.
int is_http(PyObject* scope) {
    if (!PyDict_CheckExact(scope)) {
        return 0;
    }
    PyObject* kind = py_wsgi_gate::dict_get(scope, g_names.type);
    if (kind == nullptr) {
        return PyErr_Occurred() ? -1 : 0;
    }
    const int http = same_text(kind, g_names.http) ? 1 : 0;
    Py_DECREF(kind);
    return http;
}

// The request's awaitable: the application behind our send when admitted here, else the
// middleware's Python path. False with an error set (and nothing held).
bool start(CallObject* c) {
    AsgiGateObject* g = as_gate(c->gate);
    PyObject* scope = c->scope;
    PyObject* awaitable = nullptr;
    const int http = is_http(scope);
    Decision d;
    const Admitted admitted = http < 0 ? Admitted::kError : http == 0 ? Admitted::kPython : admit(g, scope, d);
    if (admitted == Admitted::kError) {
        finish(c, Ended::kRaised);
        return false;
    }
    if (admitted == Admitted::kPython) {
        PyObject* args[] = {scope, c->receive, c->send};
        awaitable = PyObject_Vectorcall(g->fallback, args, 3, nullptr);
    } else if (!d.granted) {
        // A refusal: the middleware's Python coroutine answers it, and owns the lease.
        PyObject* remaining = PyLong_FromLongLong(d.remaining);
        if (remaining != nullptr) {
            PyObject* args[] = {scope, c->receive, c->send, d.lease, d.key, remaining};
            awaitable = PyObject_Vectorcall(g->decided, args, 6, nullptr);
            Py_DECREF(remaining);
        }
        if (awaitable == nullptr) {
            c->lease = Py_NewRef(d.lease); // (finish gives it back)
        }
    } else {
        c->lease = Py_NewRef(d.lease);
        c->handoff = py_handoff::make();
        PyObject* sender = nullptr;
        if (c->handoff != nullptr && PyDict_SetItem(scope, g_names.handoff, c->handoff) == 0) {
            sender = new_send(c->send, c->handoff, d.ours, g->slow, g->sent, d.lease, scope, c->receive, d.remaining);
        }
        if (sender != nullptr) {
            PyObject* args[] = {scope, c->receive, sender};
            awaitable = PyObject_Vectorcall(g->app, args, 3, nullptr);
            Py_DECREF(sender);
        }
    }
    Py_XDECREF(d.lease);
    Py_XDECREF(d.key);
    Py_XDECREF(d.ours);
    Py_CLEAR(c->scope);
    Py_CLEAR(c->receive);
    Py_CLEAR(c->send);
    if (awaitable != nullptr) {
        c->inner = await_iter(awaitable);
        Py_DECREF(awaitable);
    }
    if (c->inner == nullptr) {
        finish(c, Ended::kRaised);
        return false;
    }
    return true;
}

// One step: `value` sent in (None to start), the next value the application yields out.
PySendResult step(PyObject* self, PyObject* value, PyObject** result) {
    CallObject* c = as_call(self);
    *result = nullptr;
    const Busy busy(c);
    if (!busy.ok()) {
        return PYGEN_ERROR;
    }
    if (c->state == kDone) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
    if (c->state == kFresh) {
        if (value != Py_None) {
            PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        c->state = kRunning;
        if (!start(c)) {
            return PYGEN_ERROR;
        }
    }
    const PySendResult r = PyIter_Send(c->inner, value, result);
    if (r == PYGEN_NEXT) {
        return r;
    }
    if (!finish(c, r == PYGEN_RETURN ? Ended::kReturned : Ended::kRaised)) {
        Py_CLEAR(*result);
        return PYGEN_ERROR;
    }
    return r;
}

void stop_iteration(PyObject* value) {
    PyObject* e = PyObject_CallOneArg(PyExc_StopIteration, value);
    if (e != nullptr) {
        PyErr_SetObject(PyExc_StopIteration, e);
        Py_DECREF(e);
    }
}

PyObject* call_iternext(PyObject* self) {
    PyObject* result = nullptr;
    const PySendResult r = step(self, Py_None, &result);
    if (r == PYGEN_RETURN) {
        if (result != Py_None) {
            stop_iteration(result);
        }
        Py_DECREF(result);
        return nullptr;
    }
    return result; // (nullptr with the error set)
}

PyObject* call_send(PyObject* self, PyObject* value) {
    PyObject* result = nullptr;
    const PySendResult r = step(self, value, &result);
    if (r == PYGEN_RETURN) {
        stop_iteration(result);
        Py_DECREF(result);
        return nullptr;
    }
    return result;
}

// throw(exc) or throw(type[, value[, traceback]]): the error set as the caller asks it raised.
void raise_thrown(PyObject* const* args, Py_ssize_t nargs) {
    PyObject* what = args[0];
    if (PyExceptionInstance_Check(what)) {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(what)), what);
    } else if (PyExceptionClass_Check(what)) {
        PyErr_SetObject(what, nargs > 1 ? args[1] : Py_None);
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
    }
}

PyObject* call_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    CallObject* c = as_call(self);
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return nullptr;
    }
    const Busy busy(c);
    if (!busy.ok()) {
        return nullptr;
    }
    if (c->state != kRunning) { // (before it started nothing is held: it ends, raising)
        c->state = kDone;
        Py_CLEAR(c->scope);
        Py_CLEAR(c->receive);
        Py_CLEAR(c->send);
        raise_thrown(args, nargs);
        return nullptr;
    }
    PyObject* thrower = PyObject_GetAttr(c->inner, g_names.throw_);
    if (thrower == nullptr) { // an iterator with no throw: the error is raised here, as `await` would
        PyErr_Clear();
        raise_thrown(args, nargs);
        finish(c, Ended::kRaised);
        return nullptr;
    }
    PyObject* yielded = PyObject_Vectorcall(thrower, args, static_cast<size_t>(nargs), nullptr);
    Py_DECREF(thrower);
    if (yielded != nullptr) {
        return yielded;
    }
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        finish(c, Ended::kRaised);
        return nullptr;
    }
    PyObject* stop = RaisedError::take_exception();
    PyObject* value = PyObject_GetAttr(stop, g_names.value);
    Py_DECREF(stop);
    if (value == nullptr) {
        finish(c, Ended::kRaised);
        return nullptr;
    }
    if (finish(c, Ended::kReturned)) {
        stop_iteration(value);
    }
    Py_DECREF(value);
    return nullptr;
}

PyObject* call_close(PyObject* self, PyObject*) {
    CallObject* c = as_call(self);
    const Busy busy(c);
    if (!busy.ok()) {
        return nullptr;
    }
    if (c->state != kRunning) {
        c->state = kDone;
        Py_RETURN_NONE;
    }
    PyObject* r = PyObject_CallMethodNoArgs(c->inner, g_names.close);
    if (r == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear(); // (an iterator with nothing to close)
        r = Py_NewRef(Py_None);
    }
    const bool closed = r != nullptr;
    Py_XDECREF(r);
    if (!finish(c, closed ? Ended::kClosed : Ended::kRaised)) {
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject* call_await(PyObject* self) {
    return Py_NewRef(self);
}

// A request abandoned while running (its task collected): closed, so its leases go back.
void call_finalize(PyObject* self) {
    if (as_call(self)->state != kRunning) {
        return;
    }
    RaisedError error = RaisedError::take();
    PyObject* r = call_close(self, nullptr);
    if (r == nullptr) {
        PyErr_WriteUnraisable(self);
    }
    Py_XDECREF(r);
    error.restore();
}

int call_traverse(PyObject* self, visitproc visit, void* arg) {
    CallObject* c = as_call(self);
    for (PyObject* o : {c->gate, c->scope, c->receive, c->send, c->inner, c->lease, c->handoff}) {
        Py_VISIT(o);
    }
    return 0;
}

int call_clear(PyObject* self) {
    CallObject* c = as_call(self);
    for (PyObject** o : {&c->gate, &c->scope, &c->receive, &c->send, &c->inner, &c->lease, &c->handoff}) {
        Py_CLEAR(*o);
    }
    return 0;
}

void call_dealloc(PyObject* self) {
    if (PyObject_CallFinalizerFromDealloc(self) < 0) {
        return; // resurrected
    }
    PyObject_GC_UnTrack(self);
    call_clear(self);
    Py_TYPE(self)->tp_free(self);
}

PyAsyncMethods call_async = {call_await, nullptr, nullptr, step};

PyMethodDef call_methods[] = {
    {"send", call_send, METH_O, "send($self, value, /)\n--\n\nSends a value into the request; the next it yields."},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call_throw)), METH_FASTCALL,
     "throw($self, exc, value=None, traceback=None, /)\n--\n\nRaises an exception in the request."},
    {"close", call_close, METH_NOARGS, "close($self, /)\n--\n\nCloses the request: its leases go back."},
    {nullptr, nullptr, 0, nullptr}};

} // namespace

PyObject* gate_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    AsgiGateObject* g = as_gate(self);
    if (PyVectorcall_NARGS(nargsf) != 3 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "AsgiGate(scope, receive, send)");
        return nullptr;
    }
    if (g->app == nullptr) {
        PyErr_SetString(PyExc_TypeError, "AsgiGate is not bound to a middleware");
        return nullptr;
    }
    auto* c = PyObject_GC_New(CallObject, &CallType);
    if (c == nullptr) {
        return nullptr;
    }
    c->gate = Py_NewRef(self);
    c->scope = Py_NewRef(args[0]);
    c->receive = Py_NewRef(args[1]);
    c->send = Py_NewRef(args[2]);
    c->inner = nullptr;
    c->lease = nullptr;
    c->handoff = nullptr;
    c->state = kFresh;
    c->busy = false;
    PyObject_GC_Track(c);
    return reinterpret_cast<PyObject*>(c);
}

bool register_call(PyObject* m) {
    struct Entry {
        PyObject** slot;
        const char* text;
    };
    const Entry entries[] = {
        {&g_names.type, "type"},       {&g_names.http, "http"},    {&g_names.handoff, "permits.handoff"},
        {&g_names.release, "release"}, {&g_names.throw_, "throw"}, {&g_names.close, "close"},
        {&g_names.value, "value"}};
    for (const Entry& e : entries) {
        *e.slot = PyUnicode_InternFromString(e.text);
        if (*e.slot == nullptr) {
            return false;
        }
    }
    CallType.tp_name = "permits._core.AsgiCall";
    CallType.tp_basicsize = sizeof(CallObject);
    CallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    CallType.tp_doc = "One ASGI request served by the middleware's gate: an awaitable, as its coroutine would be.";
    CallType.tp_dealloc = call_dealloc;
    CallType.tp_finalize = call_finalize;
    CallType.tp_traverse = call_traverse;
    CallType.tp_clear = call_clear;
    CallType.tp_as_async = &call_async;
    CallType.tp_iternext = call_iternext;
    CallType.tp_methods = call_methods;
    if (PyType_Ready(&CallType) < 0) {
        return false;
    }
    Py_INCREF(&CallType);
    if (PyModule_AddObject(m, "AsgiCall", reinterpret_cast<PyObject*>(&CallType)) < 0) {
        Py_DECREF(&CallType);
        return false;
    }
    return true;
}

} // namespace permits::py_asgi_gate
