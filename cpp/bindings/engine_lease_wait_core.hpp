// The inside of the engine's lease wait (engine_lease_wait.hpp), shared by its two halves: the
// awaitable its task drives (engine_lease_wait.cpp) and the future its task waits on
// (engine_lease_wait_future.cpp). Nothing else includes it.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine_lease_wait.hpp"
#include "loop_bridge.hpp"
#include "wait_handle.hpp"

namespace permits::bind::lease_wait {

namespace py = pybind11;

// Delegating: queued outside asyncio, the wait is a coroutine of permits._foreign (trio), which the
// awaitable drives as `yield from` would.
// Attempt: acquire_async()'s before its first step: nothing is taken until it is stepped, so one
// never awaited (dropped, closed, its task cancelled before it ran) holds nothing.
// Acquired: acquire_async()'s once stepped: every later await returns the same lease.
enum class Phase : std::uint8_t { New, Waiting, Delegating, Done, Ready, Attempt, Acquired };

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

struct EngineLeaseWaitObject {
    PyObject_HEAD Core core;
};

inline Core& core_of(PyObject* op) {
    return reinterpret_cast<EngineLeaseWaitObject*>(op)->core;
}

// Python objects the awaitable needs, made once when the module is imported (bind_engine_lease_wait). Never in
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
extern const Names* g_names; // for the process's lifetime, like the interned strings
inline const Names& names() {
    return *g_names;
}

// ---- The awaitable's side (engine_lease_wait.cpp)

/// The request leaves the engine's queue; if it was granted meanwhile, its permits go back.
void withdraw(Core& c);
/// Sets the exception the wait was resolved with (a cancellation) as the Python error.
void raise_error(const Core& c);

// ---- The future's side (engine_lease_wait_future.cpp)

/// loop.call_soon(fn, arg, context=ctx): how a callback runs when no batch is being resumed.
bool call_soon(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* ctx);
/// Drops the callbacks (a task's wake-up references the task, which references this awaitable).
void clear_callbacks(Core& c);
/// `_asyncio_future_blocking`, on instances only.
PyObject* getattro(PyObject* self, PyObject* name);
int setattro(PyObject* self, PyObject* name, PyObject* value);
/// asyncio.Future's methods, as a task uses them: the type's method table lists them.
PyObject* get_loop(PyObject* self, PyObject* unused);
PyObject* add_done_callback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);
PyObject* remove_done_callback(PyObject* self, PyObject* fn);
PyObject* cancel(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);
PyObject* result(PyObject* self, PyObject* unused);
PyObject* done(PyObject* self, PyObject* unused);
PyObject* cancelled(PyObject* self, PyObject* unused);

} // namespace permits::bind::lease_wait
