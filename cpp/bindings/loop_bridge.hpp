// One event loop's side of the engine: the notifier the engine completes that loop's waiters
// into, and the lease waits (engine_lease_wait.hpp) queued from it, resolved in batches.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "permits/waiter.hpp"

namespace permits::bind {

/// The waits a bridge holds, by id. Split by the id's low bits (ids are handed out in order, so
/// evenly): one table growing rehashes 1/64 of them, where one map of 100,000 waits stalled its
/// loop 3.7 ms at a rehash (benchmarks/bench_queue.py).
class HeldWaits {
public:
    void put(std::uint64_t id, PyObject* awaitable) {
        shard(id).emplace(id, awaitable);
        ++size_;
    }
    /// The awaitable held under `id`, no longer held (its reference handed over); nullptr if none.
    PyObject* take(std::uint64_t id) {
        auto& m = shard(id);
        const auto it = m.find(id);
        if (it == m.end()) {
            return nullptr;
        }
        PyObject* awaitable = it->second;
        m.erase(it);
        --size_;
        return awaitable;
    }
    /// Every awaitable held, no longer held (their references handed over).
    std::vector<PyObject*> take_all() {
        std::vector<PyObject*> all;
        all.reserve(size_);
        for (auto& m : shards_) {
            for (const auto& [id, awaitable] : m) {
                all.push_back(awaitable);
            }
            m = {};
        }
        size_ = 0;
        return all;
    }
    template <class F> void each(F&& f) const {
        for (const auto& m : shards_) {
            for (const auto& [id, awaitable] : m) {
                f(awaitable);
            }
        }
    }
    std::size_t size() const noexcept { return size_; }

private:
    std::unordered_map<std::uint64_t, PyObject*>& shard(std::uint64_t id) { return shards_[id % shards_.size()]; }
    std::array<std::unordered_map<std::uint64_t, PyObject*>, 64> shards_;
    std::size_t size_ = 0;
};

/// One event loop's side of the engine: the notifier the engine completes waiters into, and the
/// awaitables waiting in that loop. Used only on the loop's own thread (with the GIL).
class LoopBridge {
public:
    /// `socket`: a socket pair for a loop that receives from it (it takes the reader), instead of
    /// a pipe it watches (on Windows always a socket).
    explicit LoopBridge(bool socket = false)
        : notifier_(std::make_shared<Notifier>(socket ? detail::WakeKind::Socket : detail::WakeKind::Pipe)) {}
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
    HeldWaits waiting_;
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

/// The bridge of the running `loop` (permits._asyncio makes one per loop); throws on failure.
LoopBridge* bridge_of(PyObject* loop);

void bind_loop_bridge(pybind11::module_& m);

} // namespace permits::bind
