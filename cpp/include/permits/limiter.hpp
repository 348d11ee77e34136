// What every limiter shares: the lock-free acquire, the wait queue, statistics, idleness, close.
// Each algorithm supplies only its state and arithmetic (take / available / time_until / give_back).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "permits/clock.hpp"
#include "permits/deadline_heap.hpp"
#include "permits/fork.hpp"
#include "permits/outcome.hpp"
#include "permits/rule.hpp"
#include "permits/scheduler.hpp"
#include "permits/waiter.hpp"

namespace permits {

namespace detail {
/// Constructor checks shared by the limiters: std::invalid_argument naming the option.
void check_limit(const char* name, std::int64_t value);
void check_duration(const char* name, Nanos value);
/// A request's permit count: 0 <= n <= max_permits.
void check_permit_count(std::int64_t n, std::int64_t max_permits);
} // namespace detail

enum class QueueOrder : std::uint8_t { OldestFirst = 0, NewestFirst = 1 };

struct Statistics {
    std::int64_t current_available_permits = 0;
    std::int64_t current_queued_count = 0;
    std::int64_t total_successful_leases = 0;
    std::int64_t total_failed_leases = 0;
};

/// A queue limit that puts no bound on the queue. It is a count like any other, so the queue's checks
/// (`queue_limit - queued >= n`) cost the same for it, and cannot overflow: queued permits are never negative.
inline constexpr std::int64_t kNoQueueLimit = std::numeric_limits<std::int64_t>::max();

struct QueueOptions {
    std::int64_t queue_limit = 0; // permits that may wait: 0 to kMaxPermits, or kNoQueueLimit
    QueueOrder order = QueueOrder::OldestFirst;
};

namespace detail {
/// std::invalid_argument unless the queue limit is 0 to kMaxPermits or kNoQueueLimit.
void check_queue(const QueueOptions& queue);
} // namespace detail

/// Amounts (a limit, a rate) kept in state other processes share and may change (a shared-memory
/// slot's): a limiter following them looks at their generation before each decision and takes on
/// what another process published. Amounts are at most two numbers (Rule::amounts).
struct SharedAmounts {
    /// Moves each time the amounts change.
    const std::atomic<std::uint32_t>* generation = nullptr;
    /// The amounts now, into `a`; their generation.
    std::function<std::uint32_t(std::int64_t (&a)[2])> read;
    /// Writes `a` for every process; their generation.
    std::function<std::uint32_t(const std::int64_t (&a)[2])> publish;
    /// This limiter takes on `a` (read from the shared state), its queue options as they are.
    std::function<void(const std::int64_t (&a)[2])> apply;

private:
    friend class Limiter;
    std::mutex mu; // one change at a time in this process: published or taken on, then seen
    std::atomic<std::uint32_t> seen{0};
};

class Limiter : public TimerTarget, public std::enable_shared_from_this<Limiter> {
public:
    /// `max_permits`: the most one request may ask for. `manual`: state advances only in try_replenish().
    Limiter(std::shared_ptr<Clock> clock, std::int64_t max_permits, QueueOptions queue, bool manual);
    ~Limiter() override;
    Limiter(const Limiter&) = delete;
    Limiter& operator=(const Limiter&) = delete;

    /// Never blocks or queues. Lock-free unless the limit is reached and requests are queued.
    Outcome acquire(std::int64_t n);

    /// The immediate part of a wait: granted now if enqueue() would grant at once, else nullopt
    /// (and nothing is counted: the caller goes on to enqueue()).
    std::optional<Outcome> try_now(std::int64_t n);

    struct Enqueued {
        Outcome outcome;                ///< final unless `waiter` is set
        std::shared_ptr<Waiter> waiter; ///< set when the request was queued
    };
    /// Acquires now, or queues the request (bounded by the queue limit), or rejects it.
    /// `timeout` (clock time) < 0: wait forever; 0: do not queue.
    Enqueued enqueue(std::int64_t n, Nanos timeout, std::shared_ptr<Notifier> notifier = nullptr, std::uint64_t id = 0);
    /// Removes a pending request from the queue; false if it had already completed.
    bool cancel(Waiter& w);
    /// Returns permits: a concurrency lease's release, or a refund of a time-based grant
    /// (given back only while its window or segment is current).
    void give_back(std::int64_t n, std::int64_t tag);

    std::int64_t available_permits();
    Statistics statistics();
    /// Nanoseconds since the limiter became fully idle, or nullopt while in use.
    std::optional<Nanos> idle_duration();
    /// Manual mode: applies the replenishment that elapsed time allows; false in auto mode.
    bool try_replenish();
    void close();
    bool closed() const noexcept { return closed_.load(); }
    /// Its amounts now (Rule::amounts): the limit, and a rate where the kind has one.
    virtual void amounts(std::int64_t (&out)[2]) const noexcept {
        out[0] = max_permits();
        out[1] = 0;
    }
    /// From now on this limiter follows `shared` (seen at generation `seen`); set once, before use.
    void follow(std::unique_ptr<SharedAmounts> shared, std::uint32_t seen);
    /// Before a decision: takes on the amounts another process published since the last look (a
    /// relaxed load and a compare when none did; nothing for a limiter that follows none).
    void catch_up() {
        if (shared_ != nullptr) [[unlikely]] {
            catch_up_shared();
        }
    }

    std::int64_t max_permits() const noexcept { return max_permits_.load(std::memory_order_relaxed); }
    QueueOptions queue_options() const noexcept { return {queue_limit(), queue_order()}; }
    bool manual() const noexcept { return manual_; }
    const std::shared_ptr<Clock>& clock() const noexcept { return clock_; }
    /// True for limiters whose permits come back on release (concurrency).
    virtual bool releases_permits() const noexcept { return false; }
    /// True when the state is shared with other processes: a lease given back after close() still
    /// gives its permits back there (a closed in-process limiter's state concerns nobody).
    virtual bool shares_state() const noexcept { return false; }
    /// True when the lease granted with `tag` is lost: the shared state forgot it and the limit did
    /// not allow taking it back (its release gives nothing back). Never for in-process state.
    virtual bool lost(std::int64_t /*tag*/) { return false; }
    /// When the state is full, or will be if nothing else happens; kNever if time alone never fills it.
    virtual Nanos full_at() const = 0;
    /// Requests waiting in the queue.
    std::int64_t queued_requests() const noexcept { return queued_entries_.load(); }
    /// When this limiter's timer is next due (serving or expiring its queue); kNever: not set.
    Nanos next_timer();
    /// The state changed where this limiter cannot see it (another process released permits into
    /// a shared state): serves what the queue can now be served.
    void recheck();
    /// Forgets what a time-based limiter has granted: its whole limit is available from now, and
    /// its queue is served from it. A refund of a grant made in the window (period, segment) of
    /// the reset, before or after it, gives nothing back: never more than the limit after the reset.
    /// False (nothing changes) for concurrency, whose permits are those held, and once closed.
    bool reset();

    void on_timer(Nanos now) override;

    /// An opaque tag for the bindings (a registry id); the engine never reads it.
    std::uint64_t binding_tag = 0;

protected:
    // ---- the algorithm ----
    /// Atomically takes n > 0 permits if that many are available at `now`; sets `tag`.
    virtual bool take(std::int64_t n, Nanos now, std::int64_t& tag) = 0;
    virtual std::int64_t available_at(Nanos now) const = 0;
    /// Time from `now` until `needed` permits are available if nothing else happens; kNever
    /// when time alone never brings them (concurrency).
    virtual Nanos time_until(std::int64_t needed, Nanos now) const = 0;
    virtual void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) = 0;
    /// A projection of the current state; nullptr for limiters whose permits time does not bring back.
    virtual std::unique_ptr<Projection> project() const = 0;
    /// Asked only when a request cannot be granted: true when there is no room for this limiter's
    /// state at all (a key of a full shared per-key table). Such a request fails at once with
    /// reason PartitionLimit and never queues.
    virtual bool no_room() { return false; }
    /// Asked only when a request cannot be granted now: why (a shared limiter whose permits are
    /// free but cannot be held by this process says ProcessLimit).
    virtual Reason refusal(std::int64_t /*n*/) { return Reason::LimitReached; }
    /// Called under the queue's lock after a request joined the queue (it may only signal, never
    /// call back in): a shared limiter starts listening for releases in other processes.
    virtual void on_queued() {}
    /// Under the queue's lock: the state made full at `now` (reset()); false if the kind cannot.
    virtual bool reset_state(Nanos /*now*/) { return false; }
    /// A new limit (reconfigure): under the queue's lock, `change` makes the kind's own change (its
    /// rule, its state); then `max_permits` and `queue` hold, the requests queued that can no longer
    /// be served fail (more than `max_permits`: LimitReached; beyond the queue limit, served last:
    /// QueueFull) and the queue is served from the new limit. ClosedError once closed.
    /// A limiter following shared amounts (follow()) publishes `amounts` for every process first.
    void reconfigure_with(std::int64_t max_permits, QueueOptions queue, const std::function<void()>& change,
                          const std::int64_t (&amounts)[2]);
    /// The change reconfigure_with makes, here alone (no amounts published): a follower taking on
    /// what another process published.
    void apply_change(std::int64_t max_permits, QueueOptions queue, const std::function<void()>& change);

    /// The time state is evaluated at: the clock, or the last try_replenish() in manual mode.
    Nanos state_now() const noexcept { return manual_ ? manual_now_.load() : clock_->now(); }

private:
    friend class detail::ForkRegistry;
    /// fork(): takes mu_ if free (prepare), lets it go (parent, and child once reset); a follower's
    /// lock of shared amounts first (taken before mu_, as a change takes them): a thread of the
    /// parent changing the limit at the fork would leave the child's copy locked for good.
    bool fork_try_lock() noexcept {
        if (shared_ != nullptr && !shared_->mu.try_lock()) {
            return false;
        }
        if (!mu_.try_lock()) {
            if (shared_ != nullptr) {
                shared_->mu.unlock();
            }
            return false;
        }
        return true;
    }
    void fork_unlock() noexcept {
        mu_.unlock();
        if (shared_ != nullptr) {
            shared_->mu.unlock();
        }
    }
    /// In a forked child, under mu_: the queued requests were the parent's threads'; they are
    /// dropped, ungranted and unnotified, into `dropped` (destroyed once every lock is free).
    /// `timers_cleared`: the scheduler's timers are gone too (the engine thread's are).
    void fork_reset_child(std::vector<std::shared_ptr<Waiter>>& dropped, bool timers_cleared);

    void validate(std::int64_t n) const;
    void catch_up_shared();
    /// The immediate grant shared by acquire, try_now and enqueue; nullopt (nothing counted) if not now.
    std::optional<Outcome> grant_now(std::int64_t n, Nanos now);
    /// Exact wait (ns) until a new request for n could be granted if nothing else arrived,
    /// counting the requests queued ahead (OLDEST_FIRST); -1 when time alone never grants it.
    i128 retry_after(std::int64_t n, Nanos state_time);
    i128 retry_after_locked(std::int64_t n, Nanos state_time);
    i128 retry_after_alone(std::int64_t n, Nanos state_time) const;
    void invalidate_projection_locked() noexcept { tail_.reset(); }
    void project_push_locked(const Waiter& w, Nanos state_time);
    bool queue_blocks_barging() const noexcept {
        return queue_order() == QueueOrder::OldestFirst && queued_permits_.load() > 0;
    }
    // Read by the fast path without the lock; changed under it (reconfigure).
    std::int64_t queue_limit() const noexcept { return queue_limit_.load(std::memory_order_relaxed); }
    QueueOrder queue_order() const noexcept { return queue_order_.load(std::memory_order_relaxed); }
    /// Under mu_: the queued requests a new limit can never serve fail (reconfigure_with), and with
    /// `beyond_queue_limit` those past the new queue limit in the order they would be served.
    void fail_unservable_locked(bool beyond_queue_limit);
    // All *_locked members run under mu_.
    void process_queue_locked(Nanos state_time);
    void expire_locked(Nanos clock_now);
    void schedule_locked(Nanos state_time);
    /// Once the queue is empty, its timers serve nothing: drops them from the scheduler, which
    /// would otherwise keep this limiter's memory until they are due.
    void drop_timers_if_idle_locked();
    Nanos next_due_locked(Nanos state_time);
    Nanos next_deadline_locked() { return timed_waiters_ > 0 ? deadlines_.next() : kNever; }
    std::shared_ptr<Waiter> next_waiter_locked() const;
    void finish_locked(Waiter& w, const Outcome& o);
    /// A timed waiter left the queue (completed or cancelled): its deadline no longer counts.
    void left_timed_locked();

    std::shared_ptr<Clock> clock_;
    std::unique_ptr<SharedAmounts> shared_; // amounts other processes may change; usually none
    std::atomic<std::int64_t> max_permits_;
    std::atomic<std::int64_t> queue_limit_;
    std::atomic<QueueOrder> queue_order_;
    const bool manual_;
    std::atomic<Nanos> manual_now_;
    std::atomic<bool> closed_{false};

    // Read without the lock by the fast path: a request may barge only while nothing is queued.
    std::atomic<std::int64_t> queued_permits_{0};
    std::atomic<std::int64_t> queued_entries_{0};
    std::atomic<std::int64_t> successful_{0};
    std::atomic<std::int64_t> failed_{0};
    // reset(): a refund of a grant tagged at or before it gives nothing back (tags are the starts
    // of windows, periods or segments in clock time).
    std::atomic<std::int64_t> refund_floor_{std::numeric_limits<std::int64_t>::min()};

    // The lock exists only for the queue: it is taken when a request queues, when queued requests
    // are served or expire, and on close. An acquire that is not queued never takes it.
    std::mutex mu_;
    // A list, not a deque: an empty std::deque allocates ~600 bytes, which per-key limiters
    // cannot afford; an empty list allocates nothing. Holds pending requests only: one that
    // completes or is cancelled leaves it at once (Waiter::queue_position).
    std::list<std::shared_ptr<Waiter>> queue_entries_;
    std::int64_t timed_waiters_ = 0;
    detail::DeadlineHeap deadlines_; // the timed waiters' deadlines (may hold finished ones)
    Nanos scheduled_at_ = kNever;
    std::int64_t timer_entries_ = 0; // timers asked of the scheduler and not yet run or dropped
    // The state once every queued request is served, and when the last one would be: makes an
    // exact retry_after O(1) per rejection. Rebuilt lazily after a cancel, eviction or refund.
    std::unique_ptr<Projection> tail_;
    i128 tail_time_ = 0;
    detail::ForkLinks<Limiter> fork_links_;
};

} // namespace permits
