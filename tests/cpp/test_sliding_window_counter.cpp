// Sliding window counter: two weighted fixed windows (docs/design.md: Sliding window counter, Replenishment,
// Retry-after).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include "permits/clock.hpp"
#include "permits/sliding_window_counter.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<SlidingWindowCounter> make_counter(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                                   Nanos window, std::int64_t queue_limit = 0,
                                                   QueueOrder order = QueueOrder::OldestFirst, bool manual = false) {
    return std::make_shared<SlidingWindowCounter>(clock, limit, window, QueueOptions{queue_limit, order}, manual);
}

} // namespace

TEST(SlidingWindowCounter, InvalidConstructionArgumentsThrow) {
    auto clock = make_clock();
    const QueueOptions q{};
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, 0, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, -1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, kMaxPermits + 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, 1, 0, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, 1, -kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindowCounter>(clock, 1, std::numeric_limits<Nanos>::min(), q, false),
                 std::invalid_argument);
    EXPECT_THROW(
        std::make_shared<SlidingWindowCounter>(clock, 1, kSec, QueueOptions{-1, QueueOrder::OldestFirst}, false),
        std::invalid_argument);
    EXPECT_NO_THROW(std::make_shared<SlidingWindowCounter>(clock, kMaxPermits, 1,
                                                           QueueOptions{kMaxPermits, QueueOrder::NewestFirst}, true));
}

TEST(SlidingWindowCounter, PropertiesReflectOptions) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 3, QueueOrder::NewestFirst, true);
    EXPECT_EQ(swc->permit_limit(), 10);
    EXPECT_EQ(swc->window(), 10 * kSec);
    EXPECT_EQ(swc->max_permits(), 10);
    EXPECT_EQ(swc->queue_options().queue_limit, 3);
    EXPECT_TRUE(swc->manual());
    EXPECT_FALSE(swc->releases_permits());
}

TEST(SlidingWindowCounter, BadPermitCountsThrow) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 10);
    EXPECT_THROW(swc->acquire(11), std::invalid_argument);
    EXPECT_THROW(swc->acquire(-1), std::invalid_argument);
    EXPECT_THROW(swc->enqueue(11, -1), std::invalid_argument);
    EXPECT_THROW(swc->enqueue(-1, -1), std::invalid_argument);
}

TEST(SlidingWindowCounter, PreviousWindowWeighsByTheUnelapsedFraction) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    const Outcome o = swc->acquire(10);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 0);
    EXPECT_EQ(swc->available_permits(), 0);
    clock->advance(10 * kSec); // window 1 starts: previous 10 weighs fully
    EXPECT_EQ(swc->available_permits(), 0);
    clock->advance(5 * kSec);
    EXPECT_EQ(swc->available_permits(), 5);
    clock->advance(2500 * kMs); // 10 - 10 * 0.25 = 7.5
    EXPECT_EQ(swc->available_permits(), 7);
    clock->advance(2500 * kMs);
    EXPECT_EQ(swc->available_permits(), 10);
}

TEST(SlidingWindowCounter, GrantsExactlyWhenTheEstimateFits) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(15 * kSec);
    const Outcome five = swc->acquire(5);
    ASSERT_TRUE(five.acquired);
    EXPECT_EQ(five.tag, 10 * kSec); // the start of window (period, segment) 1
    Outcome o = swc->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 1 * kSec); // 10 * 0.4 + 5 + 1 = 10 at 16 s
    clock->advance(kSec - 1);
    EXPECT_FALSE(swc->acquire(1).acquired);
    clock->advance(1);
    EXPECT_TRUE(swc->acquire(1).acquired);
}

TEST(SlidingWindowCounter, NoBurstAcrossTheBoundary) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    clock->advance(10 * kSec - kMs);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(kMs); // window 1 begins
    const Outcome o = swc->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 1 * kSec);
}

TEST(SlidingWindowCounter, AvailablePermitsIsTheFloorOfTheEstimate) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(3).acquired);
    EXPECT_EQ(swc->available_permits(), 7);
    clock->advance(12500 * kMs); // previous 3 * 0.75 = 2.25
    EXPECT_EQ(swc->available_permits(), 7);
    ASSERT_TRUE(swc->acquire(7).acquired);
    EXPECT_FALSE(swc->acquire(1).acquired);
}

TEST(SlidingWindowCounter, PreviousCountsZeroAfterALongGap) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(25 * kSec);
    EXPECT_EQ(swc->available_permits(), 10);
    const Outcome o = swc->acquire(10);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 20 * kSec); // the start of window (period, segment) 2
    // Still anchored at construction: window 3 starts at 30 s.
    EXPECT_EQ(swc->acquire(1).retry_after, 6 * kSec); // 31 s: 10 * 0.9 + 1 = 10
}

TEST(SlidingWindowCounter, WindowsAreAnchoredAtConstruction) {
    auto clock = make_clock();
    clock->advance(3 * kSec);
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(10 * kSec); // 13 s
    EXPECT_EQ(swc->available_permits(), 0);
    clock->advance(5 * kSec); // 18 s
    EXPECT_EQ(swc->available_permits(), 5);
    EXPECT_EQ(swc->acquire(6).retry_after, 1 * kSec);
}

TEST(SlidingWindowCounter, RetryAfterWhenTheCurrentWindowIsTooFull) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(4).acquired);
    // 4 * (1 - f) + 7 <= 10 in window 1: f >= 0.25, at 12.5 s.
    EXPECT_EQ(swc->acquire(7).retry_after, 12500 * kMs);
    clock->advance(2 * kSec);
    EXPECT_EQ(swc->acquire(7).retry_after, 10500 * kMs);
}

TEST(SlidingWindowCounter, RetryAfterZeroPermitCountsAsOne) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(10).acquired);
    Outcome o = swc->acquire(0);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 11 * kSec);
    clock->advance(4 * kSec);
    o = swc->acquire(0);
    EXPECT_EQ(o.retry_after, 7 * kSec);
    EXPECT_TRUE(o.retry_after >= 0);
    const Statistics s = swc->statistics();
    EXPECT_EQ(s.total_successful_leases, 1);
    EXPECT_EQ(s.total_failed_leases, 2);
}

TEST(SlidingWindowCounter, RetryAfterCountsPermitsQueuedAheadUnderOldestFirst) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 5);
    ASSERT_TRUE(swc->acquire(10).acquired);
    ASSERT_TRUE(swc->enqueue(1, -1).waiter);
    EXPECT_EQ(swc->acquire(1).retry_after, 12 * kSec);
}

TEST(SlidingWindowCounter, RetryAfterIgnoresQueueUnderNewestFirst) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 5, QueueOrder::NewestFirst);
    ASSERT_TRUE(swc->acquire(10).acquired);
    ASSERT_TRUE(swc->enqueue(1, -1).waiter);
    EXPECT_EQ(swc->acquire(1).retry_after, 11 * kSec);
}

TEST(SlidingWindowCounter, RetryAfterIsExactWithAFullLimitRequestQueuedAhead) {
    // Limit 2 and requests of 2: each grant needs the previous window to weigh nothing, so
    // the queued request is granted at 20 s (window 2) and the next one at 40 s (window 4).
    auto clock = make_clock();
    auto swc = make_counter(clock, 2, 10 * kSec, 2);
    ASSERT_TRUE(swc->acquire(2).acquired);
    auto ahead = swc->enqueue(2, -1);
    ASSERT_TRUE(ahead.waiter);
    EXPECT_EQ(swc->acquire(2).retry_after, 40 * kSec);
    // What actually happens, nothing else arriving:
    clock->advance(20 * kSec - 1);
    EXPECT_EQ(ahead.waiter->state(), Waiter::Pending);
    clock->advance(1);
    ASSERT_EQ(ahead.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(ahead.waiter->outcome().acquired);
    clock->advance(10 * kSec); // 30 s
    EXPECT_EQ(swc->available_permits(), 0);
    clock->advance(10 * kSec - 1);
    EXPECT_FALSE(swc->acquire(2).acquired);
    clock->advance(1); // 40 s
    EXPECT_TRUE(swc->acquire(2).acquired);
}

TEST(SlidingWindowCounter, QueueFullRejectionCarriesRetryAfter) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 1);
    ASSERT_TRUE(swc->acquire(10).acquired);
    ASSERT_TRUE(swc->enqueue(1, -1).waiter);
    const auto r = swc->enqueue(1, -1);
    EXPECT_FALSE(r.waiter);
    EXPECT_EQ(r.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(r.outcome.retry_after, 12 * kSec);
}

TEST(SlidingWindowCounter, RetryAfterIsExactForSingleRequests) {
    // Property: with nothing queued, a failed request is refused 1 ns before its retry_after
    // and granted at it.
    std::mt19937_64 rng(12345);
    for (int trial = 0; trial < 200; ++trial) {
        auto clock = make_clock();
        const std::int64_t limit = 1 + static_cast<std::int64_t>(rng() % 20);
        const Nanos window = 1 + static_cast<Nanos>(rng() % (3 * kSec));
        auto swc = make_counter(clock, limit, window);
        for (int step = 0; step < 30; ++step) {
            clock->advance(static_cast<Nanos>(rng() % static_cast<std::uint64_t>(window)));
            const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(limit));
            const Outcome o = swc->acquire(n);
            if (o.acquired) {
                continue;
            }
            ASSERT_GE(o.retry_after, 0);
            if (o.retry_after > 0) {
                clock->advance(o.retry_after - 1);
                ASSERT_FALSE(swc->acquire(n).acquired)
                    << "trial " << trial << " limit " << limit << " window " << window << " n " << n;
                clock->advance(1);
            }
            ASSERT_TRUE(swc->acquire(n).acquired)
                << "trial " << trial << " limit " << limit << " window " << window << " n " << n;
        }
    }
}

TEST(SlidingWindowCounter, QueuedRequestIsGrantedWhenTheEstimateAdmitsIt) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 2);
    ASSERT_TRUE(swc->acquire(10).acquired);
    auto q = swc->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(11 * kSec - 1);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(1);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 10 * kSec); // the start of window (period, segment) 1
    EXPECT_EQ(swc->available_permits(), 0);
    const Statistics s = swc->statistics();
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.current_queued_count, 0);
}

TEST(SlidingWindowCounter, GiveBackRefundsOnlyTheCurrentWindow) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    const Outcome first = swc->acquire(3);
    ASSERT_TRUE(first.acquired);
    clock->advance(5 * kSec);
    swc->give_back(1, first.tag);
    EXPECT_EQ(swc->available_permits(), 8);
    clock->advance(7 * kSec);     // 12 s: previous 2 * 0.8 = 1.6
    swc->give_back(1, first.tag); // window 0 is no longer current
    EXPECT_EQ(swc->available_permits(), 8);
    const Outcome second = swc->acquire(2);
    ASSERT_TRUE(second.acquired);
    EXPECT_EQ(second.tag, 10 * kSec);       // the start of window (period, segment) 1
    EXPECT_EQ(swc->available_permits(), 6); // 10 - 1.6 - 2 = 6.4
    swc->give_back(2, first.tag);
    EXPECT_EQ(swc->available_permits(), 6);
    swc->give_back(1, second.tag);
    EXPECT_EQ(swc->available_permits(), 7);
    swc->give_back(5, second.tag); // never below zero
    EXPECT_EQ(swc->available_permits(), 8);
}

TEST(SlidingWindowCounter, GiveBackServesQueuedRequests) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 2, 10 * kSec, 2);
    const Outcome o = swc->acquire(2);
    ASSERT_TRUE(o.acquired);
    auto q = swc->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    swc->give_back(1, o.tag);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(swc->available_permits(), 0);
}

TEST(SlidingWindowCounter, ZeroPermitProbe) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 2, 10 * kSec);
    EXPECT_TRUE(swc->acquire(0).acquired);
    ASSERT_TRUE(swc->acquire(2).acquired);
    EXPECT_FALSE(swc->acquire(0).acquired);
    clock->advance(15 * kSec); // 2 * 0.5 = 1 left
    EXPECT_TRUE(swc->acquire(0).acquired);
    EXPECT_EQ(swc->available_permits(), 1);
}

TEST(SlidingWindowCounter, IdleDuration) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(0));
    clock->advance(2 * kSec);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(2 * kSec));
    EXPECT_TRUE(swc->acquire(0).acquired);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(2 * kSec));
    ASSERT_TRUE(swc->acquire(1).acquired); // weighs until window 1 ends (20 s)
    EXPECT_EQ(swc->idle_duration(), std::nullopt);
    clock->advance(13 * kSec); // 15 s
    EXPECT_EQ(swc->available_permits(), 9);
    EXPECT_EQ(swc->idle_duration(), std::nullopt);
    clock->advance(5 * kSec); // 20 s
    EXPECT_EQ(swc->available_permits(), 10);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(0));
    clock->advance(3 * kSec);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(3 * kSec));
}

TEST(SlidingWindowCounter, IdleDurationAfterTheCurrentCountIsRefunded) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec);
    ASSERT_TRUE(swc->acquire(1).acquired);
    clock->advance(12 * kSec);
    const Outcome o = swc->acquire(1);
    ASSERT_TRUE(o.acquired);
    swc->give_back(1, o.tag); // only the previous window's 1 still weighs, until 20 s
    EXPECT_EQ(swc->idle_duration(), std::nullopt);
    clock->advance(8 * kSec);
    EXPECT_EQ(swc->idle_duration(), std::optional<Nanos>(0));
}

TEST(SlidingWindowCounter, TryReplenishInAutoModeReturnsFalse) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 1, 10 * kSec);
    ASSERT_TRUE(swc->acquire(1).acquired);
    EXPECT_FALSE(swc->try_replenish());
}

TEST(SlidingWindowCounter, ManualModeAdvancesOnlyInTryReplenish) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(15 * kSec);
    EXPECT_EQ(swc->available_permits(), 0);
    EXPECT_TRUE(swc->try_replenish());
    EXPECT_EQ(swc->available_permits(), 5);
}

TEST(SlidingWindowCounter, ManualModeRetryAfterIsMeasuredFromTheClock) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 10, 10 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(swc->acquire(10).acquired);
    clock->advance(5 * kSec);
    EXPECT_EQ(swc->acquire(1).retry_after, 6 * kSec);
    clock->advance(10 * kSec);
    EXPECT_EQ(swc->acquire(1).retry_after, 0);
}

TEST(SlidingWindowCounter, LargeLimitsUseExactArithmetic) {
    auto clock = make_clock();
    auto swc = make_counter(clock, kMaxPermits, 2 * kSec);
    ASSERT_TRUE(swc->acquire(kMaxPermits).acquired);
    clock->advance(3 * kSec); // half of window 1 elapsed
    EXPECT_EQ(swc->available_permits(), kMaxPermits / 2);
    ASSERT_TRUE(swc->acquire(kMaxPermits / 2).acquired);
    const Outcome o = swc->acquire(1);
    ASSERT_FALSE(o.acquired);
    ASSERT_GE(o.retry_after, 0);
    clock->advance(o.retry_after - 1);
    EXPECT_FALSE(swc->acquire(1).acquired);
    clock->advance(1);
    EXPECT_TRUE(swc->acquire(1).acquired);
}

TEST(SlidingWindowCounter, CloseFailsWaitersAndLaterCallsThrow) {
    auto clock = make_clock();
    auto swc = make_counter(clock, 1, 10 * kSec, 2);
    const Outcome held = swc->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto q = swc->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    swc->close();
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_EQ(q.waiter->outcome().reason, Reason::Closed);
    EXPECT_THROW(swc->acquire(1), ClosedError);
    EXPECT_THROW(swc->enqueue(1, -1), ClosedError);
    EXPECT_THROW(swc->statistics(), ClosedError);
    EXPECT_THROW(swc->available_permits(), ClosedError);
    EXPECT_NO_THROW(swc->give_back(1, held.tag));
    clock->advance(30 * kSec);
}
