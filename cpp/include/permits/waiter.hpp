// A queued request and the ways its completion reaches the caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "permits/fork.hpp"
#include "permits/outcome.hpp"
#include "permits/wake_channel.hpp"

namespace permits {

class Waiter;

/// Delivers completed asynchronous waiters to one event loop: completions queue here and the
/// first one of a batch writes one byte to a pipe or socket the loop watches (one wake-up per batch);
/// the loop drains the whole batch. No Python here: the engine thread never needs the GIL.
class Notifier {
public:
    explicit Notifier(detail::WakeKind kind = detail::WakeKind::Pipe);
    ~Notifier();
    Notifier(const Notifier&) = delete;
    Notifier& operator=(const Notifier&) = delete;

    /// The pipe or socket the loop watches (detail::WakeChannel::kNone once taken).
    detail::WakeChannel::Handle fd() const noexcept { return channel_.reader(); }
    /// Hands a socket over to a loop that receives from it itself (it reads and closes it from
    /// now on); drain() then only takes the waiters. kNone for a pipe.
    detail::WakeChannel::Handle take_reader() noexcept { return channel_.take_reader(); }
    void push(std::shared_ptr<Waiter> w);
    /// Takes every completed waiter queued so far and empties the pipe or socket.
    std::vector<std::shared_ptr<Waiter>> drain();
    /// The same into `out` (emptied first) by swapping buffers: both keep their capacity, so a
    /// steady stream of batches allocates nothing (freeing a grown buffer made glibc consolidate
    /// its free lists: ~5% of releasing 100k waiters, measured).
    void drain_into(std::vector<std::shared_ptr<Waiter>>& out);
    std::uint64_t wakeups() const noexcept { return wakeups_.load(); }

private:
    friend class detail::ForkRegistry;
    detail::WakeChannel channel_;
    std::mutex mu_; // guards ready_/signalled_: held for a push_back or a swap, never while waiting
    std::vector<std::shared_ptr<Waiter>> ready_;
    bool signalled_ = false;
    std::atomic<std::uint64_t> wakeups_{0};
    detail::ForkLinks<Notifier> fork_links_;
};

/// One queued request. Its state leaves Pending exactly once: granted, failed or cancelled.
class Waiter : public std::enable_shared_from_this<Waiter> {
public:
    enum State : int { Pending, Completing, Completed, Cancelled };

    Waiter(std::int64_t permits, Nanos deadline, std::shared_ptr<Notifier> notifier, std::uint64_t id)
        : permits_(permits), deadline_(deadline), id_(id), notifier_(std::move(notifier)) {}

    std::int64_t permits() const noexcept { return permits_; }
    Nanos deadline() const noexcept { return deadline_; }
    std::uint64_t id() const noexcept { return id_; }
    State state() const noexcept { return static_cast<State>(state_.load()); }
    bool pending() const noexcept { return state() == Pending; }
    /// Valid once state() == Completed.
    const Outcome& outcome() const noexcept { return outcome_; }

    /// Pending -> Completed and notify the caller; false if it was no longer pending.
    bool complete(const Outcome& o);
    /// Pending -> Cancelled; false if it was no longer pending.
    bool cancel() noexcept;
    /// Blocks up to `timeout_ns` of real time for completion or cancellation; true once completed.
    bool wait_for(Nanos timeout_ns);
    /// Where the request sits in its limiter's queue while pending there (set and read under the
    /// limiter's lock): a cancellation or a timeout takes it out at once, in O(1), rather than
    /// leaving an entry that a later pass over the queue must skip and compact.
    std::list<std::shared_ptr<Waiter>>::iterator queue_position;

    /// In a forked child: the request was a parent thread's. Pending -> Cancelled without
    /// notifying anyone, and the lock and condition variable made afresh (the thread that waited
    /// on them is not in the child, and glibc would wait for it to leave before destroying them).
    void abandon() noexcept;

private:
    std::int64_t permits_;
    Nanos deadline_;
    std::uint64_t id_;
    std::shared_ptr<Notifier> notifier_;
    Outcome outcome_;
    std::atomic<int> state_{Pending};
    std::mutex mu_; // only for blocking waiters' condition variable
    std::condition_variable cv_;
};

} // namespace permits
