// The engine's lease wait as the awaitable its task drives (engine_lease_wait.hpp): the first step
// (granted now, queued in the engine, or handed to another async library's wait), send, throw,
// close, `async with`, and the type itself with its freelist. What it is as the future its task
// waits on is in engine_lease_wait_future.cpp.
#include "engine_lease_wait.hpp"

#include <pybind11/pybind11.h>

#include <new>
#include <thread>
#include <utility>

#include "engine_lease_wait_core.hpp"
#include "fastcall.hpp"
#include "free_threading.hpp"
#include "lease_type.hpp"
#include "raised_error.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace lease_wait {

const Names* g_names = nullptr;

/// (The lease is built once, so giving it back twice is harmless.)
void withdraw(Core& c) {
    if (c.bridge != nullptr) {
        c.bridge->forget(c.id);
        c.bridge = nullptr;
    }
    if (!c.handle || c.handle->cancel()) {
        return;
    }
    const auto& waiter = c.handle->waiter();
    while (waiter->state() == Waiter::Completing) { // the engine is writing its outcome: nanoseconds
        std::this_thread::yield();
    }
    if (waiter->state() == Waiter::Completed) {
        try {
            py_lease::refund(c.handle->lease().ptr());
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable(__func__); // out of memory building the lease: nothing else to do
        }
    }
}

void raise_error(const Core& c) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(c.error)), c.error);
}

namespace {

// permits._foreign.queued_wait(owner, key, permit_count): a wait queued outside asyncio (trio),
// registered by that module when it is imported (permits imports it).
PyObject* g_foreign_wait = nullptr;

// A lease for an outcome of the target: per-key grants go back through the table.
PyObject* lease_for(const WaitTarget& t, const Outcome& o) {
    if (t.per_key != nullptr && o.acquired) {
        return py_lease::from_per_key_outcome(o, *t.per_key, t.key);
    }
    return py_lease::from_outcome(o, t.limiter, t.owner);
}

/// Closes a delegated wait's coroutine: its request leaves the queue (its own `finally`).
void close_inner(Core& c) {
    if (c.inner == nullptr) {
        return;
    }
    PyObject* inner = std::exchange(c.inner, nullptr);
    RaisedError kept = RaisedError::take();
    PyObject* r = PyObject_CallMethod(inner, "close", nullptr);
    if (r == nullptr) {
        PyErr_WriteUnraisable(inner);
    }
    Py_XDECREF(r);
    Py_DECREF(inner);
    kept.restore();
}

/// Ends the wait for good: a request still queued leaves the queue (a lease the bridge kept for
/// it is given back by withdraw()), and the loop, the callbacks and the handle are let go.
void end(Core& c) {
    if (c.phase == Phase::Waiting) {
        withdraw(c);
        Py_CLEAR(c.result);
    }
    close_inner(c);
    c.phase = Phase::Done;
    Py_CLEAR(c.error);
    Py_CLEAR(c.loop);
    clear_callbacks(c);
    c.handle.reset();
}

/// Done with `value` (a new reference, handed to the caller).
PySendResult finish(Core& c, PyObject* value, PyObject** out) {
    c.phase = Phase::Done;
    Py_CLEAR(c.loop);
    clear_callbacks(c);
    c.handle.reset();
    if (c.entered) {
        Py_XSETREF(c.result, Py_NewRef(value));
    }
    *out = value;
    return PYGEN_RETURN;
}

/// Ends the wait with the Python error that is set (kept across the withdrawal).
PySendResult fail(Core& c) {
    RaisedError kept = RaisedError::take();
    end(c);
    kept.restore();
    return PYGEN_ERROR;
}

/// Yields the awaitable itself to the task, as a future it blocks on.
PySendResult block(PyObject* self, Core& c, PyObject** out) {
    c.blocking = true;
    *out = Py_NewRef(self);
    return PYGEN_NEXT;
}

// First step: granted now, or refused for good (a full queue...), or queued: then the awaitable
// is yielded to the task as the future it waits on.
PySendResult delegate(Core& c, PyObject* arg, PyObject** out);

PySendResult start(PyObject* self, Core& c, PyObject** out) {
    PyObject* lease = guarded([&]() -> PyObject* {
        const WaitTarget& t = c.target;
        if (t.per_key != nullptr) {
            if (auto r = t.per_key->try_now(t.encoded, c.permits)) {
                return lease_for(t, r->outcome);
            }
        } else if (auto o = t.limiter->try_now(c.permits)) {
            return lease_for(t, *o);
        }
        // Asked only now: asyncio's running-loop lookup costs a getpid() system call (3.11).
        py::object loop = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(names().get_running_loop));
        if (!loop) {
            throw py::error_already_set();
        }
        if (loop.is_none()) {
            // Not in asyncio: another async library (trio) waits its own way, or nothing runs (an error).
            if (g_foreign_wait == nullptr) {
                throw py::import_error("permits._foreign is not imported: import permits first");
            }
            PyObject* key = t.key != nullptr ? t.key : Py_None;
            c.inner = PyObject_CallFunction(g_foreign_wait, "OOL", t.owner, key, static_cast<long long>(c.permits));
            if (c.inner == nullptr) {
                throw py::error_already_set();
            }
            c.phase = Phase::Delegating;
            return nullptr;
        }
        LoopBridge* bridge = bridge_of(loop.ptr());
        const std::uint64_t id = bridge->next_id();
        Limiter::Enqueued q;
        std::shared_ptr<Limiter> owner;
        if (t.per_key != nullptr) {
            auto kq = t.per_key->enqueue(t.encoded, c.permits, -1, bridge->notifier(), id);
            q = std::move(kq.enqueued);
            owner = std::move(kq.owner);
        } else {
            q = t.limiter->enqueue(c.permits, -1, bridge->notifier(), id);
            owner = t.limiter->shared_from_this();
        }
        if (!q.waiter) {
            return lease_for(t, q.outcome);
        }
        c.handle =
            t.per_key != nullptr
                ? std::make_unique<WaitHandle>(std::move(owner), q.waiter, py::reinterpret_borrow<py::object>(t.owner),
                                               t.per_key->shared_from_this(), py::reinterpret_borrow<py::object>(t.key))
                : std::make_unique<WaitHandle>(std::move(owner), q.waiter, py::reinterpret_borrow<py::object>(t.owner));
        c.loop = loop.release().ptr();
        c.id = id;
        c.bridge = bridge;
        bridge->hold(id, self);
        c.phase = Phase::Waiting;
        PyObject_GC_Track(self); // queued, it holds its loop: see aw_traverse
        return nullptr;          // queued: no lease yet
    });
    if (c.phase == Phase::Waiting) {
        return block(self, c, out);
    }
    if (c.phase == Phase::Delegating) {
        PyObject_GC_Track(self);
        return delegate(c, Py_None, out);
    }
    if (lease == nullptr) {
        return fail(c);
    }
    return finish(c, lease, out);
}

/// acquire_async()'s first step: the attempt itself. The lease is kept, so a later await (or
/// `async with`'s exit) has it.
PySendResult attempt(Core& c, PyObject** out) {
    PyObject* lease = guarded([&]() -> PyObject* {
        const WaitTarget& t = c.target;
        if (t.per_key != nullptr) {
            return lease_for(t, t.per_key->acquire(t.encoded, c.permits).outcome);
        }
        return lease_for(t, t.limiter->acquire(c.permits));
    });
    if (lease == nullptr) {
        return fail(c);
    }
    c.phase = Phase::Acquired;
    c.result = lease;
    *out = Py_NewRef(lease);
    return PYGEN_RETURN;
}

/// One step of a delegated wait: sends `arg` into its coroutine, as `yield from` does.
PySendResult delegate(Core& c, PyObject* arg, PyObject** out) {
    PyObject* value = nullptr;
    const PySendResult r = PyIter_Send(c.inner, arg, &value);
    if (r == PYGEN_NEXT) {
        *out = value;
        return PYGEN_NEXT;
    }
    Py_CLEAR(c.inner); // finished: nothing to close
    if (r == PYGEN_RETURN) {
        return finish(c, value, out);
    }
    return fail(c);
}

PySendResult aw_send(PyObject* self, PyObject* arg, PyObject** out) {
    Core& c = core_of(self);
    switch (c.phase) {
    case Phase::New: return start(self, c, out);
    case Phase::Delegating: return delegate(c, arg, out);
    case Phase::Waiting: {
        if (!c.resolved) {
            return block(self, c, out); // resumed early (not by a task): wait on
        }
        if (c.error != nullptr) {
            raise_error(c);
            return fail(c);
        }
        return finish(c, std::exchange(c.result, nullptr), out);
    }
    case Phase::Attempt: return attempt(c, out);
    case Phase::Acquired: *out = Py_NewRef(c.result); return PYGEN_RETURN;
    case Phase::Ready: {
        PyObject* value = c.result;
        c.result = nullptr;
        c.phase = Phase::Done;
        *out = value;
        return PYGEN_RETURN;
    }
    case Phase::Done: break;
    }
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited wait_async()");
    *out = nullptr;
    return PYGEN_ERROR;
}

/// A step's outcome as the iterator protocol returns it: the value yielded, or nullptr with
/// StopIteration(value) set for a return (as for a generator's return), or with the error set.
PyObject* as_iteration(PySendResult r, PyObject* out) {
    switch (r) {
    case PYGEN_NEXT: return out;
    case PYGEN_RETURN:
        if (out == Py_None) {
            PyErr_SetNone(PyExc_StopIteration);
        } else {
            PyObject* stop = PyObject_CallOneArg(PyExc_StopIteration, out);
            if (stop != nullptr) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
        }
        Py_DECREF(out);
        return nullptr;
    case PYGEN_ERROR: return nullptr;
    }
    return nullptr;
}

PyObject* aw_send_method(PyObject* self, PyObject* value) {
    PyObject* out = nullptr;
    const PySendResult r = aw_send(self, value, &out); // before `out` is read
    return as_iteration(r, out);
}

PyObject* aw_next(PyObject* self) {
    return aw_send_method(self, Py_None);
}

/// throw() into a delegated wait's coroutine (trio cancelling it): what it yields, returns or raises.
PyObject* throw_into_inner(Core& c, PyObject* const* args, Py_ssize_t nargs) {
    PyObject* method = PyObject_GetAttrString(c.inner, "throw");
    PyObject* r = method != nullptr ? PyObject_Vectorcall(method, args, nargs, nullptr) : nullptr;
    Py_XDECREF(method);
    if (r != nullptr) {
        return r; // it caught the exception and waits on
    }
    Py_CLEAR(c.inner);
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        fail(c);
        return nullptr;
    }
    PyObject* stop = RaisedError::take_exception();
    PyObject* value = stop != nullptr ? PyObject_GetAttrString(stop, "value") : Py_NewRef(Py_None);
    Py_XDECREF(stop);
    if (value == nullptr) {
        fail(c);
        return nullptr;
    }
    PyObject* out = nullptr;
    const PySendResult done = finish(c, value, &out); // before `out` is read
    return as_iteration(done, out);
}

// throw(exc) / throw(type[, value[, tb]]): what a task does when it is cancelled while waiting.
PyObject* aw_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return nullptr;
    }
    Core& c = core_of(self);
    if (c.phase == Phase::Delegating && c.inner != nullptr) {
        return throw_into_inner(c, args, nargs);
    }
    end(c); // (an acquire_async() thrown into before its first step has taken nothing)
    PyObject* typ = args[0];
    PyObject* val = nargs > 1 ? args[1] : Py_None;
    PyObject* tb = nargs > 2 ? args[2] : Py_None;
    if (PyExceptionInstance_Check(typ)) {
        if (tb != Py_None) {
            PyException_SetTraceback(typ, tb);
        }
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(typ)), typ);
    } else if (PyExceptionClass_Check(typ)) {
        PyErr_SetObject(typ, val);
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    }
    return nullptr;
}

PyObject* aw_close(PyObject* self, PyObject*) {
    end(core_of(self));
    Py_RETURN_NONE;
}

PyObject* aw_await(PyObject* self) {
    return Py_NewRef(self);
}

PyObject* aw_aenter(PyObject* self, PyObject*) {
    Core& c = core_of(self);
    if (c.phase == Phase::Attempt || c.phase == Phase::Acquired) {
        return Py_NewRef(self); // its lease stays the awaitable's: __aexit__ releases it
    }
    if (c.phase != Phase::New) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited wait_async()");
        return nullptr;
    }
    c.entered = true;
    return Py_NewRef(self);
}

/// An awaitable that completes at once with `value` (a new reference is taken).
PyObject* new_ready(PyObject* value);

PyObject* aw_aexit(PyObject* self, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
    Core& c = core_of(self);
    if (c.phase == Phase::Acquired) { // the lease stays the awaitable's: later awaits return it
        PyObject* r = PyObject_CallMethodNoArgs(c.result, names().release);
        if (r == nullptr) {
            return nullptr;
        }
        Py_DECREF(r);
        return new_ready(Py_None);
    }
    if (c.result != nullptr) {
        PyObject* lease = c.result;
        c.result = nullptr;
        PyObject* r = PyObject_CallMethodNoArgs(lease, names().release);
        Py_DECREF(lease);
        if (r == nullptr) {
            return nullptr;
        }
        Py_DECREF(r);
    }
    return new_ready(Py_None);
}

// A small freelist, as for leases: an awaitable is made on every wait_async(), and reusing a dead
// one's memory keeps the allocator (and the GC's allocation count, which triggers collections) off
// the immediate-grant path. None on a free-threaded build (lease_type.cpp says why).
constexpr int kFreelistSize = kFreeThreaded ? 0 : 64;
EngineLeaseWaitObject* g_freelist[kFreelistSize > 0 ? kFreelistSize : 1];
int g_freelist_len = 0;

/// The method that made the awaitable, as the user wrote it.
const char* made_by(const Core& c) {
    return c.phase == Phase::Attempt || c.phase == Phase::Acquired ? "acquire_async" : "wait_async";
}

/// `if limiter.wait_async():` is always true and takes nothing: say so, as a missing await is the cause.
/// Once stepped it is true: asyncio tests a task's coroutine (`if task._coro:`, in its repr from 3.12).
int aw_bool(PyObject* self) {
    const Core& c = core_of(self);
    if (c.phase != Phase::New && c.phase != Phase::Attempt) {
        return 1;
    }
    const char* method = made_by(c);
    PyErr_Format(PyExc_TypeError,
                 "the awaitable of %s() has no truth value: did you forget await? (if await limiter.%s():)", method,
                 method);
    return -1;
}

/// A coroutine's habit: one collected without ever being awaited (nor cancelled, nor closed) warns,
/// since its caller forgot the await. Nothing was taken (the attempt or the wait starts when stepped).
void warn_unawaited(const Core& c) {
    if (c.phase != Phase::New && c.phase != Phase::Attempt) {
        return;
    }
    RaisedError kept = RaisedError::take(); // a dealloc may run while an error is being raised
    const char* owner = c.target.owner != nullptr ? Py_TYPE(c.target.owner)->tp_name : "limiter";
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "%s.%s() was never awaited", owner, made_by(c)) < 0) {
        PyErr_WriteUnraisable(c.target.owner); // the warning made an error (-W error): as for a coroutine
    }
    kept.restore();
}

void aw_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    Core& c = core_of(self);
    warn_unawaited(c);
    end(c); // a queued wait is not freed while a bridge holds it; this is for one dropped otherwise
    Py_XDECREF(c.result);
    Py_XDECREF(c.target.owner);
    Py_XDECREF(c.target.key);
    c.~Core();
    if (kFreelistSize > 0 && g_freelist_len < kFreelistSize) {
        g_freelist[g_freelist_len++] = reinterpret_cast<EngineLeaseWaitObject*>(self);
    } else {
        PyObject_GC_Del(self);
    }
}

// The GC sees what a wait holds: a queued wait (held by its loop's bridge) references its loop and
// its task's wake-up, so a loop dropped with waits still queued is a cycle the GC can collect, and
// collecting it gives their permits back (aw_clear, LoopBridge's clear).
int aw_traverse(PyObject* self, visitproc visit, void* arg) {
    const Core& c = core_of(self);
    Py_VISIT(c.target.owner);
    Py_VISIT(c.target.key);
    Py_VISIT(c.result);
    Py_VISIT(c.error);
    Py_VISIT(c.loop);
    Py_VISIT(c.inner);
    for (const auto& cb : c.callbacks) {
        Py_VISIT(cb.fn);
        Py_VISIT(cb.context);
    }
    return 0;
}

int aw_clear(PyObject* self) {
    Core& c = core_of(self);
    end(c); // a queued request leaves the queue; its permits go back
    Py_CLEAR(c.result);
    Py_CLEAR(c.target.owner); // Done: the target is never used again
    Py_CLEAR(c.target.key);
    c.target.limiter = nullptr;
    c.target.per_key = nullptr;
    return 0;
}

PyAsyncMethods aw_async = {aw_await, nullptr, nullptr, aw_send};

PyNumberMethods aw_number = [] {
    PyNumberMethods n{};
    n.nb_bool = aw_bool;
    return n;
}();

PyMethodDef aw_methods[] = {
    {"send", aw_send_method, METH_O, "send($self, value, /)\n--\n\nResumes the wait (asyncio drives this)."},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_throw)), METH_FASTCALL,
     "throw($self, typ, val=None, tb=None, /)\n--\n\nEnds the wait with an exception; a queued request "
     "leaves the queue."},
    {"close", aw_close, METH_NOARGS, "close($self, /)\n--\n\nEnds the wait; a queued request leaves the queue."},
    {"__aenter__", aw_aenter, METH_NOARGS, "__aenter__($self, /)\n--\n\nasync with: waits for the lease."},
    {"__aexit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_aexit)), METH_FASTCALL,
     "__aexit__($self, exc_type, exc, tb, /)\n--\n\nasync with: releases the lease."},
    {"get_loop", get_loop, METH_NOARGS, "get_loop($self, /)\n--\n\nThe event loop a queued wait waits in."},
    {"add_done_callback", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&add_done_callback)),
     METH_FASTCALL | METH_KEYWORDS,
     "add_done_callback($self, fn, /, *, context=None)\n--\n\nAs asyncio.Future's: called once the wait is "
     "resolved."},
    {"remove_done_callback", remove_done_callback, METH_O,
     "remove_done_callback($self, fn, /)\n--\n\nAs asyncio.Future's: returns how many "
     "were removed."},
    {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&cancel)), METH_FASTCALL | METH_KEYWORDS,
     "cancel($self, /, msg=None)\n--\n\nA queued request leaves the queue; the waiting task gets CancelledError."},
    {"result", result, METH_NOARGS,
     "result($self, /)\n--\n\nNone once resolved (the lease comes with the await); raises if cancelled."},
    {"done", done, METH_NOARGS, "done($self, /)\n--\n\nTrue once resolved, cancelled or awaited."},
    {"cancelled", cancelled, METH_NOARGS, "cancelled($self, /)\n--\n\nTrue once cancelled by cancel()."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject EngineLeaseWaitType = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "permits._core.EngineLeaseWait";
    t.tp_doc = "What wait_async returns: await it for a lease, or `async with` it to release on exit.";
    t.tp_basicsize = sizeof(EngineLeaseWaitObject);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    t.tp_dealloc = aw_dealloc;
    t.tp_traverse = aw_traverse;
    t.tp_clear = aw_clear;
    t.tp_as_async = &aw_async;
    t.tp_as_number = &aw_number;
    t.tp_iter = PyObject_SelfIter;
    t.tp_iternext = aw_next;
    t.tp_methods = aw_methods;
    t.tp_getattro = getattro;
    t.tp_setattro = setattro;
    return t;
}();

EngineLeaseWaitObject* alloc() {
    EngineLeaseWaitObject* self = nullptr;
    if (kFreelistSize > 0 && g_freelist_len > 0) {
        self = g_freelist[--g_freelist_len];
        PyObject_Init(reinterpret_cast<PyObject*>(self), &EngineLeaseWaitType);
    } else {
        self = PyObject_GC_New(EngineLeaseWaitObject, &EngineLeaseWaitType);
        if (self == nullptr) {
            return nullptr;
        }
    }
    new (&self->core) Core();
    return self;
}

PyObject* new_ready(PyObject* value) {
    EngineLeaseWaitObject* self = alloc();
    if (self == nullptr) {
        return nullptr;
    }
    self->core.phase = Phase::Ready;
    self->core.result = Py_NewRef(value);
    return reinterpret_cast<PyObject*>(self);
}

} // namespace
} // namespace lease_wait

using lease_wait::Core;
using lease_wait::core_of;
using lease_wait::EngineLeaseWaitObject;

namespace {
PyObject* new_lease_wait(WaitTarget&& target, std::int64_t permit_count, lease_wait::Phase phase) {
    EngineLeaseWaitObject* self = lease_wait::alloc();
    if (self == nullptr) {
        Py_XDECREF(target.owner);
        Py_XDECREF(target.key);
        return nullptr;
    }
    self->core.target = std::move(target);
    self->core.permits = permit_count;
    self->core.phase = phase;
    return reinterpret_cast<PyObject*>(self);
}
} // namespace

PyObject* new_attempt_lease_wait(WaitTarget target, std::int64_t permit_count) {
    return new_lease_wait(std::move(target), permit_count, lease_wait::Phase::Attempt);
}

PyObject* new_engine_lease_wait(WaitTarget target, std::int64_t permit_count) {
    return new_lease_wait(std::move(target), permit_count, lease_wait::Phase::New);
}

// ---- What the loop's bridge (loop_bridge.cpp) asks of a wait ----

std::vector<WaitCallback> resolve_wait(PyObject* awaitable) {
    return core_of(awaitable).resolve();
}

PyObject* wait_loop(PyObject* awaitable) {
    return core_of(awaitable).loop;
}

void abandon_wait(PyObject* awaitable) {
    Core& c = core_of(awaitable);
    c.bridge = nullptr;
    lease_wait::end(c); // leaves the queue; a grant not handed over goes back
}

bool schedule_on(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* context) {
    return lease_wait::call_soon(loop, fn, arg, context);
}

PyObject* resume_name() {
    return lease_wait::names().resume;
}

void bind_engine_lease_wait(py::module_& m) {
    lease_wait::g_names = new lease_wait::Names();
    if (PyType_Ready(&lease_wait::EngineLeaseWaitType) < 0) {
        throw py::error_already_set();
    }
    m.add_object("EngineLeaseWait",
                 py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&lease_wait::EngineLeaseWaitType)));
    m.def(
        "_set_foreign_wait", [](py::object wait) { Py_XSETREF(lease_wait::g_foreign_wait, wait.release().ptr()); },
        "_set_foreign_wait(wait, /)\n--\n\nRegisters permits._foreign.queued_wait(owner, key, permit_count) (called "
        "once, by that module).");
}

} // namespace permits::bind
