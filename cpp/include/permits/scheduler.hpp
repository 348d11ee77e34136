// The timers that wake waiters when their time comes: the timer heap, the scheduler interface
// and the process's engine thread that runs the real-time clock's timers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "permits/time.hpp"

namespace permits {

namespace detail {
class ForkRegistry;
} // namespace detail

/// Something the scheduler calls back when a requested time has come (a limiter with waiters).
class TimerTarget {
public:
    virtual ~TimerTarget() = default;
    virtual void on_timer(Nanos now) = 0;
};

/// A min-heap of (time, target). Stale or duplicate entries are harmless: targets re-check their state.
class TimerHeap {
public:
    /// `raw` is the target's address (for remove()), read by the caller before taking the heap's lock.
    void push(Nanos when, std::weak_ptr<TimerTarget> target, const TimerTarget* raw);
    void push(Nanos when, const std::weak_ptr<TimerTarget>& target) { push(when, target, target.lock().get()); }
    /// Pops one entry due at `now` or earlier; false when none is due.
    bool pop_due(Nanos now, std::weak_ptr<TimerTarget>& out);
    /// Drops every entry for `target`; returns how many. O(entries).
    std::size_t remove(const TimerTarget* target);
    void clear() noexcept { heap_.clear(); }
    Nanos next() const; // kNever when empty
    std::size_t size() const { return heap_.size(); }

private:
    struct Entry {
        Nanos when;
        std::uint64_t seq;
        std::weak_ptr<TimerTarget> target;
        // Identifies the target for remove() even once it is expired (the weak pointer cannot).
        const TimerTarget* raw;
    };
    struct Later {
        bool operator()(const Entry& a, const Entry& b) const {
            return a.when != b.when ? a.when > b.when : a.seq > b.seq;
        }
    };
    std::vector<Entry> heap_; // a heap under Later (std::push_heap and friends), so entries can be removed
    std::uint64_t seq_ = 0;
};

/// Runs timers for the limiters of one clock.
class Scheduler {
public:
    virtual ~Scheduler() = default;
    /// Asks for target->on_timer() once the clock reaches `when`.
    virtual void schedule(std::weak_ptr<TimerTarget> target, Nanos when) = 0;
    /// Forgets every timer asked for `target`: a weak pointer in the heap pins the target's
    /// allocation (made with make_shared) until the timer is due, which can be years away.
    /// Returns how many were dropped.
    virtual std::size_t cancel(const TimerTarget* target) = 0;
};

/// The process's one engine thread: sleeps until the earliest timer of any limiter on the
/// monotonic clock, and not at all (blocked on a condition variable) while nothing waits.
class EngineThread final : public Scheduler {
public:
    static EngineThread& instance();
    void schedule(std::weak_ptr<TimerTarget> target, Nanos when) override;
    std::size_t cancel(const TimerTarget* target) override;
    /// Timers waiting, for tests and statistics.
    std::size_t pending() const;
    /// Starts the thread if timers wait and it is not running: a forked child has no engine
    /// thread until the next schedule(), or until this is called.
    void resume();
    /// How many times the thread was started (once per process, again after a fork).
    static std::uint64_t threads_started() noexcept { return threads_started_.load(); }

private:
    friend class detail::ForkRegistry;
    EngineThread() = default;
    [[noreturn]] void run();
    void start_locked();
    mutable std::mutex mu_; // guards heap_ and started_; released while a timer runs
    // Held by the thread while it runs a timer (and drops its target): fork() takes it first, so
    // the thread is between timers, holding no limiter's lock, when the process forks.
    std::mutex busy_;
    std::condition_variable cv_;
    TimerHeap heap_;
    bool started_ = false;
    static inline std::atomic<std::uint64_t> threads_started_{0};
};

} // namespace permits
