#include "async_wait.hpp"

#include <pybind11/pybind11.h>

#include <new>
#include <thread>
#include <utility>

#include "fastcall.hpp"
#include "lease_type.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace {

enum class Phase : std::uint8_t { New, Waiting, Done, Ready };

struct Core {
    WaitTarget target;
    std::int64_t permits = 0;
    Phase phase = Phase::New;
    bool entered = false;       // used by `async with`: the lease is kept for __aexit__
    PyObject* future = nullptr; // while waiting: the asyncio future yielded to the task
    PyObject* result = nullptr; // Ready: the value to return; after `async with` entry: the lease
    LoopBridge* bridge = nullptr;
    std::uint64_t id = 0;
    std::unique_ptr<WaitHandle> handle;
};

struct AsyncWaitObject {
    PyObject_HEAD Core core;
};

Core& core_of(PyObject* op) {
    return reinterpret_cast<AsyncWaitObject*>(op)->core;
}

// Interned names and asyncio's running-loop lookup, made once.
struct Names {
    PyObject* result = PyUnicode_InternFromString("result");
    PyObject* set_result = PyUnicode_InternFromString("set_result");
    PyObject* create_future = PyUnicode_InternFromString("create_future");
    PyObject* blocking = PyUnicode_InternFromString("_asyncio_future_blocking");
    PyObject* release = PyUnicode_InternFromString("release");
    // Looked up with the names, before any drain: a drain needs it while an error is pending.
    PyObject* invalid_state = py::object(py::module_::import("asyncio").attr("InvalidStateError")).release().ptr();
};
const Names& names() {
    static const Names* n = new Names(); // for the process's lifetime, like the interned strings
    return *n;
}

// The bridge of the running loop. The last one found is remembered with a weak reference to its
// loop, so a wait that queues calls into Python (permits._asyncio) only when the loop changes.
struct BridgeCache {
    PyObject* loop_ref = nullptr; // weak reference
    LoopBridge* bridge = nullptr;
};

LoopBridge* bridge_of(PyObject* loop) {
    static BridgeCache cache;
    if (cache.loop_ref != nullptr && PyWeakref_GetObject(cache.loop_ref) == loop) {
        return cache.bridge;
    }
    static PyObject* factory = py::object(py::module_::import("permits._asyncio").attr("_bridge")).release().ptr();
    py::object bridge = py::reinterpret_steal<py::object>(PyObject_CallOneArg(factory, loop));
    if (!bridge) {
        throw py::error_already_set();
    }
    auto* b = bridge.cast<LoopBridge*>(); // kept alive by permits._asyncio while its loop lives
    PyObject* ref = PyWeakref_NewRef(loop, nullptr);
    if (ref == nullptr) {
        throw py::error_already_set();
    }
    Py_XSETREF(cache.loop_ref, ref);
    cache.bridge = b;
    return b;
}

PyObject* running_loop() {
    static PyObject* get = py::object(py::module_::import("asyncio").attr("get_running_loop")).release().ptr();
    return PyObject_CallNoArgs(get);
}

// A lease for an outcome of the target: per-key grants go back through the table.
PyObject* lease_for(const WaitTarget& t, const Outcome& o) {
    if (t.keyed != nullptr && o.acquired) {
        return py_lease::from_keyed_outcome(o, *t.keyed, t.key);
    }
    return py_lease::from_outcome(o, t.limiter);
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
        py_lease::give_back(c.handle->lease().ptr());
    }
}

/// Ends the wait for good: a request still queued leaves the queue (a lease the bridge kept for
/// it is given back by withdraw()), and the future and the handle are let go.
void end(Core& c) {
    if (c.phase == Phase::Waiting) {
        withdraw(c);
        Py_CLEAR(c.result);
    }
    c.phase = Phase::Done;
    Py_CLEAR(c.future);
    c.handle.reset();
}

/// Done with `value` (a new reference, handed to the caller).
PySendResult finish(Core& c, PyObject* value, PyObject** out) {
    c.phase = Phase::Done;
    Py_CLEAR(c.future);
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

// First step: granted now, or refused for good (a full queue...), or queued with a future that is
// yielded to the task.
PySendResult start(PyObject* self, Core& c, PyObject** out) {
    PyObject* lease = guarded([&]() -> PyObject* {
        const WaitTarget& t = c.target;
        if (t.keyed != nullptr) {
            if (auto r = t.keyed->try_now(t.encoded, c.permits)) {
                return lease_for(t, r->outcome);
            }
        } else if (auto o = t.limiter->try_now(c.permits)) {
            return lease_for(t, *o);
        }
        py::object loop = py::reinterpret_steal<py::object>(running_loop());
        if (!loop) {
            throw py::error_already_set();
        }
        LoopBridge* bridge = bridge_of(loop.ptr());
        const std::uint64_t id = bridge->next_id();
        Limiter::Enqueued q;
        std::shared_ptr<Limiter> owner;
        if (t.keyed != nullptr) {
            auto kq = t.keyed->enqueue(t.encoded, c.permits, -1, bridge->notifier(), id);
            q = std::move(kq.enqueued);
            owner = std::move(kq.owner);
        } else {
            q = t.limiter->enqueue(c.permits, -1, bridge->notifier(), id);
            owner = t.limiter->shared_from_this();
        }
        if (!q.waiter) {
            return lease_for(t, q.outcome);
        }
        c.handle = t.keyed != nullptr
                       ? std::make_unique<WaitHandle>(std::move(owner), q.waiter, t.keyed->shared_from_this(),
                                                      py::reinterpret_borrow<py::object>(t.key))
                       : std::make_unique<WaitHandle>(std::move(owner), q.waiter);
        PyObject* fut = PyObject_CallMethodNoArgs(loop.ptr(), names().create_future);
        if (fut == nullptr || PyObject_SetAttr(fut, names().blocking, Py_True) != 0) {
            Py_XDECREF(fut);
            withdraw(c);
            throw py::error_already_set();
        }
        c.future = fut;
        c.id = id;
        c.bridge = bridge;
        bridge->hold(id, self);
        c.phase = Phase::Waiting;
        return nullptr; // queued: no lease yet
    });
    if (c.phase == Phase::Waiting) {
        *out = Py_NewRef(c.future);
        return PYGEN_NEXT;
    }
    if (lease == nullptr) {
        return fail(c);
    }
    return finish(c, lease, out);
}

PySendResult aw_send(PyObject* self, PyObject* /*arg*/, PyObject** out) {
    Core& c = core_of(self);
    switch (c.phase) {
    case Phase::New: return start(self, c, out);
    case Phase::Waiting: {
        // The bridge resolved the future and kept its result, the lease.
        PyObject* lease = c.result != nullptr ? std::exchange(c.result, nullptr)
                                              : PyObject_CallMethodNoArgs(c.future, names().result);
        if (lease == nullptr) {
            return fail(c);
        }
        return finish(c, lease, out);
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

PyObject* aw_next(PyObject* self) {
    PyObject* out = nullptr;
    switch (aw_send(self, Py_None, &out)) {
    case PYGEN_NEXT: return out;
    case PYGEN_RETURN:
        // The value travels in StopIteration, as for a generator's return.
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

PyObject* aw_send_method(PyObject* self, PyObject* /*value*/) {
    return aw_next(self);
}

// throw(exc) / throw(type[, value[, tb]]): what a task does when it is cancelled while waiting.
PyObject* aw_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return nullptr;
    }
    end(core_of(self));
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

void aw_dealloc(PyObject* self) {
    Core& c = core_of(self);
    end(c); // a queued wait is not freed while a bridge holds it; this is for one dropped otherwise
    Py_XDECREF(c.future);
    Py_XDECREF(c.result);
    Py_XDECREF(c.target.owner);
    Py_XDECREF(c.target.key);
    c.~Core();
    Py_TYPE(self)->tp_free(self);
}

PyAsyncMethods aw_async = {aw_await, nullptr, nullptr, aw_send};

PyMethodDef aw_methods[] = {{"send", aw_send_method, METH_O, "send(value): resumes the wait (asyncio drives this)."},
                            {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_throw)),
                             METH_FASTCALL, "throw(exc): ends the wait with exc; a queued request leaves the queue."},
                            {"close", aw_close, METH_NOARGS, "Ends the wait; a queued request leaves the queue."},
                            {"__aenter__", aw_aenter, METH_NOARGS, "async with: waits for the lease."},
                            {"__aexit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&aw_aexit)),
                             METH_FASTCALL, "async with: releases the lease."},
                            {nullptr, nullptr, 0, nullptr}};

PyTypeObject AsyncWaitType = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "permits._core.AsyncWait";
    t.tp_doc = "What wait_async returns: await it for a lease, or `async with` it to release on exit.";
    t.tp_basicsize = sizeof(AsyncWaitObject);
    t.tp_flags = Py_TPFLAGS_DEFAULT;
    t.tp_dealloc = aw_dealloc;
    t.tp_as_async = &aw_async;
    t.tp_iter = PyObject_SelfIter;
    t.tp_iternext = aw_next;
    t.tp_methods = aw_methods;
    return t;
}();

AsyncWaitObject* alloc() {
    auto* self = PyObject_New(AsyncWaitObject, &AsyncWaitType);
    if (self != nullptr) {
        new (&self->core) Core();
    }
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

// ---- LoopBridge ----

void LoopBridge::hold(std::uint64_t id, PyObject* awaitable) {
    waiting_.emplace(id, Py_NewRef(awaitable));
}

void LoopBridge::forget(std::uint64_t id) {
    auto it = waiting_.find(id);
    if (it != waiting_.end()) {
        PyObject* obj = it->second;
        waiting_.erase(it);
        Py_DECREF(obj);
    }
}

void LoopBridge::drain() {
    // The bridge's own buffer, unless a drain is already under way (a loop calling back in).
    std::vector<std::shared_ptr<Waiter>> own;
    auto& batch = draining_ ? own : batch_;
    struct Done {
        LoopBridge& b;
        std::vector<std::shared_ptr<Waiter>>& batch;
        bool outer;
        ~Done() {
            batch.clear();
            if (outer) {
                b.draining_ = false;
            }
        }
    } done{*this, batch, !std::exchange(draining_, true)};
    notifier_->drain_into(batch);
    for (const auto& w : batch) {
        auto it = waiting_.find(w->id());
        if (it == waiting_.end()) {
            continue; // withdrawn: whoever withdrew it gave back what it was granted
        }
        PyObject* obj = it->second;
        waiting_.erase(it);
        Core& c = core_of(obj);
        c.bridge = nullptr;
        // Each waiter on its own: an error on one is reported and the others still get theirs.
        try {
            py::object lease = c.handle->lease();
            // set_result fails only on a future that is done: its task was cancelled, nobody
            // will take the lease (cheaper than asking done() of every future).
            PyObject* r = PyObject_CallMethodOneArg(c.future, names().set_result, lease.ptr());
            if (r != nullptr) {
                Py_DECREF(r);
                Py_XSETREF(c.result, lease.release().ptr()); // the task takes it from here
            } else {
                PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
                PyErr_Fetch(&type, &value, &tb);
                if (PyErr_GivenExceptionMatches(type, names().invalid_state) != 0) {
                    Py_XDECREF(type);
                    Py_XDECREF(value);
                    Py_XDECREF(tb);
                    py_lease::give_back(lease.ptr());
                } else {
                    PyErr_Restore(type, value, tb);
                    PyErr_WriteUnraisable(c.future);
                }
            }
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable(py::reinterpret_borrow<py::object>(obj));
        }
        Py_DECREF(obj);
    }
}

LoopBridge::~LoopBridge() {
    auto waiting = std::move(waiting_);
    for (auto& [id, obj] : waiting) {
        Core& c = core_of(obj);
        c.bridge = nullptr;
        try {
            withdraw(c);
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable(py::reinterpret_borrow<py::object>(obj));
        }
        Py_DECREF(obj);
    }
}

void bind_async_wait(py::module_& m) {
    if (PyType_Ready(&AsyncWaitType) < 0) {
        throw py::error_already_set();
    }
    m.add_object("AsyncWait", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&AsyncWaitType)));
    py::class_<LoopBridge, std::shared_ptr<LoopBridge>>(m, "LoopBridge")
        .def(py::init<>())
        .def_property_readonly("fd", [](const LoopBridge& b) { return b.notifier()->fd(); })
        .def_property_readonly("wakeups", [](const LoopBridge& b) { return b.notifier()->wakeups(); })
        .def_property_readonly("pending", &LoopBridge::pending, "Waits queued from this loop, not yet resolved.")
        .def("drain", &LoopBridge::drain, "Resolves the futures of the waits the engine completed.");
}

} // namespace permits::bind
