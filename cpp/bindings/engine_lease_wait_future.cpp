// The engine's lease wait as the future its task waits on: queued, the awaitable is yielded to its
// task, which then uses it as asyncio uses a future (asyncio's duck-typed protocol:
// _asyncio_future_blocking, get_loop, add_done_callback, cancel, result), so a grant wakes the task
// without an asyncio future (engine_lease_wait_core.hpp says why).
#include <Python.h>

#include <utility>
#include <vector>

#include "engine_lease_wait_core.hpp"

namespace permits::bind::lease_wait {

namespace {

void release(const Callback& cb) {
    Py_DECREF(cb.fn);
    Py_XDECREF(cb.context);
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

bool is_blocking_name(PyObject* name) {
    return name == names().blocking || (PyUnicode_Check(name) != 0 && PyUnicode_Compare(name, names().blocking) == 0);
}

bool is_done(const Core& c) {
    return c.resolved || c.phase == Phase::Done || c.phase == Phase::Ready || c.phase == Phase::Acquired;
}

} // namespace

bool call_soon(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* ctx) {
    PyObject* args[] = {loop, fn, arg, ctx};
    PyObject* r = PyObject_VectorcallMethod(names().call_soon, args, 3, ctx != nullptr ? names().context_kw : nullptr);
    Py_XDECREF(r);
    return r != nullptr;
}

void clear_callbacks(Core& c) {
    for (const auto& cb : c.callbacks) {
        release(cb);
    }
    c.callbacks.clear();
}

// `_asyncio_future_blocking` lives on instances only: a class attribute would make
// asyncio.isfuture() true, and ensure_future() / gather() would then take the awaitable for a
// running future instead of wrapping it in a task.
PyObject* getattro(PyObject* self, PyObject* name) {
    if (is_blocking_name(name)) {
        return PyBool_FromLong(core_of(self).blocking ? 1 : 0);
    }
    return PyObject_GenericGetAttr(self, name);
}

int setattro(PyObject* self, PyObject* name, PyObject* value) {
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

PyObject* get_loop(PyObject* self, PyObject* /*unused*/) {
    Core& c = core_of(self);
    if (c.loop == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "wait_async() is not waiting in an event loop");
        return nullptr;
    }
    return Py_NewRef(c.loop);
}

PyObject* add_done_callback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
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

PyObject* remove_done_callback(PyObject* self, PyObject* fn) {
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
PyObject* cancel(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
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

PyObject* result(PyObject* self, PyObject* /*unused*/) {
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

PyObject* done(PyObject* self, PyObject* /*unused*/) {
    return PyBool_FromLong(is_done(core_of(self)) ? 1 : 0);
}

PyObject* cancelled(PyObject* self, PyObject* /*unused*/) {
    const Core& c = core_of(self);
    return PyBool_FromLong(c.error != nullptr &&
                           PyObject_TypeCheck(c.error, reinterpret_cast<PyTypeObject*>(names().cancelled_error)));
}

} // namespace permits::bind::lease_wait
