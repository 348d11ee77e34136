// Clocks and the timers that wake waiters when their time comes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "permits/time.hpp"

namespace permits {

/// Something the scheduler calls back when a requested time has come (a limiter with waiters).
class TimerTarget {
public:
    virtual ~TimerTarget() = default;
    virtual void on_timer(Nanos now) = 0;
};

/// A min-heap of (time, target). Stale or duplicate entries are harmless: targets re-check their state.
class TimerHeap {
public:
    void push(Nanos when, std::weak_ptr<TimerTarget> target);
    /// Pops one entry due at `now` or earlier; false when none is due.
    bool pop_due(Nanos now, std::weak_ptr<TimerTarget>& out);
    Nanos next() const; // kNever when empty
    std::size_t size() const { return heap_.size(); }

private:
    struct Entry {
        Nanos when;
        std::uint64_t seq;
        std::weak_ptr<TimerTarget> target;
    };
    struct Later {
        bool operator()(const Entry& a, const Entry& b) const {
            return a.when != b.when ? a.when > b.when : a.seq > b.seq;
        }
    };
    std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
    std::uint64_t seq_ = 0;
};

/// Runs timers for the limiters of one clock.
class Scheduler {
public:
    virtual ~Scheduler() = default;
    /// Asks for target->on_timer() once the clock reaches `when`.
    virtual void schedule(std::weak_ptr<TimerTarget> target, Nanos when) = 0;
};

class Clock {
public:
    virtual ~Clock() = default;
    virtual Nanos now() const noexcept = 0;
    virtual Scheduler& scheduler() noexcept = 0;
};

/// The process's one engine thread: sleeps until the earliest timer of any limiter on the
/// monotonic clock, and not at all (blocked on a condition variable) while nothing waits.
class EngineThread final : public Scheduler {
public:
    static EngineThread& instance();
    void schedule(std::weak_ptr<TimerTarget> target, Nanos when) override;
    /// Timers waiting, for tests and statistics.
    std::size_t pending() const;
    /// How many times the thread was started (once per process, again after a fork).
    static std::uint64_t threads_started() noexcept { return threads_started_.load(); }

private:
    EngineThread() = default;
    [[noreturn]] void run();
    mutable std::mutex mu_; // guards heap_ and started_; released while a timer runs
    std::condition_variable cv_;
    TimerHeap heap_;
    bool started_ = false;
    static inline std::atomic<std::uint64_t> threads_started_{0};
};

/// std::chrono::steady_clock in nanoseconds.
class MonotonicClock final : public Clock {
public:
    static std::shared_ptr<MonotonicClock> instance();
    Nanos now() const noexcept override;
    Scheduler& scheduler() noexcept override { return EngineThread::instance(); }
};

/// Time that moves only when told. advance() runs, in the calling thread, every timer that
/// has come due, so tests of waiting need no sleeps.
class ManualClock final : public Clock, public Scheduler {
public:
    explicit ManualClock(Nanos start = 0);
    Nanos now() const noexcept override { return now_.load(); }
    Scheduler& scheduler() noexcept override { return *this; }
    void schedule(std::weak_ptr<TimerTarget> target, Nanos when) override;
    /// Moves time forward by `delta` (>= 0) and runs the timers due.
    void advance(Nanos delta);
    /// Runs the timers due at the current time (advance(0)).
    void run_due();
    std::size_t pending() const;

private:
    std::atomic<Nanos> now_;
    mutable std::mutex mu_; // guards heap_ only; never held while a timer runs
    TimerHeap heap_;
    std::mutex advance_mu_; // one advance at a time, so timers run in time order
};

} // namespace permits
