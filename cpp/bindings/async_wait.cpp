#include "async_wait.hpp"

#include <pybind11/pybind11.h>

#include <new>
#include <thread>
#include <utility>

#include "fastcall.hpp"
#include "lease_type.hpp"
#include "self.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace {

// Delegating: queued outside asyncio, the wait is a coroutine of permits._foreign (trio), which the
// awaitable drives as `yield from` would.
enum class Phase : std::uint8_t { New, Waiting, Delegating, Done, Ready };

// Queued, the awaitable is itself the future-like object its task waits on (asyncio's duck-typed
// protocol: _asyncio_future_blocking, get_loop, add_done_callback, cancel, result), so a grant
// wakes the task without an asyncio future: the bridge runs a whole batch's wake-ups in one loop
// callback instead of one loop.call_soon (a Python Handle) per waiter. Measured on 100k waiters:
// 1.63 -> 0.85 us per waiter.
using Callback = WaitCallback;

struct Core {
    WaitTarget target;
    std::int64_t permits = 0;
    Phase phase = Phase::New;
    bool entered = false;       // used by `async with`: the lease is kept for __aexit__
    bool blocking = false;      // asyncio's _asyncio_future_blocking, set when yielded to the task
    bool resolved = false;      // queued and its outcome is in: `result` (the lease) or `error`
    PyObject* result = nullptr; // Ready: the value to return; resolved: the lease; after `async with` entry: the lease
    PyObject* error = nullptr;  // resolved with an exception (a cancellation)
    PyObject* loop = nullptr;   // while queued: the loop it waits in
    std::vector<Callback> callbacks; // while queued: what to call once resolved (the task's wake-up)
    LoopBridge* bridge = nullptr;
    std::uint64_t id = 0;
    std::unique_ptr<WaitHandle> handle;
    PyObject* inner = nullptr; // Delegating: the coroutine waiting in another async library

    /// The engine completed the queued wait: its lease (or the error making it) becomes the
    /// result and its bridge lets go of it. Returns the callbacks that wake its task, whose
    /// references the caller takes over.
    std::vector<Callback> resolve() {
        bridge = nullptr;
        try {
            result = handle->lease().release().ptr();
        } catch (py::error_already_set& e) { // out of memory: the task gets the error
            error = Py_NewRef(e.value().ptr());
        }
        resolved = true;
        return std::exchange(callbacks, {});
    }
};

struct AsyncWaitObject {
    PyObject_HEAD Core core;
};

Core& core_of(PyObject* op) {
    return reinterpret_cast<AsyncWaitObject*>(op)->core;
}

// Python objects the awaitable needs, made once when the module is imported (init_names). Never in
// a function-local static: its initializer would run Python code (an import releases the GIL), and
// a second thread reaching the static meanwhile would wait on its guard while holding the GIL.
struct Names {
    PyObject* call_soon = PyUnicode_InternFromString("call_soon");
    PyObject* context = PyUnicode_InternFromString("context");
    PyObject* resume = PyUnicode_InternFromString("resume");
    PyObject* blocking = PyUnicode_InternFromString("_asyncio_future_blocking");
    PyObject* release = PyUnicode_InternFromString("release");
    PyObject* context_kw = PyTuple_Pack(1, context);
    // asyncio's running-loop lookup (None when no loop runs) and exceptions.
    PyObject* get_running_loop = py::object(py::module_::import("asyncio").attr("_get_running_loop")).release().ptr();
    PyObject* invalid_state = py::object(py::module_::import("asyncio").attr("InvalidStateError")).release().ptr();
    PyObject* cancelled_error = py::object(py::module_::import("asyncio").attr("CancelledError")).release().ptr();
};
const Names* g_names = nullptr; // for the process's lifetime, like the interned strings
const Names& names() {
    return *g_names;
}

// permits._asyncio._bridge, registered by that module when it is imported (permits imports it).
PyObject* g_bridge_factory = nullptr;

// The bridge of the running loop. The last one found is remembered with a weak reference to its
// loop, so a wait that queues calls into Python (permits._asyncio) only when the loop changes.
struct BridgeCache {
    PyObject* loop_ref = nullptr; // weak reference
    LoopBridge* bridge = nullptr;
};
BridgeCache g_bridge_cache;

LoopBridge* bridge_of(PyObject* loop) {
    BridgeCache& cache = g_bridge_cache;
    if (cache.loop_ref != nullptr && PyWeakref_GetObject(cache.loop_ref) == loop) {
        return cache.bridge;
    }
    if (g_bridge_factory == nullptr) {
        throw py::import_error("permits._asyncio is not imported: import permits first");
    }
    py::object bridge = py::reinterpret_steal<py::object>(PyObject_CallOneArg(g_bridge_factory, loop));
    if (!bridge) {
        throw py::error_already_set();
    }
    auto* b = bridge.cast<LoopBridge*>(); // kept alive by the loop (permits._asyncio) while it lives
    PyObject* ref = PyWeakref_NewRef(loop, nullptr);
    if (ref == nullptr) {
        throw py::error_already_set();
    }
    Py_XSETREF(cache.loop_ref, ref);
    cache.bridge = b;
    return b;
}

// permits._foreign.queued_wait(owner, key, permit_count): a wait queued outside asyncio (trio),
// registered by that module when it is imported (permits imports it).
PyObject* g_foreign_wait = nullptr;

// A lease for an outcome of the target: per-key grants go back through the table.
PyObject* lease_for(const WaitTarget& t, const Outcome& o) {
    if (t.per_key != nullptr && o.acquired) {
        return py_lease::from_per_key_outcome(o, *t.per_key, t.key);
    }
    return py_lease::from_outcome(o, t.limiter);
}

/// loop.call_soon(fn, arg, context=ctx): how a callback runs when no batch is being resumed.
bool call_soon(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* ctx) {
    PyObject* args[] = {loop, fn, arg, ctx};
    PyObject* r = PyObject_VectorcallMethod(names().call_soon, args, 3, ctx != nullptr ? names().context_kw : nullptr);
    Py_XDECREF(r);
    return r != nullptr;
}

void release(const Callback& cb) {
    Py_DECREF(cb.fn);
    Py_XDECREF(cb.context);
}

/// Drops the callbacks (a task's wake-up references the task, which references this awaitable).
void clear_callbacks(Core& c) {
    for (const auto& cb : c.callbacks) {
        release(cb);
    }
    c.callbacks.clear();
}

/// Schedules every callback with loop.call_soon (as an asyncio future does when it is done).
void schedule_callbacks(PyObject* self, Core& c) {
    auto callbacks = std::move(c.callbacks);
    c.callbacks.clear();
    for (auto& cb : callbacks) {
        if (!call_soon(c.loop, cb.fn, self, cb.context)) {
            PyErr_WriteUnraisable(cb.fn); // a closed loop: its tasks never run again anyway
        }
        release(cb);
    }
}

/// The request leaves the engine's queue; if it was granted meanwhile, its permits go back
/// (the lease is built once, so giving it back twice is harmless).
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

/// Sets the exception the wait was resolved with (a cancellation) as the Python error.
void raise_error(const Core& c) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(c.error)), c.error);
}

/// Closes a delegated wait's coroutine: its request leaves the queue (its own `finally`).
void close_inner(Core& c) {
    if (c.inner == nullptr) {
        return;
    }
    PyObject* inner = std::exchange(c.inner, nullptr);
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    PyObject* r = PyObject_CallMethod(inner, "close", nullptr);
    if (r == nullptr) {
        PyErr_WriteUnraisable(inner);
    }
    Py_XDECREF(r);
    Py_DECREF(inner);
    PyErr_Restore(type, value, tb);
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
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    end(c);
    PyErr_Restore(type, value, tb);
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
        c.handle = t.per_key != nullptr
                       ? std::make_unique<WaitHandle>(std::move(owner), q.waiter, t.per_key->shared_from_this(),
                                                      py::reinterpret_borrow<py::object>(t.key))
                       : std::make_unique<WaitHandle>(std::move(owner), q.waiter);
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
    PyObject *type = nullptr, *stop = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &stop, &tb);
    PyErr_NormalizeException(&type, &stop, &tb);
    PyObject* value = stop != nullptr ? PyObject_GetAttrString(stop, "value") : Py_NewRef(Py_None);
    Py_XDECREF(type);
    Py_XDECREF(stop);
    Py_XDECREF(tb);
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
    end(c);
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
    if (c.phase != Phase::New) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited wait_async()");
        return nullptr;
    }
    c.entered = true;
    return Py_NewRef(self);
}

PyObject* aw_aexit(PyObject* self, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
    Core& c = core_of(self);
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
// the immediate-grant path.
constexpr int kFreelistSize = 64;
AsyncWaitObject* g_freelist[kFreelistSize];
int g_freelist_len = 0;

void aw_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    Core& c = core_of(self);
    end(c); // a queued wait is not freed while a bridge holds it; this is for one dropped otherwise
    Py_XDECREF(c.result);
    Py_XDECREF(c.target.owner);
    Py_XDECREF(c.target.key);
    c.~Core();
    if (g_freelist_len < kFreelistSize) {
        g_freelist[g_freelist_len++] = reinterpret_cast<AsyncWaitObject*>(self);
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

// ---- The future-like side, for the task that waits on it (asyncio's duck-typed futures).

bool is_blocking_name(PyObject* name) {
    return name == names().blocking || (PyUnicode_Check(name) != 0 && PyUnicode_Compare(name, names().blocking) == 0);
}

// `_asyncio_future_blocking` lives on instances only: a class attribute would make
// asyncio.isfuture() true, and ensure_future() / gather() would then take the awaitable for a
// running future instead of wrapping it in a task.
PyObject* aw_getattro(PyObject* self, PyObject* name) {
    if (is_blocking_name(name)) {
        return PyBool_FromLong(core_of(self).blocking ? 1 : 0);
    }
    return PyObject_GenericGetAttr(self, name);
}

int aw_setattro(PyObject* self, PyObject* name, PyObject* value) {
    if (value != nullptr && is_blocking_name(name)) {
        const int truth = PyObject_IsTrue(value);
        if (truth < 0) {
            return -1;
        }
        core_of(self).blocking = truth != 0;
        return 0;
    }
    return PyObject_GenericSetAttr(self, name, value);
}

bool is_done(const Core& c) {
    return c.resolved || c.phase == Phase::Done || c.phase == Phase::Ready;
}

PyObject* aw_get_loop(PyObject* self, PyObject*) {
    Core& c = core_of(self);
    if (c.loop == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "wait_async() is not waiting in an event loop");
        return nullptr;
    }
    return Py_NewRef(c.loop);
}

PyObject* aw_add_done_callback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    Core& c = core_of(self);
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject* ctx = nullptr;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, k), names().context) != 0) {
            PyErr_Format(PyExc_TypeError, "add_done_callback() got an unexpected keyword argument '%U'",
                         PyTuple_GET_ITEM(kwnames, k));
            return nullptr;
        }
        ctx = args[nargs + k];
    }
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "add_done_callback() takes one positional argument (fn)");
        return nullptr;
    }
    if (c.loop == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "wait_async() is not waiting in an event loop");
        return nullptr;
    }
    PyObject* context = ctx != nullptr && ctx != Py_None ? Py_NewRef(ctx) : PyContext_CopyCurrent();
    if (context == nullptr) {
        return nullptr;
    }
    if (c.resolved) { // already done: it runs soon, as for a done future
        const bool ok = call_soon(c.loop, args[0], self, context);
        Py_DECREF(context);
        if (!ok) {
            return nullptr;
        }
        Py_RETURN_NONE;
    }
    c.callbacks.push_back({Py_NewRef(args[0]), context});
    Py_RETURN_NONE;
}

PyObject* aw_remove_done_callback(PyObject* self, PyObject* fn) {
    Core& c = core_of(self);
    Py_ssize_t removed = 0;
    std::vector<Callback> kept;
    for (auto& cb : c.callbacks) {
        const int same = PyObject_RichCompareBool(cb.fn, fn, Py_EQ);
        if (same < 0) {
            return nullptr;
        }
        if (same != 0) {
            release(cb);
            ++removed;
        } else {
            kept.push_back(cb);
        }
    }
    c.callbacks = std::move(kept);
    return PyLong_FromSsize_t(removed);
}

// cancel(msg=None): what task.cancel() calls on the future its task waits on. A queued request
// leaves the queue (a grant not yet handed over goes back); the task wakes to CancelledError.
PyObject* aw_cancel(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    Core& c = core_of(self);
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "cancel() takes at most one argument (msg)");
        return nullptr;
    }
    if (c.phase != Phase::Waiting || c.resolved) {
        Py_RETURN_FALSE;
    }
    PyObject* msg = nargs + nkw == 1 ? args[0] : Py_None;
    PyObject* error = msg == Py_None ? PyObject_CallNoArgs(names().cancelled_error)
                                     : PyObject_CallOneArg(names().cancelled_error, msg);
    if (error == nullptr) {
        return nullptr;
    }
    withdraw(c);
    c.handle.reset();
    c.resolved = true;
    c.error = error;
    schedule_callbacks(self, c);
    Py_RETURN_TRUE;
}

PyObject* aw_result(PyObject* self, PyObject*) {
    Core& c = core_of(self);
    if (!is_done(c)) {
        PyErr_SetString(names().invalid_state, "Result is not ready.");
        return nullptr;
    }
    if (c.error != nullptr) {
        raise_error(c);
        return nullptr;
    }
    // The lease is handed over by the await itself (send); a task only asks whether it raises.
    Py_RETURN_NONE;
}

PyObject* aw_done(PyObject* self, PyObject*) {
    return PyBool_FromLong(is_done(core_of(self)) ? 1 : 0);
}

PyObject* aw_cancelled(PyObject* self, PyObject*) {
    const Core& c = core_of(self);
    return PyBool_FromLong(c.error != nullptr &&
                           PyObject_TypeCheck(c.error, reinterpret_cast<PyTypeObject*>(names().cancelled_error)));
}

PyAsyncMethods aw_async = {aw_await, nullptr, nullptr, aw_send};

PyMethodDef aw_methods[] = {
    {"send", aw_send_method, METH_O, "send($self, value, /)\n--\n\nResumes the wait (asyncio drives this)."},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_throw)), METH_FASTCALL,
     "throw($self, typ, val=None, tb=None, /)\n--\n\nEnds the wait with an exception; a queued request "
     "leaves the queue."},
    {"close", aw_close, METH_NOARGS, "close($self, /)\n--\n\nEnds the wait; a queued request leaves the queue."},
    {"__aenter__", aw_aenter, METH_NOARGS, "__aenter__($self, /)\n--\n\nasync with: waits for the lease."},
    {"__aexit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_aexit)), METH_FASTCALL,
     "__aexit__($self, exc_type, exc, tb, /)\n--\n\nasync with: releases the lease."},
    {"get_loop", aw_get_loop, METH_NOARGS, "get_loop($self, /)\n--\n\nThe event loop a queued wait waits in."},
    {"add_done_callback", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_add_done_callback)),
     METH_FASTCALL | METH_KEYWORDS,
     "add_done_callback($self, fn, /, *, context=None)\n--\n\nAs asyncio.Future's: called once the wait is "
     "resolved."},
    {"remove_done_callback", aw_remove_done_callback, METH_O,
     "remove_done_callback($self, fn, /)\n--\n\nAs asyncio.Future's: returns how many "
     "were removed."},
    {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_cancel)), METH_FASTCALL | METH_KEYWORDS,
     "cancel($self, /, msg=None)\n--\n\nA queued request leaves the queue; the waiting task gets CancelledError."},
    {"result", aw_result, METH_NOARGS,
     "result($self, /)\n--\n\nNone once resolved (the lease comes with the await); raises if cancelled."},
    {"done", aw_done, METH_NOARGS, "done($self, /)\n--\n\nTrue once resolved, cancelled or awaited."},
    {"cancelled", aw_cancelled, METH_NOARGS, "cancelled($self, /)\n--\n\nTrue once cancelled by cancel()."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject AsyncWaitType = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "permits._core.AsyncWait";
    t.tp_doc = "What wait_async returns: await it for a lease, or `async with` it to release on exit.";
    t.tp_basicsize = sizeof(AsyncWaitObject);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    t.tp_dealloc = aw_dealloc;
    t.tp_traverse = aw_traverse;
    t.tp_clear = aw_clear;
    t.tp_as_async = &aw_async;
    t.tp_iter = PyObject_SelfIter;
    t.tp_iternext = aw_next;
    t.tp_methods = aw_methods;
    t.tp_getattro = aw_getattro;
    t.tp_setattro = aw_setattro;
    return t;
}();

AsyncWaitObject* alloc() {
    AsyncWaitObject* self = nullptr;
    if (g_freelist_len > 0) {
        self = g_freelist[--g_freelist_len];
        PyObject_Init(reinterpret_cast<PyObject*>(self), &AsyncWaitType);
    } else {
        self = PyObject_GC_New(AsyncWaitObject, &AsyncWaitType);
        if (self == nullptr) {
            return nullptr;
        }
    }
    new (&self->core) Core();
    return self;
}

} // namespace

PyObject* new_async_wait(WaitTarget target, std::int64_t permit_count) {
    AsyncWaitObject* self = alloc();
    if (self == nullptr) {
        Py_XDECREF(target.owner);
        Py_XDECREF(target.key);
        return nullptr;
    }
    self->core.target = std::move(target);
    self->core.permits = permit_count;
    return reinterpret_cast<PyObject*>(self);
}

PyObject* new_ready(PyObject* value) {
    AsyncWaitObject* self = alloc();
    if (self == nullptr) {
        return nullptr;
    }
    self->core.phase = Phase::Ready;
    self->core.result = Py_NewRef(value);
    return reinterpret_cast<PyObject*>(self);
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
    end(c); // leaves the queue; a grant not handed over goes back
}

bool schedule_on(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* context) {
    return call_soon(loop, fn, arg, context);
}

PyObject* resume_name() {
    return names().resume;
}

void bind_async_wait(py::module_& m) {
    g_names = new Names();
    if (PyType_Ready(&AsyncWaitType) < 0) {
        throw py::error_already_set();
    }
    m.add_object("AsyncWait", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&AsyncWaitType)));
    // GC-aware: a bridge holds its queued waits, which hold their loop, which holds the bridge
    // (permits._asyncio): collecting that cycle abandons the waits, giving their permits back.
    auto setup = [](PyHeapTypeObject* heap_type) {
        auto* type = &heap_type->ht_type;
        type->tp_flags |= Py_TPFLAGS_HAVE_GC;
        type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
            Py_VISIT(Py_TYPE(self));
            if (!py::detail::is_holder_constructed(self)) {
                return 0;
            }
            return py::cast<const LoopBridge&>(py::handle(self)).traverse(visit, arg);
        };
        type->tp_clear = [](PyObject* self) -> int {
            if (py::detail::is_holder_constructed(self)) {
                py::cast<LoopBridge&>(py::handle(self)).abandon();
            }
            return 0;
        };
    };
    py::class_<LoopBridge, std::shared_ptr<LoopBridge>>(m, "LoopBridge", py::custom_type_setup(setup))
        .def(py::init<>(), "__init__(self, /)\n--\n\nA new bridge, with its own pipe.")
        .def_property_readonly("fd", [](py::handle self) { return self_of<LoopBridge>(self).notifier()->fd(); })
        .def_property_readonly("wakeups",
                               [](py::handle self) { return self_of<LoopBridge>(self).notifier()->wakeups(); })
        .def_property_readonly(
            "pending", [](py::handle self) { return self_of<LoopBridge>(self).pending(); },
            "Waits queued from this loop, not yet resolved.")
        .def(
            "drain", [](py::handle self) { self_of<LoopBridge>(self).drain(); },
            "drain(self, /)\n--\n\nResolves the waits the engine completed; their tasks wake in resume().")
        .def(
            "resume", [](py::handle self, py::handle unused) { self_of<LoopBridge>(self).resume(unused); },
            py::arg("unused") = py::none(),
            "resume(self, unused=None)\n--\n\nWakes the tasks of the waits drain() resolved (a loop callback "
            "drain() schedules).")
        .def(
            "abandon", [](py::handle self) { self_of<LoopBridge>(self).abandon(); },
            "abandon(self, /)\n--\n\nThe loop is closed or gone: its queued waits leave their queues and their "
            "permits go back.");
    m.def(
        "_set_foreign_wait", [](py::object wait) { Py_XSETREF(g_foreign_wait, wait.release().ptr()); },
        "_set_foreign_wait(wait, /)\n--\n\nRegisters permits._foreign.queued_wait(owner, key, permit_count) (called "
        "once, by that module).");
    m.def(
        "_set_bridge_factory", [](py::object factory) { Py_XSETREF(g_bridge_factory, factory.release().ptr()); },
        "_set_bridge_factory(factory, /)\n--\n\nRegisters permits._asyncio._bridge(loop) -> LoopBridge (called "
        "once, by that module).");
}

} // namespace permits::bind
