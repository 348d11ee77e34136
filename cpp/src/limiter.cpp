#include "permits/limiter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace permits {

void detail::check_limit(const char* name, std::int64_t value) {
    if (value < 1 || value > kMaxPermits) {
        throw std::invalid_argument(std::string(name) + " must be between 1 and 2147483647");
    }
}

void detail::check_duration(const char* name, Nanos value) {
    if (value < 1) {
        throw std::invalid_argument(std::string(name) + " must be at least 1 ns");
    }
}

void detail::check_queue(const QueueOptions& queue) {
    if ((queue.queue_limit < 0 || queue.queue_limit > kMaxPermits) && queue.queue_limit != kNoQueueLimit) {
        throw std::invalid_argument("queue_limit must be between 0 and " + std::to_string(kMaxPermits) +
                                    ", or no limit");
    }
}

Limiter::Limiter(std::shared_ptr<Clock> clock, std::int64_t max_permits, QueueOptions queue, bool manual)
    : clock_(std::move(clock)), max_permits_(max_permits), queue_limit_(queue.queue_limit), queue_order_(queue.order),
      manual_(manual), manual_now_(clock_->now()) {
    detail::check_queue(queue);
    detail::ForkRegistry::add(this);
}

Limiter::~Limiter() {
    detail::ForkRegistry::remove(this);
    if (timer_entries_ > 0) {
        clock_->scheduler().cancel(this);
    }
}

void Limiter::fork_reset_child(std::vector<std::shared_ptr<Waiter>>& dropped, bool timers_cleared) {
    for (auto& w : queue_entries_) {
        w->abandon();
        dropped.push_back(std::move(w));
    }
    queue_entries_.clear();
    queued_permits_.store(0);
    queued_entries_.store(0);
    timed_waiters_ = 0;
    deadlines_.clear();
    scheduled_at_ = kNever;
    if (timers_cleared) {
        timer_entries_ = 0;
    }
    invalidate_projection_locked();
}

void Limiter::validate(std::int64_t n) const {
    detail::check_permit_count(n, max_permits());
}

void detail::check_permit_count(std::int64_t n, std::int64_t max_permits) {
    if (n < 0) {
        throw std::invalid_argument("permit_count must not be negative, got " + std::to_string(n));
    }
    if (n > max_permits) {
        throw std::invalid_argument("permit_count " + std::to_string(n) + " exceeds the limiter's limit of " +
                                    std::to_string(max_permits));
    }
}

i128 Limiter::retry_after(std::int64_t n, Nanos state_time) {
    if (queue_order() == QueueOrder::OldestFirst && queued_entries_.load() > 0) {
        std::lock_guard<std::mutex> lock(mu_); // the requests queued ahead count: read them under the lock
        return retry_after_locked(n, state_time);
    }
    return retry_after_alone(n, state_time);
}

i128 Limiter::retry_after_locked(std::int64_t n, Nanos state_time) {
    if (queue_order() == QueueOrder::NewestFirst || queued_entries_.load() == 0) {
        return retry_after_alone(n, state_time);
    }
    if (!tail_) {
        tail_ = project();
        if (!tail_) {
            return -1;
        }
        tail_time_ = state_time;
        for (const auto& w : queue_entries_) {
            if (w->pending()) {
                tail_time_ = tail_->grant(w->permits(), std::max<i128>(tail_time_, state_time), true);
            }
        }
    }
    const i128 at = tail_->grant(n, std::max<i128>(tail_time_, state_time), false);
    return std::max<i128>(0, at - (manual_ ? clock_->now() : state_time));
}

i128 Limiter::retry_after_alone(std::int64_t n, Nanos state_time) const {
    // In manual mode state time lags the clock: the wait is reported from the clock's now.
    const i128 now = manual_ ? clock_->now() : state_time;
    const Nanos wait = time_until(std::max<std::int64_t>(n, 1), state_time);
    if (wait != kNever) {
        return std::max<i128>(0, static_cast<i128>(state_time) + wait - now);
    }
    // Never by time (concurrency), or beyond the int64 range: ask a projection, exact in 128 bits.
    auto projection = project();
    if (!projection) {
        return -1;
    }
    return std::max<i128>(0, projection->grant(n, state_time, false) - now);
}

void Limiter::project_push_locked(const Waiter& w, Nanos state_time) {
    if (tail_) {
        tail_time_ = tail_->grant(w.permits(), std::max<i128>(tail_time_, state_time), true);
    }
}

std::optional<Outcome> Limiter::grant_now(std::int64_t n, Nanos now) {
    std::int64_t tag = 0;
    // A zero-permit request succeeds while any permit is available (the queue is ignored); others
    // take permits unless OLDEST_FIRST requests are queued (no barging).
    const bool ok = n == 0 ? available_at(now) > 0 : !queue_blocks_barging() && take(n, now, tag);
    if (!ok) {
        return std::nullopt;
    }
    successful_.fetch_add(1);
    return Outcome::granted(n, tag);
}

Outcome Limiter::acquire(std::int64_t n) {
    catch_up();
    validate(n);
    if (closed_.load()) {
        throw ClosedError();
    }
    const Nanos now = state_now();
    if (auto granted = grant_now(n, now)) {
        return *granted;
    }
    failed_.fetch_add(1);
    if (no_room()) {
        return Outcome::failed(n, Reason::PartitionLimit);
    }
    return Outcome::failed(n, refusal(n), retry_after(n, now));
}

std::optional<Outcome> Limiter::try_now(std::int64_t n) {
    catch_up();
    validate(n);
    if (closed_.load()) {
        throw ClosedError();
    }
    return grant_now(n, state_now());
}

Limiter::Enqueued Limiter::enqueue(std::int64_t n, Nanos timeout, std::shared_ptr<Notifier> notifier,
                                   std::uint64_t id) {
    catch_up();
    validate(n);
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
        throw ClosedError();
    }
    const Nanos now = state_now();
    if (auto granted = grant_now(n, now)) {
        return {*granted, nullptr};
    }
    if (no_room()) {
        failed_.fetch_add(1);
        return {Outcome::failed(n, Reason::PartitionLimit), nullptr};
    }
    // Room is counted in permits (a zero-permit request always fits). Under NEWEST_FIRST a request
    // that could ever fit makes room by failing the oldest requests.
    const bool room = queue_limit() - queued_permits_.load() >= n;
    const bool can_evict = queue_order() == QueueOrder::NewestFirst && n <= queue_limit();
    if (!room && !can_evict) {
        failed_.fetch_add(1);
        return {Outcome::failed(n, Reason::QueueFull, retry_after_locked(n, now)), nullptr};
    }
    if (timeout == 0) {
        return {Outcome::failed(n, Reason::Timeout), nullptr}; // would wait: nobody is evicted for it
    }
    while (queue_limit() - queued_permits_.load() < n && !queue_entries_.empty()) {
        auto oldest = queue_entries_.front();
        queue_entries_.pop_front();
        if (oldest->pending()) {
            failed_.fetch_add(1);
            finish_locked(*oldest, Outcome::failed(oldest->permits(), Reason::Evicted));
            invalidate_projection_locked();
        }
    }
    const Nanos clock_now = clock_->now();
    const Nanos deadline = timeout < 0 ? kNever : sat_add(clock_now, timeout);
    auto waiter = std::make_shared<Waiter>(n, deadline, std::move(notifier), id);
    if (queued_entries_.load() == 0) {
        invalidate_projection_locked(); // a new queue starts from the state as it is now
    } else {
        project_push_locked(*waiter, now);
    }
    queue_entries_.push_back(waiter);
    waiter->queue_position = std::prev(queue_entries_.end());
    queued_permits_.fetch_add(n);
    queued_entries_.fetch_add(1);
    if (deadline != kNever) {
        ++timed_waiters_;
        deadlines_.push(waiter);
    }
    // A release may have landed between the failed take above and the queueing: serve now
    // what can be served, so no wake-up is lost.
    process_queue_locked(state_now());
    schedule_locked(state_now());
    drop_timers_if_idle_locked();
    if (waiter->pending()) {
        on_queued(); // (under the lock: the hook only signals, it never calls back in)
    }
    return {Outcome{}, waiter};
}

void Limiter::finish_locked(Waiter& w, const Outcome& o) {
    queued_permits_.fetch_sub(w.permits());
    queued_entries_.fetch_sub(1);
    w.complete(o);
    if (w.deadline() != kNever) {
        left_timed_locked();
    }
}

void Limiter::left_timed_locked() {
    --timed_waiters_;
    deadlines_.compact(static_cast<std::size_t>(timed_waiters_));
}

bool Limiter::cancel(Waiter& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!w.cancel()) {
        return false;
    }
    queued_permits_.fetch_sub(w.permits());
    queued_entries_.fetch_sub(1);
    if (w.deadline() != kNever) {
        left_timed_locked();
    }
    invalidate_projection_locked();
    queue_entries_.erase(w.queue_position); // (pending until now: still in the queue)
    // If it blocked the head, serve who is next.
    if (!closed_.load()) {
        process_queue_locked(state_now());
        schedule_locked(state_now());
    }
    drop_timers_if_idle_locked();
    return true;
}

void Limiter::process_queue_locked(Nanos state_time) {
    while (!queue_entries_.empty()) {
        const bool oldest = queue_order() == QueueOrder::OldestFirst;
        auto& next = oldest ? queue_entries_.front() : queue_entries_.back();
        if (!next->pending()) {
            oldest ? queue_entries_.pop_front() : queue_entries_.pop_back();
            continue;
        }
        const std::int64_t n = next->permits();
        std::int64_t tag = 0;
        const bool ok = n == 0 ? available_at(state_time) > 0 : take(n, state_time, tag);
        if (!ok) {
            return; // head-of-line blocking: nothing skips ahead
        }
        auto w = next;
        oldest ? queue_entries_.pop_front() : queue_entries_.pop_back();
        successful_.fetch_add(1);
        finish_locked(*w, Outcome::granted(n, tag));
    }
}

void Limiter::expire_locked(Nanos clock_now) {
    if (timed_waiters_ == 0) {
        return;
    }
    bool expired = false;
    while (auto w = deadlines_.pop_due(clock_now)) {
        queue_entries_.erase(w->queue_position);                           // (pending until now: still in the queue)
        finish_locked(*w, Outcome::failed(w->permits(), Reason::Timeout)); // not counted, like a cancellation
        expired = true;
    }
    if (expired) {
        invalidate_projection_locked();
    }
}

void Limiter::schedule_locked(Nanos state_time) {
    if (queued_entries_.load() == 0) {
        return;
    }
    const Nanos when = next_due_locked(state_time);
    if (when == kNever) {
        return;
    }
    // A timer already set for this time or earlier will reschedule when it fires.
    if (scheduled_at_ != kNever && scheduled_at_ <= when) {
        return;
    }
    scheduled_at_ = when;
    clock_->scheduler().schedule(weak_from_this(), when);
    ++timer_entries_;
}

void Limiter::drop_timers_if_idle_locked() {
    if (queued_entries_.load() == 0 && timer_entries_ > 0) {
        clock_->scheduler().cancel(this);
        timer_entries_ = 0;
        scheduled_at_ = kNever;
    }
}

void Limiter::on_timer(Nanos now) {
    try {
        catch_up();
    } catch (const std::exception&) {
        // (closed meanwhile, or amounts a damaged segment holds: the next request's catch_up says so)
    }
    std::lock_guard<std::mutex> lock(mu_);
    // Catch up from the time this timer was due: a late timer (or one ManualClock.advance over
    // several periods) serves each waiter at the time it became servable, as a punctual timer
    // would, so no replenishment is lost to the cap while the timer was late.
    Nanos t = std::min(scheduled_at_, now);
    scheduled_at_ = kNever;
    if (timer_entries_ > 0) {
        --timer_entries_; // this one (none counted: it was dropped after the scheduler took it)
    }
    if (closed_.load()) {
        return;
    }
    if (manual_) {
        // Deadlines in time order: a waiter behind one that times out is served from that moment,
        // before its own deadline passes in the same advance (property tests).
        for (Nanos d = next_deadline_locked(); d <= now; d = next_deadline_locked()) {
            expire_locked(d);
            process_queue_locked(state_now()); // an expired head may have unblocked others (fuzzer)
        }
        schedule_locked(state_now());
        drop_timers_if_idle_locked();
        return;
    }
    for (;;) {
        expire_locked(t);
        process_queue_locked(t);
        if (t >= now) {
            break;
        }
        const Nanos next = next_due_locked(t);
        t = next > now ? now : next;
    }
    schedule_locked(now);
    drop_timers_if_idle_locked();
}

Nanos Limiter::next_due_locked(Nanos state_time) {
    Nanos when = kNever;
    std::shared_ptr<Waiter> next = next_waiter_locked();
    if (next && !manual_) {
        const Nanos wait = time_until(std::max<std::int64_t>(next->permits(), 1), state_time);
        if (wait != kNever) {
            // At least 1 ns ahead: a request not served at `state_time` needs time to pass.
            when = sat_add(state_time, std::max<Nanos>(wait, 1));
        }
    }
    return std::min(when, next_deadline_locked());
}

Nanos Limiter::next_timer() {
    std::lock_guard<std::mutex> lock(mu_);
    return scheduled_at_;
}

std::shared_ptr<Waiter> Limiter::next_waiter_locked() const {
    if (queue_order() == QueueOrder::OldestFirst) {
        for (const auto& w : queue_entries_) {
            if (w->pending()) {
                return w;
            }
        }
    } else {
        const auto it =
            std::find_if(queue_entries_.rbegin(), queue_entries_.rend(), [](const auto& w) { return w->pending(); });
        if (it != queue_entries_.rend()) {
            return *it;
        }
    }
    return nullptr;
}

void Limiter::recheck() {
    if (queued_entries_.load() == 0) {
        return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    invalidate_projection_locked();
    if (!closed_.load()) {
        process_queue_locked(state_now());
        schedule_locked(state_now());
    }
    drop_timers_if_idle_locked();
}

bool Limiter::reset() {
    if (releases_permits()) {
        return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
        return false;
    }
    const Nanos now = state_now();
    if (refund_floor_.load() < now) {
        refund_floor_.store(now); // (under mu_: resets never race each other)
    }
    if (!reset_state(now)) {
        return false;
    }
    invalidate_projection_locked();
    process_queue_locked(now);
    schedule_locked(now);
    drop_timers_if_idle_locked();
    return true;
}

void Limiter::reconfigure_with(std::int64_t max_permits, QueueOptions queue, const std::function<void()>& change,
                               const std::int64_t (&amounts)[2]) {
    detail::check_queue(queue);
    if (shared_ == nullptr) {
        if (shares_state()) {
            // Every process decides with its own copy of the limit: one changing alone would disagree.
            throw std::logic_error("a limiter on shared state cannot change its limit alone");
        }
        apply_change(max_permits, queue, change);
        return;
    }
    // Published first, then taken on here: this process's other threads that see the new
    // generation meanwhile wait on the lock, then find it seen.
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (closed_.load()) {
        throw ClosedError();
    }
    const std::uint32_t generation = shared_->publish(amounts);
    apply_change(max_permits, queue, change);
    shared_->seen.store(generation);
}

void Limiter::follow(std::unique_ptr<SharedAmounts> shared, std::uint32_t seen) {
    shared->seen.store(seen);
    shared_ = std::move(shared);
}

void Limiter::catch_up_shared() {
    SharedAmounts& shared = *shared_;
    if (shared.generation->load(std::memory_order_acquire) == shared.seen.load(std::memory_order_relaxed) ||
        closed_.load()) {
        return;
    }
    std::lock_guard<std::mutex> lock(shared.mu);
    std::int64_t amounts[2] = {};
    const std::uint32_t generation = shared.read(amounts);
    if (generation == shared.seen.load() || closed_.load()) {
        return;
    }
    shared.apply(amounts);
    shared.seen.store(generation);
}

void Limiter::apply_change(std::int64_t max_permits, QueueOptions queue, const std::function<void()>& change) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
        throw ClosedError();
    }
    change();
    max_permits_.store(max_permits);
    queue_limit_.store(queue.queue_limit);
    queue_order_.store(queue.order);
    invalidate_projection_locked();
    // Those the new limit can never serve first (at the head they would block the rest), then
    // what it serves now, then the queue as the new queue limit keeps it.
    fail_unservable_locked(false);
    const Nanos now = state_now();
    process_queue_locked(now);
    fail_unservable_locked(true);
    schedule_locked(now);
    drop_timers_if_idle_locked();
}

void Limiter::fail_unservable_locked(bool beyond_queue_limit) {
    // In the order they would be served: those the new queue limit keeps come first.
    std::vector<std::pair<std::shared_ptr<Waiter>, Reason>> failing;
    std::int64_t kept = 0;
    auto look = [&](const std::shared_ptr<Waiter>& w) {
        if (!w->pending()) {
            return;
        }
        const std::int64_t n = w->permits();
        if (n > max_permits()) {
            failing.emplace_back(w, Reason::LimitReached); // never, however long it waits
        } else if (beyond_queue_limit && queue_limit() - kept < n) {
            failing.emplace_back(w, Reason::QueueFull);
        } else {
            kept += n;
        }
    };
    if (queue_order() == QueueOrder::OldestFirst) {
        std::for_each(queue_entries_.begin(), queue_entries_.end(), look);
    } else {
        std::for_each(queue_entries_.rbegin(), queue_entries_.rend(), look);
    }
    for (auto& entry : failing) {
        queue_entries_.erase(entry.first->queue_position); // (pending until now: still in the queue)
    }
    invalidate_projection_locked();
    const Nanos now = state_now();
    for (auto& [w, reason] : failing) {
        failed_.fetch_add(1);
        const i128 wait = reason == Reason::QueueFull ? retry_after_locked(w->permits(), now) : -1;
        finish_locked(*w, Outcome::failed(w->permits(), reason, wait));
    }
}

void Limiter::give_back(std::int64_t n, std::int64_t tag) {
    if (n <= 0) {
        return;
    }
    if (closed_.load()) {
        if (shares_state()) {
            give_back_at(n, tag, state_now()); // other processes count on it
        }
        return;
    }
    if (releases_permits()) {
        give_back_at(n, tag, state_now());
    } else {
        // A refund. Under the queue's lock, which a reset holds: a refund before it is reset
        // away, one after it sees its floor (lock-free, one could land in the state just reset).
        std::lock_guard<std::mutex> lock(mu_);
        if (tag <= refund_floor_.load()) {
            return; // granted in the window (period, segment) of a reset, or before it
        }
        give_back_at(n, tag, state_now());
    }
    recheck(); // permits came back: serve the queue
}

std::int64_t Limiter::available_permits() {
    catch_up();
    if (closed_.load()) {
        throw ClosedError();
    }
    return available_at(state_now());
}

Statistics Limiter::statistics() {
    catch_up();
    if (closed_.load()) {
        throw ClosedError();
    }
    return {available_at(state_now()), queued_permits_.load(), successful_.load(), failed_.load()};
}

std::optional<Nanos> Limiter::idle_duration() {
    if (queued_entries_.load() > 0) {
        return std::nullopt;
    }
    const Nanos since = full_at();
    if (since > state_now()) {
        return std::nullopt;
    }
    // Manual mode: the state is as of the last replenish, idleness runs on the clock.
    return std::max<Nanos>(0, clock_->now() - since);
}

bool Limiter::try_replenish() {
    if (closed_.load()) {
        throw ClosedError();
    }
    if (!manual_) {
        return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    Nanos now = clock_->now();
    // Never move state time backwards, whatever order concurrent calls land in.
    Nanos prev = manual_now_.load();
    while (prev < now && !manual_now_.compare_exchange_weak(prev, now)) {
    }
    invalidate_projection_locked();
    process_queue_locked(manual_now_.load());
    schedule_locked(manual_now_.load());
    drop_timers_if_idle_locked();
    return true;
}

void Limiter::close() {
    if (closed_.exchange(true)) {
        return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // Queued requests complete with failed leases, in the order they would have been served.
    const bool oldest = queue_order() == QueueOrder::OldestFirst;
    while (!queue_entries_.empty()) {
        auto w = oldest ? queue_entries_.front() : queue_entries_.back();
        oldest ? queue_entries_.pop_front() : queue_entries_.pop_back();
        if (w->pending()) {
            finish_locked(*w, Outcome::failed(w->permits(), Reason::Closed));
        }
    }
    drop_timers_if_idle_locked();
}

} // namespace permits
