// Sliding window (docs/design.md: Sliding window, Replenishment, Retry-after).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include "permits/clock.hpp"
#include "permits/sliding_window.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<SlidingWindow> make_window(const std::shared_ptr<ManualClock>& clock, std::int64_t limit, Nanos window,
                                           std::int64_t segments, std::int64_t queue_limit = 0,
                                           QueueOrder order = QueueOrder::OldestFirst, bool manual = false) {
    return std::make_shared<SlidingWindow>(clock, limit, window, segments, QueueOptions{queue_limit, order}, manual);
}

} // namespace

TEST(SlidingWindow, InvalidConstructionArgumentsThrow) {
    auto clock = make_clock();
    const QueueOptions q{};
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 0, kSec, 2, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, -1, kSec, 2, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, kMaxPermits + 1, kSec, 2, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, kSec, 0, q, false), std::invalid_argument);
    // (segments below zero make the sliding log: test_sliding_log.cpp)
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, kSec, -65536, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, kSec, 65537, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, 0, 1, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, -kSec, 2, q, false), std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, std::numeric_limits<Nanos>::min(), 2, q, false),
                 std::invalid_argument);
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, 3, 4, q, false), std::invalid_argument); // < 1 ns segments
    EXPECT_THROW(std::make_shared<SlidingWindow>(clock, 1, kSec, 2, QueueOptions{-1, QueueOrder::OldestFirst}, false),
                 std::invalid_argument);
    EXPECT_NO_THROW(std::make_shared<SlidingWindow>(clock, kMaxPermits, 65536, 65536,
                                                    QueueOptions{kMaxPermits, QueueOrder::NewestFirst}, true));
    EXPECT_NO_THROW(std::make_shared<SlidingWindow>(clock, 1, 4, 4, q, false));
}

TEST(SlidingWindow, PropertiesAndSegmentLengthRoundedDown) {
    auto clock = make_clock();
    auto sw = make_window(clock, 5, 33 * kSec, 3, 2, QueueOrder::NewestFirst, true);
    EXPECT_EQ(sw->permit_limit(), 5);
    EXPECT_EQ(sw->window(), 33 * kSec);
    EXPECT_EQ(sw->segments(), 3);
    EXPECT_EQ(sw->segment_length(), 11 * kSec);
    EXPECT_EQ(sw->max_permits(), 5);
    EXPECT_TRUE(sw->manual());
    EXPECT_FALSE(sw->releases_permits());
    auto odd = make_window(clock, 1, 10, 3);
    EXPECT_EQ(odd->segment_length(), 3);
}

TEST(SlidingWindow, BadPermitCountsThrow) {
    auto clock = make_clock();
    auto sw = make_window(clock, 2, 8 * kSec, 4, 4);
    EXPECT_THROW(sw->acquire(3), std::invalid_argument);
    EXPECT_THROW(sw->acquire(-1), std::invalid_argument);
    EXPECT_THROW(sw->enqueue(3, -1), std::invalid_argument);
    EXPECT_THROW(sw->enqueue(-1, -1), std::invalid_argument);
}

TEST(SlidingWindow, PermitsComeBackWhenTheirSegmentLeavesTheWindow) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4); // 2 s segments
    clock->advance(1 * kSec);
    Outcome o = sw->acquire(4); // segment 0
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 0);
    clock->advance(7 * kSec - 1); // t = 8 s - 1 ns: still segment 3
    EXPECT_EQ(sw->available_permits(), 0);
    clock->advance(1); // segment 4 begins: segment 0 leaves the window
    EXPECT_EQ(sw->available_permits(), 4);
    o = sw->acquire(1);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.tag, 8 * kSec); // the start of window (period, segment) 4
}

TEST(SlidingWindow, SlidesOneSegmentAtATime) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4);
    for (int s = 0; s < 4; ++s) {
        ASSERT_TRUE(sw->acquire(1).acquired) << "segment " << s;
        clock->advance(2 * kSec);
    }
    // t = 8 s: segment 0 expired.
    EXPECT_EQ(sw->available_permits(), 1);
    clock->advance(2 * kSec);
    EXPECT_EQ(sw->available_permits(), 2);
    clock->advance(2 * kSec);
    EXPECT_EQ(sw->available_permits(), 3);
    clock->advance(2 * kSec);
    EXPECT_EQ(sw->available_permits(), 4);
}

TEST(SlidingWindow, LongGapFreesEverySegmentAtOnce) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4);
    for (int s = 0; s < 4; ++s) {
        ASSERT_TRUE(sw->acquire(1).acquired);
        clock->advance(2 * kSec);
    }
    clock->advance(100 * kSec);
    EXPECT_EQ(sw->available_permits(), 4);
    EXPECT_TRUE(sw->acquire(4).acquired);
}

TEST(SlidingWindow, SteadyTrafficAcrossManyWindowsWrapsTheRing) {
    auto clock = make_clock();
    auto sw = make_window(clock, 3, 3 * kSec, 3); // 1 s segments
    for (int t = 0; t < 50; ++t) {
        // Segments t-2 and t-1 hold one permit each (from t >= 2).
        const std::int64_t expected = t == 0 ? 3 : (t == 1 ? 2 : 1);
        ASSERT_EQ(sw->available_permits(), expected) << "t = " << t;
        const Outcome o = sw->acquire(1);
        ASSERT_TRUE(o.acquired) << "t = " << t;
        EXPECT_EQ(o.tag, t * kSec); // the start of segment t
        if (t >= 2) {
            const Outcome f = sw->acquire(1);
            ASSERT_FALSE(f.acquired) << "t = " << t;
            EXPECT_EQ(f.retry_after, 1 * kSec);
        }
        clock->advance(kSec);
    }
}

TEST(SlidingWindow, RetryAfterWithEverythingInTheCurrentSegmentIsTheWindow) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 20 * kSec, 4); // 5 s segments
    ASSERT_TRUE(sw->acquire(4).acquired);
    Outcome o = sw->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 20 * kSec);
    EXPECT_EQ(sw->acquire(4).retry_after, 20 * kSec);
    clock->advance(2 * kSec);
    EXPECT_EQ(sw->acquire(1).retry_after, 18 * kSec);
    EXPECT_EQ(sw->acquire(0).retry_after, 18 * kSec); // zero-permit failure: as one permit
}

TEST(SlidingWindow, RetryAfterWalksSegmentsUntilTheDeficitIsCovered) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4); // 2 s segments
    ASSERT_TRUE(sw->acquire(3).acquired);         // segment 0
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(1).acquired);            // segment 1
    EXPECT_EQ(sw->acquire(2).retry_after, 6 * kSec); // segment 0's 3 come back at 8 s
    EXPECT_EQ(sw->acquire(1).retry_after, 6 * kSec);
    EXPECT_EQ(sw->acquire(4).retry_after, 8 * kSec); // needs segment 1's permit too
    clock->advance(1 * kSec);
    EXPECT_EQ(sw->acquire(2).retry_after, 5 * kSec);
}

TEST(SlidingWindow, RetryAfterStopsAtTheFirstSegmentThatCoversTheDeficit) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4);
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 0: 1
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(3).acquired); // segment 1: 3
    EXPECT_EQ(sw->acquire(1).retry_after, 6 * kSec);
    EXPECT_EQ(sw->acquire(2).retry_after, 8 * kSec);
}

TEST(SlidingWindow, RetryAfterCountsPermitsQueuedAheadUnderOldestFirst) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4, 4);
    ASSERT_TRUE(sw->acquire(2).acquired); // segment 0
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(2).acquired); // segment 1
    ASSERT_TRUE(sw->enqueue(2, -1).waiter);
    EXPECT_EQ(sw->acquire(2).retry_after, 8 * kSec); // the queued 2 take segment 0's
    // 2 queued + 1: segment 0's 2 go to the queued request, segment 1's at 10 s are next.
    EXPECT_EQ(sw->acquire(0).retry_after, 8 * kSec);
}

TEST(SlidingWindow, RetryAfterIgnoresQueueUnderNewestFirst) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4, 4, QueueOrder::NewestFirst);
    ASSERT_TRUE(sw->acquire(2).acquired);
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(2).acquired);
    ASSERT_TRUE(sw->enqueue(2, -1).waiter);
    EXPECT_EQ(sw->acquire(2).retry_after, 6 * kSec);
}

TEST(SlidingWindow, RetryAfterWithMoreThanAWindowQueuedAhead) {
    auto clock = make_clock();
    auto sw = make_window(clock, 2, 8 * kSec, 4, 4);
    ASSERT_TRUE(sw->acquire(2).acquired);
    ASSERT_TRUE(sw->enqueue(2, -1).waiter); // granted at 8 s
    ASSERT_TRUE(sw->enqueue(2, -1).waiter); // granted at 16 s
    EXPECT_EQ(sw->acquire(2).retry_after, 24 * kSec);
}

TEST(SlidingWindow, RetryAfterIsExactWhenMoreThanAWindowIsQueuedAheadAcrossSegments) {
    // 1 s segments holding one permit each (t = 0..3); 3 queued ahead (granted at 6 s, when
    // segments 0..2 have expired); then segment 3 frees 1 at 7 s and segment 6 frees 3 at
    // 10 s: a request for 2 made at 3 s is granted at 10 s, 7 s later.
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 4 * kSec, 4, 4);
    for (int s = 0; s < 4; ++s) {
        ASSERT_TRUE(sw->acquire(1).acquired);
        if (s < 3) {
            clock->advance(kSec);
        }
    }
    auto ahead = sw->enqueue(3, -1);
    ASSERT_TRUE(ahead.waiter);
    EXPECT_EQ(sw->acquire(2).retry_after, 7 * kSec);
    // What actually happens, nothing else arriving:
    clock->advance(3 * kSec); // t = 6 s
    ASSERT_EQ(ahead.waiter->state(), Waiter::Completed);
    clock->advance(4 * kSec - 1);
    EXPECT_EQ(sw->available_permits(), 1);
    clock->advance(1); // t = 10 s
    EXPECT_EQ(sw->available_permits(), 4);
}

TEST(SlidingWindow, GiveBackRefundsOnlyTheCurrentSegment) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4);
    const Outcome o = sw->acquire(4);
    ASSERT_TRUE(o.acquired);
    clock->advance(1 * kSec); // still segment 0
    sw->give_back(1, o.tag);
    EXPECT_EQ(sw->available_permits(), 1);
    clock->advance(1 * kSec); // segment 1: segment 0 is no longer current
    sw->give_back(2, o.tag);
    EXPECT_EQ(sw->available_permits(), 1);
    const Outcome o2 = sw->acquire(1);
    ASSERT_TRUE(o2.acquired);
    EXPECT_EQ(o2.tag, 2 * kSec); // the start of window (period, segment) 1
    sw->give_back(1, o.tag);
    EXPECT_EQ(sw->available_permits(), 0);
    sw->give_back(5, o2.tag); // never below zero in the segment
    EXPECT_EQ(sw->available_permits(), 1);
    // Segment 0's 3 still come back at 8 s.
    clock->advance(6 * kSec);
    EXPECT_EQ(sw->available_permits(), 4);
}

TEST(SlidingWindow, GiveBackServesQueuedRequests) {
    auto clock = make_clock();
    auto sw = make_window(clock, 2, 8 * kSec, 4, 2);
    const Outcome o = sw->acquire(2);
    ASSERT_TRUE(o.acquired);
    auto q = sw->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    sw->give_back(1, o.tag);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(sw->available_permits(), 0);
}

TEST(SlidingWindow, QueuedRequestIsGrantedWhenASegmentFreesEnough) {
    auto clock = make_clock();
    auto sw = make_window(clock, 2, 8 * kSec, 4, 2);
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 0
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 1
    auto q = sw->enqueue(2, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(6 * kSec); // t = 8 s: 1 free, not enough
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(2 * kSec - 1);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    clock->advance(1); // t = 10 s
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 10 * kSec); // the start of window (period, segment) 5
    EXPECT_EQ(sw->available_permits(), 0);
}

TEST(SlidingWindow, CanAcquireMultipleRequestsAsyncWorkedExample) {
    // docs/design.md, Sliding window, the worked example: limit 4, 3 segments, NewestFirst, queue 4.
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 30 * kSec, 3, 4, QueueOrder::NewestFirst);
    ASSERT_TRUE(sw->acquire(2).acquired);
    EXPECT_EQ(sw->available_permits(), 2);

    auto three = sw->enqueue(3, -1);
    ASSERT_TRUE(three.waiter);
    clock->advance(10 * kSec); // slide: segment 1 frees nothing
    EXPECT_EQ(three.waiter->state(), Waiter::Pending);

    auto barge = sw->enqueue(2, -1); // NewestFirst: takes the 2 available
    EXPECT_FALSE(barge.waiter);
    EXPECT_TRUE(barge.outcome.acquired);
    EXPECT_EQ(sw->available_permits(), 0);

    clock->advance(10 * kSec);     // slide: segment 2 frees nothing
    auto two = sw->enqueue(2, -1); // no room (4 - 3 < 2): evicts the queued 3
    ASSERT_TRUE(two.waiter);
    ASSERT_EQ(three.waiter->state(), Waiter::Completed);
    EXPECT_FALSE(three.waiter->outcome().acquired);
    EXPECT_EQ(three.waiter->outcome().reason, Reason::Evicted);
    EXPECT_EQ(three.waiter->outcome().retry_after, -1);

    clock->advance(10 * kSec); // slide: segment 0 frees 2, granted to the queued 2
    ASSERT_EQ(two.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(two.waiter->outcome().acquired);
    EXPECT_EQ(two.waiter->outcome().tag, 30 * kSec); // the start of window (period, segment) 3

    const Statistics s = sw->statistics();
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
    EXPECT_EQ(s.total_failed_leases, 1);
}

TEST(SlidingWindow, OneSegmentBehavesLikeAFixedWindow) {
    auto clock = make_clock();
    auto sw = make_window(clock, 2, 10 * kSec, 1);
    ASSERT_TRUE(sw->acquire(2).acquired);
    clock->advance(9 * kSec);
    EXPECT_EQ(sw->acquire(1).retry_after, 1 * kSec);
    clock->advance(1 * kSec);
    EXPECT_EQ(sw->available_permits(), 2);
}

TEST(SlidingWindow, RoundedDownSegmentsFreePermitsEarlier) {
    auto clock = make_clock();
    auto sw = make_window(clock, 1, 10, 3); // 3 ns segments: permits come back after 9 ns
    ASSERT_TRUE(sw->acquire(1).acquired);
    EXPECT_EQ(sw->acquire(1).retry_after, 9);
    clock->advance(8);
    EXPECT_EQ(sw->available_permits(), 0);
    clock->advance(1);
    EXPECT_EQ(sw->available_permits(), 1);
}

TEST(SlidingWindow, ZeroPermitProbe) {
    auto clock = make_clock();
    auto sw = make_window(clock, 1, 8 * kSec, 4);
    EXPECT_TRUE(sw->acquire(0).acquired);
    EXPECT_EQ(sw->available_permits(), 1);
    ASSERT_TRUE(sw->acquire(1).acquired);
    const Outcome o = sw->acquire(0);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 8 * kSec);
    const Statistics s = sw->statistics();
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 1);
}

TEST(SlidingWindow, IdleDuration) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4);
    EXPECT_EQ(sw->idle_duration(), std::optional<Nanos>(0));
    clock->advance(1 * kSec);
    EXPECT_EQ(sw->idle_duration(), std::optional<Nanos>(1 * kSec));
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 0
    EXPECT_EQ(sw->idle_duration(), std::nullopt);
    clock->advance(2 * kSec);
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 1: held until 10 s
    clock->advance(5 * kSec);             // t = 8 s: segment 0 freed, segment 1 not yet
    EXPECT_EQ(sw->available_permits(), 3);
    EXPECT_EQ(sw->idle_duration(), std::nullopt);
    clock->advance(2 * kSec); // t = 10 s
    EXPECT_EQ(sw->idle_duration(), std::optional<Nanos>(0));
    clock->advance(3 * kSec);
    EXPECT_EQ(sw->idle_duration(), std::optional<Nanos>(3 * kSec));
}

TEST(SlidingWindow, TryReplenishInAutoModeReturnsFalse) {
    auto clock = make_clock();
    auto sw = make_window(clock, 1, 8 * kSec, 4);
    ASSERT_TRUE(sw->acquire(1).acquired);
    EXPECT_FALSE(sw->try_replenish());
    EXPECT_EQ(sw->available_permits(), 0);
}

TEST(SlidingWindow, ManualModeCatchesUpEverySegmentInOneReplenish) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 8 * kSec, 4, 0, QueueOrder::OldestFirst, true);
    for (int s = 0; s < 4; ++s) {
        ASSERT_TRUE(sw->try_replenish());
        ASSERT_TRUE(sw->acquire(1).acquired);
        clock->advance(2 * kSec);
    }
    clock->advance(100 * kSec);
    EXPECT_EQ(sw->available_permits(), 0); // state as of the last replenish (t = 6 s)
    EXPECT_TRUE(sw->try_replenish());
    EXPECT_EQ(sw->available_permits(), 4);
}

TEST(SlidingWindow, ManualModeServesQueueOnlyInTryReplenish) {
    auto clock = make_clock();
    auto sw = make_window(clock, 1, 8 * kSec, 4, 1, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(sw->acquire(1).acquired);
    auto q = sw->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    clock->advance(20 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    EXPECT_TRUE(sw->try_replenish());
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().tag, 20 * kSec); // the start of window (period, segment) 10
}

TEST(SlidingWindow, ManualModeRetryAfterClampsToZero) {
    auto clock = make_clock();
    auto sw = make_window(clock, 4, 20 * kSec, 4, 0, QueueOrder::OldestFirst, true);
    ASSERT_TRUE(sw->acquire(4).acquired);
    clock->advance(2 * kSec);
    EXPECT_EQ(sw->acquire(1).retry_after, 18 * kSec);
    clock->advance(23 * kSec); // the window has passed but nothing replenished yet
    const Outcome o = sw->acquire(1);
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.retry_after, 0);
}

TEST(SlidingWindow, CloseFailsWaitersAndLaterCallsThrow) {
    auto clock = make_clock();
    auto sw = make_window(clock, 1, 8 * kSec, 4, 2);
    const Outcome held = sw->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto q = sw->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    sw->close();
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_EQ(q.waiter->outcome().reason, Reason::Closed);
    EXPECT_THROW(sw->acquire(1), ClosedError);
    EXPECT_THROW(sw->enqueue(1, -1), ClosedError);
    EXPECT_THROW(sw->statistics(), ClosedError);
    EXPECT_THROW(sw->available_permits(), ClosedError);
    EXPECT_NO_THROW(sw->give_back(1, held.tag));
    clock->advance(20 * kSec);
}

TEST(SlidingWindow, RetryAfterIsExactForSingleRequests) {
    std::mt19937_64 rng(99);
    for (int trial = 0; trial < 200; ++trial) {
        auto clock = make_clock();
        const std::int64_t limit = 1 + static_cast<std::int64_t>(rng() % 20);
        const std::int64_t segments = 1 + static_cast<std::int64_t>(rng() % 8);
        const Nanos window = segments + static_cast<Nanos>(rng() % kSec);
        auto sw = make_window(clock, limit, window, segments);
        for (int step = 0; step < 30; ++step) {
            clock->advance(static_cast<Nanos>(rng() % static_cast<std::uint64_t>(sw->segment_length() * 2)));
            const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(limit));
            const Outcome o = sw->acquire(n);
            if (o.acquired) {
                continue;
            }
            ASSERT_GT(o.retry_after, 0);
            clock->advance(o.retry_after - 1);
            ASSERT_FALSE(sw->acquire(n).acquired) << "trial " << trial;
            clock->advance(1);
            ASSERT_TRUE(sw->acquire(n).acquired) << "trial " << trial;
        }
    }
}
