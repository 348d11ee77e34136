// The engine's lease wait (permits.awaitables.LeaseWait, what wait_async() returns) as a C
// awaitable: granted at once without an event loop round trip, or queued in the engine, yielded to
// its task as the future it waits on, and resolved by the loop's bridge (loop_bridge.hpp) when the
// engine completes it.
// Written against the C API because each Python frame between the task and the future costs more
// per waiter on every wake-up than the engine's whole decision (benchmarks/bench_async.py).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "permits/limiter.hpp"
#include "permits/per_key.hpp"
#include "permits/waiter.hpp"

namespace permits::bind {

/// What an awaitable waits on: one limiter, or one key of a per-key table.
struct WaitTarget {
    PyObject* owner = nullptr;        ///< the Python limiter or table (strong reference)
    Limiter* limiter = nullptr;       ///< set for a limiter
    PerKeyLimiter* per_key = nullptr; ///< set for a key of a table
    PyObject* key = nullptr;          ///< the Python key (strong reference), for a table
    std::string encoded;              ///< the key's engine encoding, for a table
};

/// A new awaitable for `permit_count` permits of `target` (whose references it takes over);
/// nullptr with a Python error set on failure.
PyObject* new_engine_lease_wait(WaitTarget target, std::int64_t permit_count);
/// acquire_async()'s awaitable: the attempt (acquire) is made at its first step, and every await
/// returns that lease. Takes over `target`'s references; nullptr with a Python error set on failure.
PyObject* new_attempt_lease_wait(WaitTarget target, std::int64_t permit_count);

void bind_engine_lease_wait(pybind11::module_& m);

// ---- What the loop's bridge asks of the waits it holds ----

/// A callback to run once a wait is resolved: its task's wake-up (strong references).
struct WaitCallback {
    PyObject* fn = nullptr;
    PyObject* context = nullptr; ///< may be null
};
/// The engine completed the wait `awaitable`: it takes its lease (or the error making it) and
/// lets go of its bridge. Returns its callbacks, whose references the caller takes over.
std::vector<WaitCallback> resolve_wait(PyObject* awaitable);
/// The loop the wait `awaitable` waits in (null once it is not queued).
PyObject* wait_loop(PyObject* awaitable);
/// The bridge drops the wait `awaitable` for good: it leaves its queue, a grant not handed over goes back.
void abandon_wait(PyObject* awaitable);
/// loop.call_soon(fn, arg, context=context); false with a Python error set on failure.
bool schedule_on(PyObject* loop, PyObject* fn, PyObject* arg, PyObject* context);
/// The interned name "resume".
PyObject* resume_name();

} // namespace permits::bind
