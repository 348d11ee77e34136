// libFuzzer target over the engine's decision functions (no Python).
//
// The input is a program: the first bytes choose a limiter (kind, queue order, manual or automatic
// replenishment, small limits, the period or window, the clock's start), the rest is a sequence of
// operations on it: acquire, try_now, enqueue (waiters are kept), cancel, give_back of a granted
// outcome (a concurrency release or a refund), clock advances (small, by periods, huge),
// try_replenish, available_permits, statistics, idle_duration, close, reset, and a retry_after probe.
// After every operation the harness checks what must always hold and calls __builtin_trap() when
// something does not:
//   * concurrency: never more permits held than the limit, available == limit - held;
//   * fixed window: never more than the limit granted in one window (grants tracked by tag);
//   * sliding window: never more than the limit in any `segments` consecutive segments;
//   * sliding window counter: previous * (W - elapsed) + current * W <= limit * W;
//   * token bucket: never more granted than limit + tokens_per_period * elapsed periods + refunds;
//   * reset(): a time-based limiter's counts above start again from it (its whole limit), and a refund
//     of a grant tagged at or before it (its window's start) gives nothing back; concurrency: no reset;
//   * statistics: counters never decrease, queued == the permits of the pending waiters,
//     0 <= available <= limit, queued permits <= queue_limit;
//   * a failed LimitReached outcome of a time-based limiter has retry_after >= 0, and (nothing
//     queued) advancing the clock by retry_after makes the same request succeed;
//   * no lost wake-up: the next waiter to serve never asks for permits that are available, and no
//     pending waiter has a deadline in the past;
//   * exceptions: std::invalid_argument exactly for an invalid count, permits::ClosedError exactly
//     after close(), nothing else.
//
// Build and run: scripts/fuzz [seconds]  (see tests/fuzz/README.md).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

#include "fuzz_support.hpp"

namespace {

using permits::Nanos;
using permits::Outcome;
using permits::Reason;
using permits::Waiter;
using permits_fuzz::Kind;
using permits_fuzz::ll;

constexpr Nanos kMax = std::numeric_limits<Nanos>::max();

// The clock runs up to the engine's ceiling (kMaxTime, 2**62 ns), which ManualClock enforces.
Nanos clock_ceiling() {
    return permits::kMaxTime;
}

struct Tracked {
    std::shared_ptr<Waiter> waiter;
    std::int64_t n;
    Nanos deadline; // kMax: none
    bool seen = false;
};

class Harness {
public:
    explicit Harness(FuzzedDataProvider& in) : in_(in) {
        const auto b = in_.ConsumeIntegral<std::uint8_t>();
        kind_ = static_cast<Kind>(b % 5);
        newest_ = (b / 5) % 2 == 1;
        manual_ = kind_ != Kind::Concurrency && (b / 10) % 2 == 1;
        limit_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 8);
        queue_limit_ = in_.ConsumeIntegralInRange<std::int64_t>(0, 10);
        per_period_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 4);
        segments_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 6);
        static constexpr Nanos kPeriods[] = {1, 2, 3, 7, 10, 1000, 1000000000, Nanos{1} << 40, Nanos{1} << 62};
        period_ = std::max<Nanos>(kPeriods[in_.ConsumeIntegralInRange<std::size_t>(0, 8)], segments_);
        const Nanos starts[] = {0, 5, 1000000000, Nanos{1} << 62, clock_ceiling() - 1000};
        const Nanos start = starts[in_.ConsumeIntegralInRange<std::size_t>(0, 4)];
        clock_ = std::make_shared<permits::ManualClock>(start);
        const permits::QueueOptions q{queue_limit_,
                                      newest_ ? permits::QueueOrder::NewestFirst : permits::QueueOrder::OldestFirst};
        switch (kind_) {
        case Kind::Concurrency: limiter_ = std::make_shared<permits::Concurrency>(clock_, limit_, q); break;
        case Kind::TokenBucket:
            limiter_ = std::make_shared<permits::TokenBucket>(clock_, limit_, per_period_, period_, q, manual_);
            break;
        case Kind::FixedWindow:
            limiter_ = std::make_shared<permits::FixedWindow>(clock_, limit_, period_, q, manual_);
            break;
        case Kind::SlidingWindow:
            limiter_ = std::make_shared<permits::SlidingWindow>(clock_, limit_, period_, segments_, q, manual_);
            break;
        case Kind::SlidingWindowCounter:
            limiter_ = std::make_shared<permits::SlidingWindowCounter>(clock_, limit_, period_, q, manual_);
            break;
        }
        anchor_ = start;
        state_now_ = start;
        unit_ = kind_ == Kind::SlidingWindow ? period_ / segments_ : period_;
        trace("setup kind=%d newest=%d manual=%d limit=%lld queue_limit=%lld per_period=%lld segments=%lld period=%lld "
              "start=%lld\n",
              static_cast<int>(kind_), newest_, manual_, ll(limit_), ll(queue_limit_), ll(per_period_), ll(segments_),
              ll(period_), ll(start));
    }

    void run() {
        int steps = 0;
        while (in_.remaining_bytes() > 0 && steps++ < 256) {
            step(in_.ConsumeIntegralInRange<int>(0, 16));
            observe();
            check();
        }
        // The end of a program: close, which must fail every waiter still queued.
        if (!closed_) {
            limiter_->close();
            closed_ = true;
            observe();
            for (auto& t : waiters_) {
                CHECK(!t.waiter->pending());
            }
        }
    }

private:
    // ---- inputs ----
    std::int64_t pick_count() {
        switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
        case 0: return -1;
        case 1: return std::numeric_limits<std::int64_t>::min();
        case 2: return std::numeric_limits<std::int64_t>::max();
        case 3: return limit_ + 1;
        case 4: return permits::kMaxPermits + std::int64_t{1};
        case 5: return 0;
        default: return in_.ConsumeIntegralInRange<std::int64_t>(1, limit_);
        }
    }
    std::int64_t pick_count_traced() {
        const std::int64_t n = pick_count();
        trace("  n=%lld\n", ll(n));
        return n;
    }
    bool invalid(std::int64_t n) const { return n < 0 || n > limit_; }

    Nanos pick_timeout() {
        switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
        case 0: return -1;
        case 1: return 0;
        case 2: return kMax;
        case 3: return Nanos{1} << 62;
        case 4:
            return static_cast<Nanos>(std::min<permits::i128>(
                static_cast<permits::i128>(period_) * in_.ConsumeIntegralInRange<Nanos>(1, 3), kMax));
        default: return in_.ConsumeIntegralInRange<Nanos>(1, 64);
        }
    }

    Nanos headroom() const { return clock_ceiling() - clock_->now(); }

    void advance(Nanos delta) {
        delta = std::clamp<Nanos>(delta, 0, headroom()); // the clock never passes its ceiling
        trace("  advance %lld\n", ll(delta));
        clock_->advance(delta);
        if (!manual_) {
            state_now_ = clock_->now();
        }
    }

    std::int64_t index(Nanos t) const { return t <= anchor_ ? 0 : (t - anchor_) / unit_; }
    // A time-based grant's tag is the start of its period, window or segment in clock time: the
    // index it starts, checked to be a start of this limiter's timeline.
    std::int64_t tag_index(const Outcome& o) const {
        CHECK(o.tag >= anchor_ && (o.tag - anchor_) % unit_ == 0);
        return (o.tag - anchor_) / unit_;
    }

    // ---- operations ----
    template <class F> void expect_count_call(std::int64_t n, F&& f) {
        bool threw_invalid = false;
        bool threw_closed = false;
        try {
            f();
        } catch (const std::invalid_argument&) {
            threw_invalid = true;
        } catch (const permits::ClosedError&) {
            threw_closed = true;
        }
        CHECK(threw_invalid == invalid(n));
        CHECK(threw_closed == (!invalid(n) && closed_));
    }

    template <class F> void expect_state_call(F&& f) {
        bool threw_closed = false;
        try {
            f();
        } catch (const permits::ClosedError&) {
            threw_closed = true;
        }
        CHECK(threw_closed == closed_);
    }

    void step(int op) {
        // Set by the calls after which even a manual-mode limiter has served its queue (at its state time).
        served_ = false;
        trace("op %d at clock %lld (state %lld)\n", op, ll(clock_->now()), ll(state_now_));
        switch (op) {
        case 0: { // acquire
            const std::int64_t n = pick_count_traced();
            expect_count_call(n, [&] { on_outcome(limiter_->acquire(n)); });
            break;
        }
        case 1: { // try_now: the immediate part of a wait
            const std::int64_t n = pick_count_traced();
            expect_count_call(n, [&] {
                if (auto o = limiter_->try_now(n)) {
                    CHECK(o->acquired && o->permits == n);
                    on_outcome(*o);
                }
            });
            break;
        }
        case 2:
        case 3: { // enqueue
            const std::int64_t n = pick_count_traced();
            const Nanos timeout = pick_timeout();
            const Nanos now = clock_->now();
            expect_count_call(n, [&] {
                auto q = limiter_->enqueue(n, timeout);
                served_ = q.waiter != nullptr; // queued: the queue was served after it
                if (q.waiter) {
                    CHECK(timeout != 0);
                    CHECK(q.waiter->permits() == n);
                    const Nanos deadline = timeout < 0 ? kMax : permits::sat_add(now, timeout);
                    waiters_.push_back({q.waiter, n, deadline});
                } else {
                    CHECK(q.outcome.permits == n);
                    if (!q.outcome.acquired) {
                        CHECK(q.outcome.reason == Reason::QueueFull || q.outcome.reason == Reason::LimitReached ||
                              q.outcome.reason == Reason::Timeout);
                        CHECK(q.outcome.reason != Reason::Timeout || timeout == 0);
                    }
                    on_outcome(q.outcome);
                }
            });
            break;
        }
        case 4: { // cancel a waiter
            if (waiters_.empty()) {
                break;
            }
            auto& t = waiters_[in_.ConsumeIntegralInRange<std::size_t>(0, waiters_.size() - 1)];
            const bool was_pending = t.waiter->pending();
            const bool cancelled = limiter_->cancel(*t.waiter);
            served_ = cancelled;
            CHECK(cancelled == was_pending);
            CHECK(!t.waiter->pending());
            break;
        }
        case 5:
        case 6: { // give back a granted outcome: a release (concurrency) or a refund
            if (held_.empty()) {
                break;
            }
            const std::size_t i = in_.ConsumeIntegralInRange<std::size_t>(0, held_.size() - 1);
            const Outcome o = held_[i];
            held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
            give_back(o);
            served_ = !closed_;
            break;
        }
        case 7: advance(in_.ConsumeIntegralInRange<Nanos>(0, 255)); break;
        case 8: {
            const Nanos k = in_.ConsumeIntegralInRange<Nanos>(0, 2 * segments_ + 2);
            const Nanos part = in_.ConsumeIntegralInRange<Nanos>(-1, 1);
            advance(static_cast<Nanos>(std::min<permits::i128>(static_cast<permits::i128>(unit_) * k + part, kMax)));
            break;
        }
        case 9: { // huge advances
            static constexpr Nanos kHuge[] = {Nanos{1} << 40, Nanos{1} << 62, kMax, Nanos{1} << 61};
            advance(kHuge[in_.ConsumeIntegralInRange<std::size_t>(0, 3)]);
            break;
        }
        case 10: { // try_replenish
            bool threw_closed = false;
            bool r = false;
            try {
                r = limiter_->try_replenish();
            } catch (const permits::ClosedError&) {
                threw_closed = true;
            }
            CHECK(threw_closed == closed_); // after close() every call raises, auto mode too
            if (!threw_closed) {
                CHECK(r == manual_);
                if (manual_) {
                    state_now_ = std::max(state_now_, clock_->now());
                    served_ = true;
                }
            }
            break;
        }
        case 11: expect_state_call([&] { (void)limiter_->available_permits(); }); break;
        case 12: { // idle_duration
            const auto idle = limiter_->idle_duration();
            if (idle) {
                CHECK(*idle >= 0);
                CHECK(pending_permits() == 0 && pending_entries() == 0);
                if (kind_ == Kind::Concurrency && !closed_) {
                    CHECK(held_permits_ == 0);
                }
            } else if (kind_ == Kind::Concurrency && !closed_ && pending_entries() == 0) {
                CHECK(held_permits_ > 0);
            }
            break;
        }
        case 13: // close
            if (in_.ConsumeBool()) {
                limiter_->close();
                closed_ = true;
            }
            break;
        case 14: probe(); break;
        case 15: clock_->run_due(); break;
        case 16: { // reset
            const Nanos t = manual_ ? state_now_ : clock_->now();
            const bool done = limiter_->reset();
            CHECK(done == (kind_ != Kind::Concurrency && !closed_));
            if (done) { // the model's counts start again: the whole limit is there from t
                floor_ = std::max(floor_, t);
                net_.clear();
                granted_ = 0;
                refunded_ = 0;
                tb_base_ = index(t);
                served_ = true;
            }
            break;
        }
        }
    }

    // A failed request's retry_after: with nothing queued, advancing by it makes the request succeed.
    void probe() {
        const std::int64_t n = in_.ConsumeIntegralInRange<std::int64_t>(1, limit_);
        trace("  probe n=%lld\n", ll(n));
        if (closed_ || kind_ == Kind::Concurrency || pending_entries() > 0) {
            return;
        }
        const Outcome o = limiter_->acquire(n);
        on_outcome(o);
        if (o.acquired) {
            return;
        }
        CHECK(o.reason == Reason::LimitReached);
        if (o.retry_after < 0 || o.retry_after == kMax || o.retry_after > headroom()) { // kMax: saturated
            return;
        }
        advance(o.retry_after);
        if (manual_) {
            CHECK(limiter_->try_replenish());
            state_now_ = std::max(state_now_, clock_->now());
        }
        const Outcome again = limiter_->acquire(n);
        CHECK(again.acquired);
        on_outcome(again);
    }

    void give_back(const Outcome& o) {
        const bool effective = !closed_;
        const Nanos t = manual_ ? state_now_ : clock_->now();
        switch (kind_) {
        case Kind::Concurrency:
            if (effective) {
                held_permits_ -= o.permits;
            }
            break;
        case Kind::TokenBucket:
            if (effective && o.tag > floor_) { // only what the refills since the grant could not have brought
                const permits::i128 refilled = static_cast<permits::i128>(index(t) - tag_index(o)) * per_period_;
                refunded_ += static_cast<std::int64_t>(std::max<permits::i128>(0, o.permits - refilled));
            }
            break;
        case Kind::FixedWindow:
        case Kind::SlidingWindow:
        case Kind::SlidingWindowCounter:
            // Given back only while its window (segment) is current, and not reset since it began.
            if (effective && index(t) == tag_index(o) && o.tag > floor_) {
                net_[tag_index(o)] -= o.permits;
                CHECK(net_[tag_index(o)] >= 0);
            }
            break;
        }
        limiter_->give_back(o.permits, o.tag);
    }

    // Every outcome the engine produced, immediate or from a waiter.
    void on_outcome(const Outcome& o) {
        trace("  outcome acquired=%d permits=%lld tag=%lld reason=%d retry_after=%lld\n", o.acquired, ll(o.permits),
              ll(o.tag), static_cast<int>(o.reason), ll(o.retry_after));
        CHECK(o.permits >= 0 && o.permits <= limit_);
        if (!o.acquired) {
            CHECK(o.reason != Reason::None);
            if (kind_ != Kind::Concurrency && o.reason == Reason::LimitReached) {
                CHECK(o.retry_after >= 0);
                CHECK(o.retry_seconds >= 0);
            }
            if (o.retry_after >= 0 && o.retry_after < kMax) {
                const double expect = static_cast<double>(o.retry_after) / 1e9;
                CHECK(o.retry_seconds >= expect * (1 - 1e-9) && o.retry_seconds <= expect * (1 + 1e-9) + 1e-12);
            }
            return;
        }
        CHECK(o.reason == Reason::None);
        if (o.permits == 0) {
            return;
        }
        held_.push_back(o);
        const Nanos t = manual_ ? state_now_ : clock_->now();
        switch (kind_) {
        case Kind::Concurrency:
            held_permits_ += o.permits;
            CHECK(held_permits_ <= limit_);
            break;
        case Kind::TokenBucket: {
            granted_ += o.permits;
            const std::int64_t p = index(t);
            CHECK(tag_index(o) <= p);
            const permits::i128 bound = static_cast<permits::i128>(limit_) +
                                        static_cast<permits::i128>(per_period_) * (p - tb_base_) + refunded_;
            CHECK(static_cast<permits::i128>(granted_) <= bound);
            break;
        }
        case Kind::FixedWindow: {
            const std::int64_t w = tag_index(o);
            CHECK(w <= index(t));
            net_[w] += o.permits;
            CHECK(net_[w] <= limit_);
            break;
        }
        case Kind::SlidingWindow: {
            const std::int64_t w = tag_index(o);
            CHECK(w <= index(t));
            net_[w] += o.permits;
            std::int64_t sum = 0;
            for (auto it = net_.lower_bound(w - segments_ + 1); it != net_.end() && it->first <= w; ++it) {
                sum += it->second;
            }
            CHECK(sum <= limit_);
            break;
        }
        case Kind::SlidingWindowCounter: {
            const std::int64_t w = tag_index(o);
            CHECK(w <= index(t));
            net_[w] += o.permits;
            const std::int64_t cur = net_[w];
            const std::int64_t prev = net_.count(w - 1) ? net_[w - 1] : 0;
            const permits::i128 start = static_cast<permits::i128>(anchor_) + static_cast<permits::i128>(w) * unit_;
            const permits::i128 elapsed = std::clamp<permits::i128>(static_cast<permits::i128>(t) - start, 0, unit_);
            // At the latest time the grant could have been made (now), the previous window weighs
            // the least: the constraint there is implied by the one at the grant's own time.
            CHECK(static_cast<permits::i128>(prev) * (unit_ - elapsed) + static_cast<permits::i128>(cur) * unit_ <=
                  static_cast<permits::i128>(limit_) * unit_);
            break;
        }
        }
    }

    // Completed waiters: their outcomes, once each.
    void observe() {
        const Nanos now = clock_->now();
        for (auto& t : waiters_) {
            if (t.seen || t.waiter->state() == Waiter::Pending) {
                continue;
            }
            if (t.waiter->state() != Waiter::Completed) {
                CHECK(t.waiter->state() == Waiter::Cancelled);
                t.seen = true;
                continue;
            }
            t.seen = true;
            const Outcome& o = t.waiter->outcome();
            CHECK(o.permits == t.n);
            if (!o.acquired) {
                switch (o.reason) {
                case Reason::Closed: CHECK(closed_); break;
                case Reason::Evicted: CHECK(newest_); break;
                case Reason::Timeout: CHECK(t.deadline != kMax && t.deadline <= now); break;
                default: CHECK(false);
                }
            }
            on_outcome(o);
        }
        // Keep the vector short: drop what is settled.
        std::erase_if(waiters_, [](const Tracked& t) { return t.seen; });
    }

    std::int64_t pending_permits() const {
        std::int64_t sum = 0;
        for (const auto& t : waiters_) {
            if (t.waiter->pending()) {
                sum += t.n;
            }
        }
        return sum;
    }
    std::int64_t pending_entries() const {
        return std::count_if(waiters_.begin(), waiters_.end(), [](const Tracked& t) { return t.waiter->pending(); });
    }
    const Tracked* next_to_serve() const {
        const Tracked* found = nullptr;
        for (const auto& t : waiters_) {
            if (t.waiter->pending()) {
                found = &t;
                if (!newest_) {
                    break;
                }
            }
        }
        return found;
    }

    void check() {
        if (closed_) {
            for (const auto& t : waiters_) {
                CHECK(!t.waiter->pending());
            }
            bool threw = false;
            try {
                (void)limiter_->statistics();
            } catch (const permits::ClosedError&) {
                threw = true;
            }
            CHECK(threw);
            return;
        }
        const permits::Statistics s = limiter_->statistics();
        CHECK(s.total_successful_leases >= last_.total_successful_leases);
        CHECK(s.total_failed_leases >= last_.total_failed_leases);
        last_ = s;
        const std::int64_t queued = pending_permits();
        CHECK(s.current_queued_count == queued);
        CHECK(queued <= queue_limit_);
        CHECK(s.current_available_permits >= 0 && s.current_available_permits <= limit_);
        CHECK(s.current_available_permits == limiter_->available_permits());
        if (kind_ == Kind::Concurrency) {
            CHECK(s.current_available_permits == limit_ - held_permits_);
        }
        const Nanos now = clock_->now();
        for (const auto& t : waiters_) {
            // Every deadline that has passed was acted on by advance() (kMax: none, the end of time).
            CHECK(!t.waiter->pending() || t.deadline == kMax || t.deadline > now);
        }
        // No lost wake-up: the next waiter could not be served now.
        const Tracked* next = next_to_serve();
        if (next != nullptr) {
            if (next->n == 0) {
                CHECK(s.current_available_permits == 0);
            } else {
                CHECK(s.current_available_permits < next->n);
            }
        }
    }

    FuzzedDataProvider& in_;
    Kind kind_;
    bool newest_ = false;
    bool manual_ = false;
    std::int64_t limit_ = 1;
    std::int64_t queue_limit_ = 0;
    std::int64_t per_period_ = 1;
    std::int64_t segments_ = 1;
    Nanos period_ = 1;
    Nanos unit_ = 1; // the length a grant's tag counts: period, window or segment
    Nanos anchor_ = 0;
    Nanos state_now_ = 0; // the time the limiter's state is evaluated at (manual: last try_replenish)
    bool closed_ = false;
    bool served_ = false;
    std::shared_ptr<permits::ManualClock> clock_;
    std::shared_ptr<permits::Limiter> limiter_;

    std::vector<Tracked> waiters_;
    std::vector<Outcome> held_;                       // granted, not given back
    std::int64_t held_permits_ = 0;                   // concurrency
    std::int64_t granted_ = 0;                        // token bucket, since the last reset
    std::int64_t refunded_ = 0;                       // token bucket, since the last reset
    std::int64_t tb_base_ = 0;                        // token bucket: the period of the last reset
    Nanos floor_ = std::numeric_limits<Nanos>::min(); // the last reset's time: refunds tagged at or before it are void
    std::map<std::int64_t, std::int64_t> net_;        // window/segment tag -> permits granted minus refunds
    permits::Statistics last_{};
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return permits_fuzz::run_input<Harness>(data, size, 6);
}
