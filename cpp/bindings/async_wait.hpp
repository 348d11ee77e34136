// wait_async() as a C awaitable: granted at once without an event loop round trip, or queued in
// the engine with an asyncio future that the loop's bridge resolves when the engine completes it.
// Written against the C API because each Python frame between the task and the future costs more
// per waiter on every wake-up than the engine's whole decision (benchmarks/bench_async.py).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "permits/limiter.hpp"
#include "permits/per_key.hpp"
#include "permits/waiter.hpp"

namespace permits::bind {

/// One event loop's side of the engine: the notifier the engine completes waiters into, and the
/// awaitables waiting in that loop. Used only on the loop's own thread (with the GIL).
class LoopBridge {
public:
    LoopBridge() : notifier_(std::make_shared<Notifier>()) {}
    /// Requests still queued are taken out of the engine (granted ones given back): a loop that
    /// is gone can resolve nothing, and its waiters' permits must not be lost.
    ~LoopBridge();
    /// The same while the bridge lives on: its loop was closed (its reader dropped) or the GC is
    /// collecting the cycle through the loop. Their tasks are never woken.
    void abandon();
    /// Visits the Python objects the bridge holds (tp_traverse).
    int traverse(visitproc visit, void* arg) const;
    LoopBridge(const LoopBridge&) = delete;
    LoopBridge& operator=(const LoopBridge&) = delete;

    const std::shared_ptr<Notifier>& notifier() const { return notifier_; }
    /// Resolves every wait the engine completed since the last drain, and schedules one resume()
    /// for their tasks' wake-ups.
    void drain();
    /// Runs the wake-ups drain() collected, each in its task's context.
    void resume(pybind11::handle unused);
    std::size_t pending() const { return waiting_.size(); }

    /// The id of the next request queued from this loop (the engine hands it back when done).
    std::uint64_t next_id() { return next_id_++; }
    /// Holds `awaitable` (a new reference is taken) under `id` until drained or forgotten.
    void hold(std::uint64_t id, PyObject* awaitable);
    /// Drops the awaitable of `id`, if still held.
    void forget(std::uint64_t id);

private:
    std::shared_ptr<Notifier> notifier_;
    std::unordered_map<std::uint64_t, PyObject*> waiting_;
    struct Wakeup {
        PyObject* awaitable; // each a strong reference
        PyObject* fn;
        PyObject* context; // may be null
    };
    static void release(const Wakeup& w);
    std::vector<std::shared_ptr<Waiter>> batch_; // the batch being drained; kept for its capacity
    bool draining_ = false;
    std::vector<Wakeup> wakeups_; // due in the next resume()
    std::uint64_t next_id_ = 1;
};

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
PyObject* new_async_wait(WaitTarget target, std::int64_t permit_count);
/// An awaitable that completes at once with `value` (a new reference is taken).
PyObject* new_ready(PyObject* value);

void bind_async_wait(pybind11::module_& m);

// ---- What the loop's bridge asks of the waits it holds (async_wait.cpp) ----

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
