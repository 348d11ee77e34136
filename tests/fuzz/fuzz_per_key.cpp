// libFuzzer target over the per-key table (per_key.hpp), differential: every operation goes to a
// PerKeyLimiter, whose keys are 60-byte records, and to a reference table of full limiters, one per
// key, kept by this harness with eviction written straight from the rule ("a key is dropped once
// fully idle for longer than idle_timeout"). They must agree on every outcome (acquired, reason,
// retry_after to the nanosecond, tag), every key's statistics, the partition count and the totals,
// after every step. Operations: acquire, try_now, give_back of an earlier grant (a release or a
// refund), statistics, clock advances (small, by periods, huge), evict_idle.
//
// The sliding window's keys are compact records too (a head and a 32-bit count per segment, out of
// line), checked against full SlidingWindow limiters; segments 1-4 or 20 (specs.parse's).
//
// A second mode (the first input byte odd) adds what the reference cannot mirror exactly: queued
// requests (a key then becomes a full limiter), cancellations, timeouts and a partition bound. There
// the harness checks what must hold anyway: the bound, a queued request completes exactly once, no
// key grants past its limit while time stands still, close fails every waiter.
//
// Build and run: scripts/fuzz [seconds] (it runs both targets; see tests/fuzz/README.md).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

#include "fuzz_support.hpp"

namespace {

using permits::Limiter;
using permits::Nanos;
using permits::Outcome;
using permits::Pair;
using permits::PerKeyLimiter;
using permits::PerKeyTemplate;
using permits::QueueOptions;
using permits::Statistics;
using permits_fuzz::Kind;
using permits_fuzz::ll;

bool same(const Outcome& a, const Outcome& b) {
    return a.acquired == b.acquired && a.reason == b.reason && a.retry_after == b.retry_after &&
           a.permits == b.permits && (!a.acquired || a.tag == b.tag);
}

bool same(const Statistics& a, const Statistics& b) {
    return a.current_available_permits == b.current_available_permits &&
           a.current_queued_count == b.current_queued_count && a.total_successful_leases == b.total_successful_leases &&
           a.total_failed_leases == b.total_failed_leases;
}

struct Grant {
    std::string key;
    std::int64_t n;
    std::int64_t tag;
};

class Harness {
public:
    explicit Harness(FuzzedDataProvider& in) : in_(in) {
        const auto b = in_.ConsumeIntegral<std::uint8_t>();
        queues_ = (b & 1) != 0;
        kind_ = static_cast<Kind>((b >> 1) % 5);
        limit_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 6);
        per_period_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 3);
        segments_ = in_.ConsumeIntegralInRange<std::int64_t>(1, 5);
        segments_ = segments_ == 5 ? 20 : segments_; // specs.parse's
        static constexpr Nanos kPeriods[] = {1, 3, 10, 1000, 1000000000, Nanos{1} << 40};
        period_ = std::max<Nanos>(kPeriods[in_.ConsumeIntegralInRange<std::size_t>(0, 5)], segments_);
        static constexpr Nanos kIdle[] = {0, 1, 5, 1000, 1000000000, Nanos{1} << 50};
        idle_ = kIdle[in_.ConsumeIntegralInRange<std::size_t>(0, 5)];
        const Nanos starts[] = {0, 7, 1000000000, permits::kMaxTime - (Nanos{1} << 41)};
        clock_ = std::make_shared<permits::ManualClock>(starts[in_.ConsumeIntegralInRange<std::size_t>(0, 3)]);
        if (queues_) {
            queue_ = {in_.ConsumeIntegralInRange<std::int64_t>(0, 6),
                      in_.ConsumeBool() ? permits::QueueOrder::NewestFirst : permits::QueueOrder::OldestFirst};
            bound_ = in_.ConsumeIntegralInRange<std::int64_t>(0, 4);
        }
        keyed_ = std::make_shared<PerKeyLimiter>(clock_, make_template(), idle_, bound_);
        trace("setup queues=%d kind=%d limit=%lld per=%lld segments=%lld period=%lld idle=%lld\n", queues_,
              static_cast<int>(kind_), ll(limit_), ll(per_period_), ll(segments_), ll(period_), ll(idle_));
        static const char* const kKeys[] = {"", "a", "b", "user-12345", "abcdefghijklmn", "abcdefghijklmno"};
        for (const char* k : kKeys) {
            keys_.emplace_back(k);
        }
        keys_.emplace_back(std::string("\0x", 2));
        keys_.emplace_back(std::string(40, 'k'));
    }

    void run() {
        int steps = 0;
        while (in_.remaining_bytes() > 0 && steps++ < 200) {
            if (queues_) {
                step_with_queues(in_.ConsumeIntegralInRange<int>(0, 9));
            } else {
                step(in_.ConsumeIntegralInRange<int>(0, 7));
                compare_all();
            }
        }
        keyed_->close();
        for (auto& w : waiters_) {
            CHECK(!w->pending());
        }
    }

private:
    PerKeyTemplate make_template() {
        auto c = clock_;
        switch (kind_) {
        case Kind::Concurrency:
            return PerKeyTemplate::of<permits::Concurrency>(c, permits::ConcurrencyRule(limit_), queue_);
        case Kind::TokenBucket:
            return PerKeyTemplate::of<permits::TokenBucket>(c, permits::TokenBucketRule(limit_, per_period_, period_),
                                                            queue_);
        case Kind::FixedWindow:
            return PerKeyTemplate::of<permits::FixedWindow>(c, permits::FixedWindowRule(limit_, period_), queue_);
        case Kind::SlidingWindowCounter:
            return PerKeyTemplate::of<permits::SlidingWindowCounter>(
                c, permits::SlidingWindowCounterRule(limit_, period_), queue_);
        case Kind::SlidingWindow:
        default: // each key a compact record (a head and a count per segment); the reference a full window
            return PerKeyTemplate::sliding_window(c, limit_, period_, segments_, queue_);
        }
    }

    // The reference: a full limiter per key, built at the time of first use like a record.
    std::shared_ptr<Limiter> reference(const std::string& key) {
        auto it = ref_.find(key);
        if (it != ref_.end()) {
            return it->second;
        }
        const PerKeyTemplate t = make_template();
        const Nanos now = clock_->now();
        return ref_[key] = t.promote(now, t.rule ? t.rule->initial(now) : Pair{});
    }
    void evict_reference() {
        for (auto it = ref_.begin(); it != ref_.end();) {
            const auto idle = it->second->idle_duration();
            if (idle && *idle > idle_) {
                const Statistics s = it->second->statistics();
                ref_dropped_successful_ += s.total_successful_leases;
                ref_dropped_failed_ += s.total_failed_leases;
                it = ref_.erase(it);
            } else {
                ++it;
            }
        }
    }

    const std::string& pick_key() { return keys_[in_.ConsumeIntegralInRange<std::size_t>(0, keys_.size() - 1)]; }
    std::int64_t pick_count() {
        const int c = in_.ConsumeIntegralInRange<int>(0, 9);
        return c == 0 ? 0 : c == 1 ? limit_ + 1 : in_.ConsumeIntegralInRange<std::int64_t>(1, limit_);
    }
    Nanos pick_delta() {
        switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
        case 0: return 1;
        case 1: return idle_;
        case 2: return period_;
        case 3: return idle_ + 1;
        case 4: return Nanos{1} << in_.ConsumeIntegralInRange<int>(0, 45);
        default: return in_.ConsumeIntegralInRange<Nanos>(0, 64);
        }
    }
    void advance(Nanos delta) {
        delta = std::clamp<Nanos>(delta, 0, permits::kMaxTime - clock_->now());
        trace("advance %lld to %lld\n", ll(delta), ll(clock_->now() + delta));
        clock_->advance(delta); // the table's eviction checks run here
        evict_reference();
    }

    void step(int op) {
        switch (op) {
        case 0:
        case 1: { // acquire
            const std::string& key = pick_key();
            const std::int64_t n = pick_count();
            if (n > limit_) {
                bool threw = false;
                try {
                    keyed_->acquire(key, n);
                } catch (const std::invalid_argument&) {
                    threw = true;
                }
                CHECK(threw);
                reference(key); // the record was created before the count was refused: so is the reference's
                return;
            }
            const Outcome got = keyed_->acquire(key, n).outcome;
            const Outcome want = reference(key)->acquire(n);
            trace("acquire key=%zu n=%lld now=%lld: got %d/%d/%lld want %d/%d/%lld\n", key.size(), ll(n),
                  ll(clock_->now()), got.acquired, static_cast<int>(got.reason), ll(got.retry_after), want.acquired,
                  static_cast<int>(want.reason), ll(want.retry_after));
            CHECK(same(got, want));
            if (got.acquired && n > 0) {
                grants_.push_back({key, n, got.tag});
            }
            return;
        }
        case 2: { // try_now
            const std::string& key = pick_key();
            const std::int64_t n = std::min(pick_count(), limit_);
            const auto got = keyed_->try_now(key, n);
            const auto want = reference(key)->try_now(n);
            CHECK(got.has_value() == want.has_value());
            if (got) {
                CHECK(same(got->outcome, *want));
                if (n > 0) {
                    grants_.push_back({key, n, got->outcome.tag});
                }
            }
            return;
        }
        case 3: { // give back an earlier grant
            if (grants_.empty()) {
                return;
            }
            const std::size_t i = in_.ConsumeIntegralInRange<std::size_t>(0, grants_.size() - 1);
            const Grant g = grants_[i];
            grants_.erase(grants_.begin() + static_cast<std::ptrdiff_t>(i));
            trace("give_back key=%zu n=%lld tag=%lld\n", g.key.size(), ll(g.n), ll(g.tag));
            keyed_->give_back(g.key, g.n, g.tag);
            // A key evicted since has nothing to give back to (it was full); neither has the reference.
            if (auto it = ref_.find(g.key); it != ref_.end()) {
                it->second->give_back(g.n, g.tag);
            }
            return;
        }
        case 4: { // statistics of a key (creating it, as both do)
            const std::string& key = pick_key();
            const auto got = keyed_->statistics(key);
            CHECK(got.has_value());
            CHECK(same(*got, reference(key)->statistics()));
            return;
        }
        case 5:
        case 6: advance(pick_delta()); return;
        default: // what is due now, timers aside (a refund may have made a key idle long enough already)
            keyed_->evict_idle();
            evict_reference();
            return;
        }
    }

    void compare_all() {
        trace("  sizes %lld %zu\n", ll(keyed_->size()), ref_.size());
        CHECK(keyed_->size() == static_cast<std::int64_t>(ref_.size()));
        keyed_->check_invariants(); // throws (a crash to the fuzzer) naming what is inconsistent
        Statistics want{0, 0, ref_dropped_successful_, ref_dropped_failed_};
        for (auto& [key, limiter] : ref_) {
            const Statistics s = limiter->statistics();
            want.current_available_permits += s.current_available_permits;
            want.current_queued_count += s.current_queued_count;
            want.total_successful_leases += s.total_successful_leases;
            want.total_failed_leases += s.total_failed_leases;
        }
        CHECK(same(keyed_->totals(), want));
    }

    // ---- the second mode: queues, a bound, cancellations ----
    void step_with_queues(int op) {
        const std::string& key = pick_key();
        switch (op) {
        case 0:
        case 1: {
            const std::int64_t n = std::min(pick_count(), limit_);
            const Outcome o = keyed_->acquire(key, n).outcome;
            CHECK(o.acquired || o.reason != permits::Reason::None);
            if (o.acquired && n > 0) {
                grants_.push_back({key, n, o.tag});
            }
            break;
        }
        case 2:
        case 3: {
            const std::int64_t n = std::min(pick_count(), limit_);
            const Nanos timeout = in_.ConsumeBool() ? -1 : in_.ConsumeIntegralInRange<Nanos>(0, 2 * period_);
            auto q = keyed_->enqueue(key, n, timeout);
            if (q.enqueued.waiter) {
                CHECK(q.owner != nullptr);
                waiters_.push_back(q.enqueued.waiter);
                owners_.push_back(q.owner);
            } else if (q.enqueued.outcome.acquired && n > 0) {
                grants_.push_back({key, n, q.enqueued.outcome.tag});
            }
            break;
        }
        case 4: { // cancel a waiter
            if (waiters_.empty()) {
                break;
            }
            const std::size_t i = in_.ConsumeIntegralInRange<std::size_t>(0, waiters_.size() - 1);
            owners_[i]->cancel(*waiters_[i]);
            break;
        }
        case 5: { // a queue-granted lease goes back to its limiter, as its Python lease does
            for (std::size_t i = 0; i < waiters_.size(); ++i) {
                if (waiters_[i]->state() == permits::Waiter::Completed && waiters_[i]->outcome().acquired &&
                    !released_[waiters_[i].get()]) {
                    released_[waiters_[i].get()] = true;
                    owners_[i]->give_back(waiters_[i]->outcome().permits, waiters_[i]->outcome().tag);
                    break;
                }
            }
            break;
        }
        case 6: {
            if (!grants_.empty()) {
                const Grant g = grants_.back();
                grants_.pop_back();
                keyed_->give_back(g.key, g.n, g.tag);
            }
            break;
        }
        case 7: {
            const auto s = keyed_->statistics(key);
            CHECK(!s || (s->current_available_permits >= 0 && s->current_available_permits <= limit_));
            break;
        }
        default: {
            const Nanos delta = std::clamp<Nanos>(pick_delta(), 0, permits::kMaxTime - clock_->now());
            clock_->advance(delta);
            break;
        }
        }
        CHECK(bound_ == 0 || keyed_->size() <= bound_);
        CHECK(keyed_->size() >= 0);
        keyed_->check_invariants();
        for (auto& w : waiters_) { // nothing queued past its deadline
            CHECK(!w->pending() || w->deadline() > clock_->now());
        }
    }

    FuzzedDataProvider& in_;
    bool queues_ = false;
    Kind kind_ = Kind::Concurrency;
    std::int64_t limit_ = 1;
    std::int64_t per_period_ = 1;
    std::int64_t segments_ = 1;
    Nanos period_ = 1;
    Nanos idle_ = 0;
    QueueOptions queue_{};
    std::int64_t bound_ = 0;
    std::shared_ptr<permits::ManualClock> clock_;
    std::shared_ptr<PerKeyLimiter> keyed_;
    std::vector<std::string> keys_;
    std::map<std::string, std::shared_ptr<Limiter>> ref_;
    std::int64_t ref_dropped_successful_ = 0;
    std::int64_t ref_dropped_failed_ = 0;
    std::vector<Grant> grants_;
    std::vector<std::shared_ptr<permits::Waiter>> waiters_;
    std::vector<std::shared_ptr<Limiter>> owners_;
    std::map<const permits::Waiter*, bool> released_;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return permits_fuzz::run_input<Harness>(data, size, 8);
}
