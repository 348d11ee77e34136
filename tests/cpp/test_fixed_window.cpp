// Fixed window (docs/design.md: Fixed window, Replenishment, Retry-after).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include "permits/clock.hpp"
#include "permits/fixed_window.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<FixedWindow> make_window(const std::shared_ptr<ManualClock>& clock, std::int64_t limit, Nanos window,
                                         std::int64_t queue_limit = 0, QueueOrder order = QueueOrder::OldestFirst,
                                         bool manual = false) {
    return std::make_shared<FixedWindow>(clock, limit, window, QueueOptions{queue_limit, order}, manual);
}

} // namespace

TEST(FixedWindow, InvalidConstructionArgumentsThrow) {
    auto clock = make_clock();
    const QueueOptions q{};
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, 0, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, -1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, kMaxPermits + 1, kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, 1, 0, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, 1, -kSec, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, 1, std::numeric_limits<Nanos>::min(), q, false),
                 std::invalid_argument);
    EXPECT_THROW(std::make_shared<FixedWindow>(clock, 1, kSec, QueueOptions{-1, QueueOrder::OldestFirst}, false),
                 std::invalid_argument);
    EXPECT_THROW(
        std::make_shared<FixedWindow>(clock, 1, kSec, QueueOptions{kMaxPermits + 1, QueueOrder::OldestFirst}, false),
        std::invalid_argument);
    EXPECT_NO_THROW(
        std::make_shared<FixedWindow>(clock, kMaxPermits, 1, QueueOptions{kMaxPermits, QueueOrder::NewestFirst}, true));
}

TEST(FixedWindow, PropertiesReflectOptions) {
    auto clock = make_clock();
    auto fw = make_window(clock, 4, 20 * kSec, 3, QueueOrder::NewestFirst, true);
    EXPECT_EQ(fw->permit_limit(), 4);
    EXPECT_EQ(fw->window(), 20 * kSec);
    EXPECT_EQ(fw->max_permits(), 4);
    EXPECT_EQ(fw->queue_options().queue_limit, 3);
    EXPECT_EQ(fw->queue_options().order, QueueOrder::NewestFirst);
    EXPECT_TRUE(fw->manual());
    EXPECT_FALSE(fw->releases_permits());
}

TEST(FixedWindow, BadPermitCountsThrow) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, kSec, 4);
    EXPECT_THROW(fw->acquire(3), std::invalid_argument);
    EXPECT_THROW(fw->acquire(-1), std::invalid_argument);
    EXPECT_THROW(fw->enqueue(3, -1), std::invalid_argument);
    EXPECT_THROW(fw->enqueue(-1, -1), std::invalid_argument);
    EXPECT_EQ(fw->statistics().total_failed_leases, 0);
}

TEST(FixedWindow, CountResetsAtEachBoundary) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec);
    Outcome o = fw->acquire(2);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 0);
    EXPECT_EQ(fw->available_permits(), 0);

    clock->advance(20 * kSec - kMs);
    o = fw->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, kMs);

    clock->advance(kMs);
    EXPECT_EQ(fw->available_permits(), 2);
    o = fw->acquire(1);
    EXPECT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 20 * kSec); // the start of window (period, segment) 1
    EXPECT_EQ(fw->available_permits(), 1);
}

TEST(FixedWindow, ResetsHoweverLateTheNextRequestComes) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec);
    ASSERT_TRUE(fw->acquire(2).acquired);
    clock->advance(65 * kSec); // window 3 (60..80 s)
    EXPECT_EQ(fw->available_permits(), 2);
    const Outcome o = fw->acquire(2);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 60 * kSec); // the start of window (period, segment) 3
    // Windows stay anchored at construction: the next boundary is 80 s, not 85 s.
    EXPECT_EQ(fw->acquire(1).retry_after, 15 * kSec);
}

TEST(FixedWindow, WindowsAreAnchoredAtConstruction) {
    auto clock = make_clock();
    clock->advance(3 * kSec);
    auto fw = make_window(clock, 1, 10 * kSec);
    ASSERT_TRUE(fw->acquire(1).acquired);
    EXPECT_EQ(fw->acquire(1).retry_after, 10 * kSec);
    clock->advance(10 * kSec - 1); // t = 13 s - 1 ns
    EXPECT_EQ(fw->available_permits(), 0);
    clock->advance(1);
    EXPECT_EQ(fw->available_permits(), 1);
}

TEST(FixedWindow, RetryAfterIsTimeToTheBoundary) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec);
    ASSERT_TRUE(fw->acquire(2).acquired);
    EXPECT_EQ(fw->acquire(2).retry_after, 20 * kSec);
    EXPECT_EQ(fw->acquire(1).retry_after, 20 * kSec);
    clock->advance(5 * kSec);
    EXPECT_EQ(fw->acquire(2).retry_after, 15 * kSec);
    EXPECT_EQ(fw->acquire(0).retry_after, 15 * kSec); // a zero-permit failure counts as one permit
}

TEST(FixedWindow, RetryAfterCountsAvailablePermits) {
    auto clock = make_clock();
    auto fw = make_window(clock, 3, 20 * kSec);
    ASSERT_TRUE(fw->acquire(2).acquired);
    const Outcome o = fw->acquire(3);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 20 * kSec);
}

TEST(FixedWindow, RetryAfterCountsPermitsQueuedAheadUnderOldestFirst) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec, 4);
    ASSERT_TRUE(fw->acquire(2).acquired);
    ASSERT_TRUE(fw->enqueue(1, -1).waiter);
    // The queued permit takes one of the next window's two: 2 more need the window after.
    EXPECT_EQ(fw->acquire(2).retry_after, 40 * kSec);
    EXPECT_EQ(fw->acquire(1).retry_after, 20 * kSec);
    clock->advance(5 * kSec);
    EXPECT_EQ(fw->acquire(2).retry_after, 35 * kSec);
}

TEST(FixedWindow, RetryAfterOneMillisecondWindowWithQueuedItem) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, kMs, 1);
    ASSERT_TRUE(fw->acquire(1).acquired);
    ASSERT_TRUE(fw->enqueue(1, -1).waiter);
    EXPECT_EQ(fw->acquire(1).retry_after, 2 * kMs);
}

TEST(FixedWindow, RetryAfterIgnoresQueueUnderNewestFirst) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec, 4, QueueOrder::NewestFirst);
    ASSERT_TRUE(fw->acquire(2).acquired);
    ASSERT_TRUE(fw->enqueue(1, -1).waiter);
    EXPECT_EQ(fw->acquire(2).retry_after, 20 * kSec);
}

TEST(FixedWindow, QueueFullRejectionCarriesRetryAfter) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 20 * kSec, 1);
    ASSERT_TRUE(fw->acquire(1).acquired);
    ASSERT_TRUE(fw->enqueue(1, -1).waiter);
    clock->advance(5 * kSec);
    const auto r = fw->enqueue(1, -1);
    EXPECT_FALSE(r.waiter);
    EXPECT_EQ(r.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(r.outcome.retry_after, 35 * kSec);
}

TEST(FixedWindow, GiveBackRefundsOnlyTheCurrentWindow) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec);
    const Outcome first = fw->acquire(2);
    ASSERT_TRUE(first.acquired);
    clock->advance(5 * kSec);
    fw->give_back(1, first.tag);
    EXPECT_EQ(fw->available_permits(), 1);
    fw->give_back(5, first.tag); // never below zero used
    EXPECT_EQ(fw->available_permits(), 2);

    ASSERT_TRUE(fw->acquire(2).acquired);
    clock->advance(20 * kSec); // t = 25 s, window 1
    const Outcome second = fw->acquire(2);
    ASSERT_TRUE(second.acquired);
    EXPECT_EQ(second.tag, 20 * kSec); // the start of window (period, segment) 1
    fw->give_back(1, first.tag);      // window 0 is gone
    EXPECT_EQ(fw->available_permits(), 0);
    fw->give_back(1, second.tag);
    EXPECT_EQ(fw->available_permits(), 1);

    ASSERT_TRUE(fw->acquire(1).acquired);
    clock->advance(20 * kSec); // t = 45 s, window 2
    const Outcome third = fw->acquire(2);
    ASSERT_TRUE(third.acquired);
    fw->give_back(2, second.tag); // window 1 is gone
    EXPECT_EQ(fw->available_permits(), 0);
}

TEST(FixedWindow, GiveBackServesQueuedRequests) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec, 2);
    const Outcome o = fw->acquire(2);
    ASSERT_TRUE(o.acquired);
    auto q = fw->enqueue(2, -1);
    ASSERT_TRUE(q.waiter);
    fw->give_back(2, o.tag);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 0);
    EXPECT_EQ(fw->available_permits(), 0);
}

TEST(FixedWindow, QueuedRequestsAreServedAtBoundaries) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 20 * kSec, 2);
    ASSERT_TRUE(fw->acquire(1).acquired);
    auto a = fw->enqueue(1, -1);
    auto b = fw->enqueue(1, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    EXPECT_EQ(fw->statistics().current_queued_count, 2);

    clock->advance(20 * kSec - 1);
    EXPECT_EQ(a.waiter->state(), Waiter::Pending);
    clock->advance(1);
    ASSERT_EQ(a.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_EQ(a.waiter->outcome().tag, 20 * kSec); // the start of window (period, segment) 1
    EXPECT_EQ(b.waiter->state(), Waiter::Pending);

    clock->advance(20 * kSec);
    ASSERT_EQ(b.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(b.waiter->outcome().acquired);
    EXPECT_EQ(b.waiter->outcome().tag, 40 * kSec); // the start of window (period, segment) 2

    const Statistics s = fw->statistics();
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
    EXPECT_EQ(s.total_failed_leases, 0);
}

TEST(FixedWindow, OneBoundaryServesSeveralWaiters) {
    auto clock = make_clock();
    auto fw = make_window(clock, 3, 20 * kSec, 3);
    ASSERT_TRUE(fw->acquire(3).acquired);
    auto a = fw->enqueue(1, -1);
    auto b = fw->enqueue(2, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    clock->advance(20 * kSec);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_TRUE(b.waiter->outcome().acquired);
    EXPECT_EQ(fw->available_permits(), 0);
}

TEST(FixedWindow, ZeroPermitProbe) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 20 * kSec);
    EXPECT_TRUE(fw->acquire(0).acquired);
    EXPECT_EQ(fw->available_permits(), 1);
    ASSERT_TRUE(fw->acquire(1).acquired);
    const Outcome o = fw->acquire(0);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 20 * kSec);
    const Statistics s = fw->statistics();
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 1);
}

TEST(FixedWindow, IdleDuration) {
    auto clock = make_clock();
    auto fw = make_window(clock, 2, 20 * kSec);
    EXPECT_EQ(fw->idle_duration(), std::optional<Nanos>(0));
    clock->advance(5 * kSec);
    EXPECT_EQ(fw->idle_duration(), std::optional<Nanos>(5 * kSec));
    EXPECT_TRUE(fw->acquire(0).acquired);
    EXPECT_EQ(fw->idle_duration(), std::optional<Nanos>(5 * kSec));
    ASSERT_TRUE(fw->acquire(1).acquired);
    EXPECT_EQ(fw->idle_duration(), std::nullopt);
    clock->advance(15 * kSec - 1);
    EXPECT_EQ(fw->idle_duration(), std::nullopt);
    clock->advance(1); // t = 20 s: the window that held the permit is over
    EXPECT_EQ(fw->idle_duration(), std::optional<Nanos>(0));
    clock->advance(7 * kSec);
    EXPECT_EQ(fw->idle_duration(), std::optional<Nanos>(7 * kSec));
}

TEST(FixedWindow, TryReplenishInAutoModeReturnsFalse) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 20 * kSec);
    ASSERT_TRUE(fw->acquire(1).acquired);
    EXPECT_FALSE(fw->try_replenish());
    EXPECT_EQ(fw->available_permits(), 0);
}

TEST(FixedWindow, ManualModeStaysAnchoredAtConstruction) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 10 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(fw->acquire(1).acquired);
    clock->advance(15 * kSec);
    EXPECT_EQ(fw->available_permits(), 0); // nothing until try_replenish
    EXPECT_FALSE(fw->acquire(1).acquired);
    EXPECT_TRUE(fw->try_replenish());
    EXPECT_EQ(fw->available_permits(), 1);
    const Outcome o = fw->acquire(1);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 10 * kSec); // the start of window (period, segment) 1
    // Not re-anchored at the replenish (15 s): the next window starts at 20 s.
    clock->advance(5 * kSec);
    EXPECT_TRUE(fw->try_replenish());
    EXPECT_EQ(fw->available_permits(), 1);
    EXPECT_TRUE(fw->acquire(1).acquired);
}

TEST(FixedWindow, ManualModeRetryAfterIsMeasuredFromTheClock) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 10 * kSec, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(fw->acquire(1).acquired);
    clock->advance(4 * kSec);
    EXPECT_EQ(fw->acquire(1).retry_after, 6 * kSec);
    clock->advance(10 * kSec); // state still as of t = 0: due already
    EXPECT_EQ(fw->acquire(1).retry_after, 0);
}

TEST(FixedWindow, ManualModeServesQueueOnlyInTryReplenish) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 10 * kSec, 1, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(fw->acquire(1).acquired);
    auto q = fw->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(30 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    EXPECT_TRUE(fw->try_replenish());
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 30 * kSec); // the start of window (period, segment) 3
}

TEST(FixedWindow, StatisticsCountLikeDotnet) {
    auto clock = make_clock();
    auto fw = make_window(clock, 3, 20 * kSec, 2);
    EXPECT_TRUE(fw->acquire(2).acquired);
    EXPECT_FALSE(fw->acquire(2).acquired);
    auto q = fw->enqueue(2, -1);
    ASSERT_TRUE(q.waiter);
    Statistics s = fw->statistics();
    EXPECT_EQ(s.current_available_permits, 1);
    EXPECT_EQ(s.current_queued_count, 2);
    EXPECT_EQ(s.total_successful_leases, 1);
    EXPECT_EQ(s.total_failed_leases, 1);
    EXPECT_FALSE(fw->enqueue(1, -1).waiter); // queue full
    EXPECT_FALSE(fw->acquire(1).acquired);   // no barging past the queue
    s = fw->statistics();
    EXPECT_EQ(s.total_failed_leases, 3);
    clock->advance(20 * kSec);
    s = fw->statistics();
    EXPECT_EQ(s.current_available_permits, 1);
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 3);
}

TEST(FixedWindow, CloseFailsWaitersAndLaterCallsThrow) {
    auto clock = make_clock();
    auto fw = make_window(clock, 1, 20 * kSec, 2);
    const Outcome held = fw->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto q = fw->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    fw->close();
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_EQ(q.waiter->outcome().reason, Reason::Closed);
    EXPECT_THROW(fw->acquire(1), ClosedError);
    EXPECT_THROW(fw->enqueue(1, -1), ClosedError);
    EXPECT_THROW(fw->statistics(), ClosedError);
    EXPECT_THROW(fw->available_permits(), ClosedError);
    EXPECT_NO_THROW(fw->give_back(1, held.tag));
    clock->advance(40 * kSec);
}

TEST(FixedWindow, RetryAfterIsExactForSingleRequests) {
    std::mt19937_64 rng(4242);
    for (int trial = 0; trial < 200; ++trial) {
        auto clock = make_clock();
        const std::int64_t limit = 1 + static_cast<std::int64_t>(rng() % 20);
        const Nanos window = 1 + static_cast<Nanos>(rng() % kSec);
        auto fw = make_window(clock, limit, window);
        for (int step = 0; step < 30; ++step) {
            clock->advance(static_cast<Nanos>(rng() % static_cast<std::uint64_t>(window)));
            const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(limit));
            const Outcome o = fw->acquire(n);
            if (o.acquired) {
                continue;
            }
            ASSERT_GT(o.retry_after, 0);
            clock->advance(o.retry_after - 1);
            ASSERT_FALSE(fw->acquire(n).acquired) << "trial " << trial;
            clock->advance(1);
            ASSERT_TRUE(fw->acquire(n).acquired) << "trial " << trial;
        }
    }
}

TEST(FixedWindow, RetryAfterIsExactWhenQueuedRequestsDoNotPackIntoWindows) {
    // Limit 3, two requests of 2 queued ahead: one is served per window (1 permit of each
    // window is left over, head-of-line blocking), so a request for 2 is granted in window 3.
    auto clock = make_clock();
    auto fw = make_window(clock, 3, 20 * kSec, 4);
    ASSERT_TRUE(fw->acquire(3).acquired);
    auto a = fw->enqueue(2, -1);
    auto b = fw->enqueue(2, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    EXPECT_EQ(fw->acquire(2).retry_after, 60 * kSec);
    // What actually happens, nothing else arriving:
    clock->advance(20 * kSec);
    EXPECT_EQ(a.waiter->state(), Waiter::Completed);
    EXPECT_EQ(b.waiter->state(), Waiter::Pending);
    clock->advance(20 * kSec);
    EXPECT_EQ(b.waiter->state(), Waiter::Completed);
    EXPECT_EQ(fw->available_permits(), 1);
}
