// Token bucket (docs/design.md: Token bucket, Replenishment, Retry-after).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include "permits/clock.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<TokenBucket> make_bucket(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                         std::int64_t per_period, Nanos period, std::int64_t queue_limit = 0,
                                         QueueOrder order = QueueOrder::OldestFirst, bool manual = false) {
    return std::make_shared<TokenBucket>(clock, limit, per_period, period, QueueOptions{queue_limit, order}, manual);
}

} // namespace

TEST(TokenBucket, InvalidConstructionArgumentsThrow) {
    auto clock = make_clock();
    const QueueOptions q{};
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 0, 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, -1, 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, kMaxPermits + 1, 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, 0, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, -1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, kMaxPermits + 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, 1, 0, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, 1, -kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, 1, std::numeric_limits<Nanos>::min(), q, false),
                 std::invalid_argument);
    EXPECT_THROW(std::make_shared<TokenBucket>(clock, 1, 1, kSec, QueueOptions{-1, QueueOrder::OldestFirst}, false),
                 std::invalid_argument);
    EXPECT_THROW(
        std::make_shared<TokenBucket>(clock, 1, 1, kSec, QueueOptions{kMaxPermits + 1, QueueOrder::OldestFirst}, false),
        std::invalid_argument);
    // The extremes are accepted.
    EXPECT_NO_THROW(std::make_shared<TokenBucket>(clock, kMaxPermits, kMaxPermits, 1,
                                                  QueueOptions{kMaxPermits, QueueOrder::NewestFirst}, true));
}

TEST(TokenBucket, PropertiesReflectOptions) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 7, 3, 20 * kSec, 5, QueueOrder::NewestFirst, true);
    EXPECT_EQ(tb->token_limit(), 7);
    EXPECT_EQ(tb->tokens_per_period(), 3);
    EXPECT_EQ(tb->period(), 20 * kSec);
    EXPECT_EQ(tb->max_permits(), 7);
    EXPECT_EQ(tb->queue_options().queue_limit, 5);
    EXPECT_EQ(tb->queue_options().order, QueueOrder::NewestFirst);
    EXPECT_TRUE(tb->manual());
    EXPECT_FALSE(tb->releases_permits());
    EXPECT_FALSE(tb->closed());
    EXPECT_EQ(tb->clock(), clock);
}

TEST(TokenBucket, BadPermitCountsThrow) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, kSec, 5);
    EXPECT_THROW(tb->acquire(3), std::invalid_argument);
    EXPECT_THROW(tb->acquire(-1), std::invalid_argument);
    EXPECT_THROW(tb->enqueue(3, -1), std::invalid_argument);
    EXPECT_THROW(tb->enqueue(-1, -1), std::invalid_argument);
    // Argument errors are not counted and consume nothing.
    const Statistics s = tb->statistics();
    EXPECT_EQ(s.current_available_permits, 2);
    EXPECT_EQ(s.total_failed_leases, 0);
    EXPECT_EQ(s.total_successful_leases, 0);
}

TEST(TokenBucket, StartsFullAndReplenishesOneTokenPerPeriod) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec);
    EXPECT_EQ(tb->available_permits(), 1);

    const Outcome ok = tb->acquire(1);
    EXPECT_TRUE(ok.acquired);
    EXPECT_EQ(ok.reason, Reason::None);
    EXPECT_EQ(ok.retry_after, -1);
    EXPECT_EQ(ok.permits, 1);
    EXPECT_EQ(ok.tag, 0);

    const Outcome fail = tb->acquire(1);
    EXPECT_FALSE(fail.acquired);
    EXPECT_EQ(fail.reason, Reason::LimitReached);
    EXPECT_EQ(fail.retry_after, 20 * kSec);
    EXPECT_EQ(fail.permits, 1);

    clock->advance(20 * kSec - 1);
    EXPECT_EQ(tb->available_permits(), 0);
    EXPECT_FALSE(tb->acquire(1).acquired);
    clock->advance(1);
    EXPECT_EQ(tb->available_permits(), 1);
    const Outcome again = tb->acquire(1);
    EXPECT_TRUE(again.acquired);
    EXPECT_EQ(again.tag, 20 * kSec); // the period index it was taken in
}

TEST(TokenBucket, RetryAfterIsExactAndCountsElapsedTime) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec);
    ASSERT_TRUE(tb->acquire(2).acquired);

    Outcome o = tb->acquire(2);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 40 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 20 * kSec);

    clock->advance(5 * kSec);
    EXPECT_EQ(tb->acquire(2).retry_after, 35 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 15 * kSec);

    clock->advance(15 * kSec); // t = 20 s: one token
    o = tb->acquire(2);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 20 * kSec);
    clock->advance(19 * kSec);
    EXPECT_EQ(tb->acquire(2).retry_after, 1 * kSec);
    clock->advance(1 * kSec);
    EXPECT_TRUE(tb->acquire(2).acquired);
}

TEST(TokenBucket, RetryAfterCountsPermitsQueuedAheadUnderOldestFirst) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 5, QueueOrder::OldestFirst);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(tb->acquire(2).retry_after, 60 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 40 * kSec);
    clock->advance(5 * kSec);
    EXPECT_EQ(tb->acquire(2).retry_after, 55 * kSec);
}

TEST(TokenBucket, RetryAfterIgnoresQueueUnderNewestFirst) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 5, QueueOrder::NewestFirst);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(tb->acquire(2).retry_after, 40 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 20 * kSec);
}

TEST(TokenBucket, RetryAfterWithSeveralTokensPerPeriodRoundsUpPeriods) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 2, 20 * kSec, 5);
    ASSERT_TRUE(tb->acquire(2).acquired);
    EXPECT_EQ(tb->acquire(2).retry_after, 20 * kSec);
    ASSERT_TRUE(tb->enqueue(1, -1).waiter);
    // 3 tokens needed at 2 per period: 2 periods (the queued request takes one at 20 s).
    EXPECT_EQ(tb->acquire(2).retry_after, 40 * kSec);
}

TEST(TokenBucket, RetryAfterWithLargeTokensPerPeriodIsOnePeriod) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 100, 20 * kSec);
    ASSERT_TRUE(tb->acquire(2).acquired);
    EXPECT_EQ(tb->acquire(2).retry_after, 20 * kSec);
}

TEST(TokenBucket, RetryAfterCountsAvailableTokens) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 3, 1, 20 * kSec);
    ASSERT_TRUE(tb->acquire(2).acquired);
    const Outcome o = tb->acquire(3);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 40 * kSec);
}

TEST(TokenBucket, RetryAfterOneMillisecondPeriodWithQueuedItem) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, kMs, 1);
    ASSERT_TRUE(tb->acquire(1).acquired);
    ASSERT_TRUE(tb->enqueue(1, -1).waiter);
    EXPECT_EQ(tb->acquire(1).retry_after, 2 * kMs);
}

TEST(TokenBucket, ZeroPermitProbe) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec);
    Outcome o = tb->acquire(0);
    EXPECT_TRUE(o.acquired);
    EXPECT_EQ(o.permits, 0);
    EXPECT_EQ(tb->available_permits(), 1); // nothing consumed

    ASSERT_TRUE(tb->acquire(1).acquired);
    o = tb->acquire(0);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 20 * kSec); // a zero-permit failure counts as one permit
    clock->advance(5 * kSec);
    EXPECT_EQ(tb->acquire(0).retry_after, 15 * kSec);

    const Statistics s = tb->statistics();
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 2);
}

TEST(TokenBucket, QueueFullRejectionCarriesRetryAfter) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 1);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto first = tb->enqueue(1, -1);
    ASSERT_TRUE(first.waiter);
    auto second = tb->enqueue(1, -1);
    EXPECT_FALSE(second.waiter);
    EXPECT_FALSE(second.outcome.acquired);
    EXPECT_EQ(second.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(second.outcome.retry_after, 40 * kSec); // its token comes after the queued one's
    EXPECT_EQ(tb->statistics().total_failed_leases, 1);
}

TEST(TokenBucket, ReplenishHonorsTokensPerPeriodAndCapsAtLimit) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 10, 3, kSec);
    ASSERT_TRUE(tb->acquire(10).acquired);
    EXPECT_EQ(tb->available_permits(), 0);
    clock->advance(kSec);
    EXPECT_EQ(tb->available_permits(), 3);
    clock->advance(kSec);
    EXPECT_EQ(tb->available_permits(), 6);
    clock->advance(kSec);
    EXPECT_EQ(tb->available_permits(), 9);
    clock->advance(kSec);
    EXPECT_EQ(tb->available_permits(), 10);
    clock->advance(1'000'000 * kSec); // a long gap: capped, nothing lost or duplicated
    EXPECT_EQ(tb->available_permits(), 10);
}

TEST(TokenBucket, PeriodsAreAnchoredAtConstruction) {
    auto clock = make_clock();
    clock->advance(7 * kSec);
    auto tb = make_bucket(clock, 1, 1, 20 * kSec);
    ASSERT_TRUE(tb->acquire(1).acquired);
    EXPECT_EQ(tb->acquire(1).retry_after, 20 * kSec);
    clock->advance(20 * kSec - 1); // t = 27 s - 1 ns
    EXPECT_EQ(tb->available_permits(), 0);
    EXPECT_EQ(tb->acquire(1).retry_after, 1);
    clock->advance(1);
    EXPECT_EQ(tb->available_permits(), 1);
}

TEST(TokenBucket, NoDoubleBurstAfterIdlePeriod) {
    // .NET's stale-timestamp trap: draining a bucket that was full for a long time must not
    // credit the time it spent full.
    auto clock = make_clock();
    auto tb = make_bucket(clock, 10, 1, kSec);
    clock->advance(100 * kSec + 500 * kMs);
    ASSERT_TRUE(tb->acquire(10).acquired);
    const Outcome o = tb->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 500 * kMs);
    clock->advance(400 * kMs);
    EXPECT_EQ(tb->available_permits(), 0);
    clock->advance(100 * kMs);
    EXPECT_EQ(tb->available_permits(), 1);
}

TEST(TokenBucket, SubMillisecondPeriodsWork) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 5, 1, 1000);
    ASSERT_TRUE(tb->acquire(5).acquired);
    clock->advance(2500);
    EXPECT_EQ(tb->available_permits(), 2);
    EXPECT_EQ(tb->acquire(3).retry_after, 500);
    clock->advance(500);
    EXPECT_EQ(tb->available_permits(), 3);
    EXPECT_TRUE(tb->acquire(3).acquired);
}

TEST(TokenBucket, GiveBackReturnsTokensCappedAtLimit) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec);
    const Outcome o = tb->acquire(2);
    ASSERT_TRUE(o.acquired);
    tb->give_back(1, o.tag);
    EXPECT_EQ(tb->available_permits(), 1);
    tb->give_back(5, o.tag);
    EXPECT_EQ(tb->available_permits(), 2); // never above the limit
    tb->give_back(0, o.tag);
    tb->give_back(-3, o.tag);
    EXPECT_EQ(tb->available_permits(), 2);
}

TEST(TokenBucket, ALateRefundGivesBackOnlyWhatTheRefillsSinceCouldNotHaveBrought) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 3, 1, 20 * kSec);
    const Outcome o = tb->acquire(3);
    ASSERT_TRUE(o.acquired);
    clock->advance(25 * kSec); // one token came (at 20 s) and is taken
    ASSERT_TRUE(tb->acquire(1).acquired);
    tb->give_back(3, o.tag); // 3 taken, 1 would have come anyway: 2 go back
    EXPECT_EQ(tb->available_permits(), 2);
    // The replenishment schedule is unchanged: next token at 40 s.
    EXPECT_EQ(tb->acquire(3).retry_after, 15 * kSec);
    clock->advance(15 * kSec);
    EXPECT_EQ(tb->available_permits(), 3);
}

TEST(TokenBucket, ARefundAfterTheBucketWouldHaveRefilledGivesNothingBack) {
    // chain(bucket, slow) takes 3 at t=0, the slow member refuses at t=10 periods: meanwhile the
    // bucket refilled and 3 more were taken. The refund must not let 6 pass at one instant.
    auto clock = make_clock();
    auto tb = make_bucket(clock, 3, 3, 1 * kSec);
    const Outcome first = tb->acquire(3);
    ASSERT_TRUE(first.acquired);
    clock->advance(10 * kSec);
    ASSERT_TRUE(tb->acquire(3).acquired);
    tb->give_back(3, first.tag);
    EXPECT_EQ(tb->available_permits(), 0);
    EXPECT_FALSE(tb->acquire(1).acquired);
}

TEST(TokenBucket, ARefundInTheGrantsOwnPeriodGivesEverythingBack) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 3, 1, 20 * kSec);
    clock->advance(5 * kSec);
    const Outcome o = tb->acquire(3);
    clock->advance(14 * kSec); // still the grant's period
    tb->give_back(3, o.tag);
    EXPECT_EQ(tb->available_permits(), 3);
}

TEST(TokenBucket, GiveBackServesQueuedRequests) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 1);
    const Outcome o = tb->acquire(1);
    ASSERT_TRUE(o.acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    tb->give_back(1, o.tag);
    EXPECT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(tb->available_permits(), 0);
}

TEST(TokenBucket, QueuedRequestIsGrantedWhenItsTokenArrives) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 1);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(tb->statistics().current_queued_count, 1);
    EXPECT_GE(clock->pending(), 1u); // a timer asks for the next period

    clock->advance(20 * kSec - 1);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(1);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    const Outcome& o = q.waiter->outcome();
    EXPECT_TRUE(o.acquired);
    EXPECT_EQ(o.reason, Reason::None);
    EXPECT_EQ(o.permits, 1);
    EXPECT_EQ(o.tag, 20 * kSec); // the start of window (period, segment) 1

    const Statistics s = tb->statistics();
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 0);
}

TEST(TokenBucket, OneReplenishmentServesSeveralWaiters) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 2, 20 * kSec, 4);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto a = tb->enqueue(1, -1);
    auto b = tb->enqueue(1, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    clock->advance(20 * kSec);
    EXPECT_EQ(a.waiter->state(), Waiter::Completed);
    EXPECT_EQ(b.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_TRUE(b.waiter->outcome().acquired);
    EXPECT_EQ(tb->statistics().current_queued_count, 0);
}

TEST(TokenBucket, QueuedRequestsNeedingSeveralPeriodsWaitForAllOfThem) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 3, 1, 10 * kSec, 3);
    ASSERT_TRUE(tb->acquire(3).acquired);
    auto q = tb->enqueue(3, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(10 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(10 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(10 * kSec);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 30 * kSec); // the start of window (period, segment) 3
}

TEST(TokenBucket, StatisticsCountLikeDotnet) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 1);
    EXPECT_TRUE(tb->acquire(1).acquired);
    EXPECT_FALSE(tb->acquire(2).acquired);
    EXPECT_TRUE(tb->acquire(0).acquired);
    Statistics s = tb->statistics();
    EXPECT_EQ(s.current_available_permits, 1);
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 1);

    auto q = tb->enqueue(1, -1); // granted at once
    EXPECT_FALSE(q.waiter);
    EXPECT_TRUE(q.outcome.acquired);
    s = tb->statistics();
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
}

TEST(TokenBucket, IdleDuration) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 2);
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(0)); // idle at construction
    clock->advance(3 * kSec);
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(3 * kSec));
    EXPECT_TRUE(tb->acquire(0).acquired); // a zero-permit acquisition does not change idleness
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(3 * kSec));

    ASSERT_TRUE(tb->acquire(1).acquired);
    EXPECT_EQ(tb->idle_duration(), std::nullopt);
    clock->advance(17 * kSec - 1);
    EXPECT_EQ(tb->idle_duration(), std::nullopt);
    clock->advance(1); // t = 20 s: full again
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(0));
    clock->advance(5 * kSec);
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(5 * kSec));
}

TEST(TokenBucket, IdleDurationIsNullWhileRequestsWait) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(20 * kSec); // the waiter takes the new token
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_EQ(tb->idle_duration(), std::nullopt);
    clock->advance(20 * kSec);
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(0));
}

TEST(TokenBucket, TryReplenishInAutoModeReturnsFalse) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec);
    ASSERT_TRUE(tb->acquire(2).acquired);
    EXPECT_FALSE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 0);
}

TEST(TokenBucket, ManualModeReplenishesOnlyInTryReplenish) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(tb->acquire(2).acquired);
    clock->advance(40 * kSec);
    EXPECT_EQ(tb->available_permits(), 0);
    EXPECT_FALSE(tb->acquire(1).acquired);
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 2);
    const Outcome o = tb->acquire(1);
    EXPECT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 40 * kSec); // the start of window (period, segment) 2
}

TEST(TokenBucket, ManualModeKeepsPartialPeriods) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 10, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(tb->acquire(10).acquired);
    clock->advance(20 * kSec - kMs);
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 0);
    clock->advance(20 * kSec + kMs); // t = 40 s
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 2);
}

TEST(TokenBucket, ManualModeTryReplenishOnFullBucketIsANoop) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    clock->advance(100 * kSec);
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 2);
    // Full since construction: the anchor moved on by whole periods, no credit banked.
    ASSERT_TRUE(tb->acquire(2).acquired);
    EXPECT_EQ(tb->available_permits(), 0);
    clock->advance(kSec);
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->available_permits(), 0);
}

TEST(TokenBucket, ManualModeRetryAfterIsMeasuredFromTheClock) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(tb->acquire(2).acquired);
    clock->advance(5 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 15 * kSec);
    EXPECT_EQ(tb->acquire(2).retry_after, 35 * kSec);
    clock->advance(30 * kSec); // t = 35 s; state still as of t = 0
    EXPECT_EQ(tb->acquire(2).retry_after, 5 * kSec);
    EXPECT_EQ(tb->acquire(1).retry_after, 0);
}

TEST(TokenBucket, ManualModeServesQueueOnlyInTryReplenish) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 1, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(60 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    EXPECT_TRUE(tb->try_replenish());
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 60 * kSec); // the start of window (period, segment) 3
    EXPECT_EQ(tb->available_permits(), 0);
}

TEST(TokenBucket, ManualModeIdleDuration) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(tb->acquire(1).acquired);
    clock->advance(30 * kSec);
    EXPECT_EQ(tb->idle_duration(), std::nullopt); // the state has not been replenished yet
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_EQ(tb->idle_duration(), std::optional<Nanos>(10 * kSec)); // full since t = 20 s
}

TEST(TokenBucket, CloseFailsWaitersAndLaterCallsThrow) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 2);
    const Outcome held = tb->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    tb->close();
    EXPECT_TRUE(tb->closed());
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_FALSE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().reason, Reason::Closed);
    EXPECT_EQ(q.waiter->outcome().retry_after, -1);

    EXPECT_THROW(tb->acquire(1), ClosedError);
    EXPECT_THROW(tb->acquire(0), ClosedError);
    EXPECT_THROW(tb->enqueue(1, -1), ClosedError);
    EXPECT_THROW(tb->statistics(), ClosedError);
    EXPECT_THROW(tb->available_permits(), ClosedError);
    EXPECT_THROW(tb->acquire(2), std::invalid_argument); // a bad count wins over closed
    EXPECT_THROW(tb->acquire(-1), std::invalid_argument);
    EXPECT_THROW(tb->try_replenish(), ClosedError); // auto mode too: every call after close raises
    EXPECT_NO_THROW(tb->give_back(1, held.tag));
    EXPECT_NO_THROW(tb->close()); // idempotent
    clock->advance(100 * kSec);   // stale timers are harmless
}

TEST(TokenBucket, ManualModeTryReplenishAfterCloseThrows) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 0, QueueOrder::OldestFirst, true);
    tb->close();
    EXPECT_THROW(tb->try_replenish(), ClosedError);
}

TEST(TokenBucket, LargeValuesDoNotOverflow) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, kMaxPermits, kMaxPermits, std::numeric_limits<Nanos>::max() / 2, kMaxPermits);
    ASSERT_TRUE(tb->acquire(kMaxPermits).acquired);
    const Outcome o = tb->acquire(kMaxPermits);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, std::numeric_limits<Nanos>::max() / 2);
    auto q = tb->enqueue(kMaxPermits, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(tb->statistics().current_queued_count, kMaxPermits);
    // Two periods away: the end of time, never negative.
    const Outcome far = tb->acquire(1);
    EXPECT_FALSE(far.acquired);
    EXPECT_GE(far.retry_after, std::numeric_limits<Nanos>::max() / 2);
    const auto q2 = tb->enqueue(1, -1);
    EXPECT_EQ(q2.outcome.reason, Reason::QueueFull);
}

TEST(TokenBucket, RetryAfterIsExactForSingleRequests) {
    // Property: with nothing queued, a failed request is refused 1 ns before its retry_after
    // and granted at it.
    std::mt19937_64 rng(777);
    for (int trial = 0; trial < 200; ++trial) {
        auto clock = make_clock();
        const std::int64_t limit = 1 + static_cast<std::int64_t>(rng() % 20);
        const std::int64_t per_period = 1 + static_cast<std::int64_t>(rng() % 5);
        const Nanos period = 1 + static_cast<Nanos>(rng() % kSec);
        auto tb = make_bucket(clock, limit, per_period, period);
        for (int step = 0; step < 30; ++step) {
            clock->advance(static_cast<Nanos>(rng() % static_cast<std::uint64_t>(2 * period)));
            const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(limit));
            const Outcome o = tb->acquire(n);
            if (o.acquired) {
                continue;
            }
            ASSERT_GT(o.retry_after, 0);
            clock->advance(o.retry_after - 1);
            ASSERT_FALSE(tb->acquire(n).acquired) << "trial " << trial;
            clock->advance(1);
            ASSERT_TRUE(tb->acquire(n).acquired) << "trial " << trial;
        }
    }
}

TEST(TokenBucket, NoTimerWhileNothingWaits) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(tb->acquire(1).acquired);
    }
    EXPECT_EQ(clock->pending(), 0u); // time is computed: failures need no timer
    auto q = tb->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(clock->pending(), 1u); // one timer, for the waiter's token
    auto r = tb->enqueue(1, -1);
    ASSERT_TRUE(r.waiter);
    EXPECT_EQ(clock->pending(), 1u); // the timer already set covers the next request too
}

TEST(TokenBucket, LateTimerCatchesUpWithoutLosingTokensToTheCap) {
    // One advance over three periods: each waiter is served when its token came, as a
    // punctual timer would have, although the bucket holds one token at most.
    auto clock = make_clock();
    auto tb = make_bucket(clock, 1, 1, 20 * kSec, 3);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, -1);
    auto b = tb->enqueue(1, -1);
    auto c = tb->enqueue(1, -1);
    clock->advance(60 * kSec);
    for (const auto* w : {&a, &b, &c}) {
        ASSERT_EQ(w->waiter->state(), Waiter::Completed);
        EXPECT_TRUE(w->waiter->outcome().acquired);
    }
    EXPECT_EQ(a.waiter->outcome().tag, 20 * kSec); // the start of window (period, segment) 1
    EXPECT_EQ(b.waiter->outcome().tag, 40 * kSec); // the start of window (period, segment) 2
    EXPECT_EQ(c.waiter->outcome().tag, 60 * kSec); // the start of window (period, segment) 3
    EXPECT_EQ(tb->available_permits(), 0);
    EXPECT_EQ(tb->acquire(1).retry_after, 20 * kSec);
}

TEST(TokenBucket, LateTimerHonoursDeadlinesInBetween) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, 1, 20 * kSec, 3);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto a = tb->enqueue(1, -1);        // its token comes at 20 s
    auto b = tb->enqueue(1, 30 * kSec); // its token would come at 40 s: too late
    clock->advance(60 * kSec);
    ASSERT_EQ(a.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_EQ(a.waiter->outcome().tag, 20 * kSec); // the start of window (period, segment) 1
    ASSERT_EQ(b.waiter->state(), Waiter::Completed);
    EXPECT_FALSE(b.waiter->outcome().acquired);
    EXPECT_EQ(b.waiter->outcome().reason, Reason::Timeout);
    EXPECT_EQ(tb->available_permits(), 2);
}
