// The wait queue shared by every limiter (docs/design.md: Queues, Statistics, Reasons):
// OldestFirst without barging, NewestFirst eviction from the head, head-of-line blocking,
// zero-permit requests, queue limit counted in permits, cancellation, close and timeouts.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "permits/clock.hpp"
#include "permits/concurrency.hpp"
#include "permits/token_bucket.hpp"
#include "permits/waiter.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<Concurrency> make_limiter(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                          std::int64_t queue_limit, QueueOrder order = QueueOrder::OldestFirst) {
    return std::make_shared<Concurrency>(clock, limit, QueueOptions{queue_limit, order});
}

std::shared_ptr<TokenBucket> make_bucket(const std::shared_ptr<ManualClock>& clock, std::int64_t queue_limit,
                                         bool manual = false) {
    // One token every 20 s, at most one.
    return std::make_shared<TokenBucket>(clock, 1, 1, 20 * kSec, QueueOptions{queue_limit, QueueOrder::OldestFirst},
                                         manual);
}

bool granted(const Limiter::Enqueued& e) {
    return e.waiter && e.waiter->state() == Waiter::Completed && e.waiter->outcome().acquired;
}

bool pending(const Limiter::Enqueued& e) {
    return e.waiter && e.waiter->state() == Waiter::Pending;
}

Reason failure(const Limiter::Enqueued& e) {
    if (!e.waiter || e.waiter->state() != Waiter::Completed || e.waiter->outcome().acquired) {
        return Reason::None;
    }
    return e.waiter->outcome().reason;
}

} // namespace

// ---------------------------------------------------------------- order

TEST(Queue, OldestFirstServesInArrivalOrder) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    auto c = l->enqueue(1, -1);
    ASSERT_TRUE(pending(a) && pending(b) && pending(c));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
    EXPECT_TRUE(pending(b));
    EXPECT_TRUE(pending(c));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(b));
    EXPECT_TRUE(pending(c));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(c));
}

TEST(Queue, NewestFirstServesTheNewestRequestFirst) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    auto c = l->enqueue(1, -1);
    l->give_back(1, 0);
    EXPECT_TRUE(granted(c));
    EXPECT_TRUE(pending(a));
    EXPECT_TRUE(pending(b));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(b));
    EXPECT_TRUE(pending(a));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
}

TEST(Queue, OldestFirstForbidsBargingPastQueuedRequests) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 10);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    ASSERT_TRUE(pending(a));
    l->give_back(1, 0);
    EXPECT_EQ(l->available_permits(), 1);

    const Outcome o = l->acquire(1); // one permit is free, but a request is queued ahead
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    auto b = l->enqueue(1, -1); // joins the queue instead of taking it
    EXPECT_TRUE(pending(b));
    EXPECT_EQ(l->statistics().current_queued_count, 3);
    EXPECT_EQ(l->statistics().total_failed_leases, 1);

    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
    EXPECT_TRUE(pending(b));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(b));
}

TEST(Queue, NewestFirstAllowsBarging) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 10, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    ASSERT_TRUE(pending(a));
    l->give_back(1, 0);
    EXPECT_TRUE(pending(a));
    EXPECT_TRUE(l->acquire(1).acquired); // takes the free permit although a waits
    l->give_back(1, 0);
    const auto b = l->enqueue(1, -1);
    EXPECT_FALSE(b.waiter);
    EXPECT_TRUE(b.outcome.acquired);
    EXPECT_TRUE(pending(a));
}

TEST(Queue, HeadOfLineBlockingOldestFirst) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 3, 4);
    ASSERT_TRUE(l->acquire(3).acquired);
    auto big = l->enqueue(3, -1);
    auto small = l->enqueue(1, -1);
    l->give_back(1, 0);
    EXPECT_TRUE(pending(big));
    EXPECT_TRUE(pending(small)); // fits, but nothing skips ahead of the head
    l->give_back(2, 0);
    EXPECT_TRUE(granted(big));
    EXPECT_TRUE(pending(small));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(small));
}

TEST(Queue, HeadOfLineBlockingNewestFirst) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 3, 4, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(3).acquired);
    auto small = l->enqueue(1, -1);
    auto big = l->enqueue(3, -1);
    l->give_back(1, 0);
    EXPECT_TRUE(pending(big));
    EXPECT_TRUE(pending(small)); // the newest request blocks the older ones
    l->give_back(2, 0);
    EXPECT_TRUE(granted(big));
    EXPECT_TRUE(pending(small));
}

// ---------------------------------------------------------------- queue limit and eviction

TEST(Queue, QueueLimitCountsPermitsNotRequests) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 3);
    ASSERT_TRUE(l->acquire(2).acquired);
    EXPECT_TRUE(pending(l->enqueue(2, -1)));
    const auto full = l->enqueue(2, -1);
    EXPECT_FALSE(full.waiter);
    EXPECT_EQ(full.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(full.outcome.permits, 2);
    EXPECT_TRUE(pending(l->enqueue(1, -1)));
    EXPECT_EQ(l->statistics().current_queued_count, 3);
    EXPECT_EQ(l->enqueue(1, -1).outcome.reason, Reason::QueueFull);
    EXPECT_EQ(l->statistics().total_failed_leases, 2);
}

TEST(Queue, NoQueueLimitQueuesEveryRequestInOrder) {
    auto clock = make_clock();
    auto l = make_limiter(clock, kMaxPermits, kNoQueueLimit);
    ASSERT_TRUE(l->acquire(kMaxPermits).acquired);
    // More queued permits than any bounded queue holds.
    std::vector<Limiter::Enqueued> queued;
    for (int i = 0; i < 3; ++i) {
        queued.push_back(l->enqueue(kMaxPermits, -1));
        EXPECT_TRUE(pending(queued.back()));
    }
    queued.push_back(l->enqueue(1, -1));
    EXPECT_TRUE(pending(queued.back()));
    EXPECT_EQ(l->statistics().current_queued_count, 3 * kMaxPermits + 1);
    l->give_back(kMaxPermits, 0);
    EXPECT_TRUE(granted(queued[0]));
    EXPECT_TRUE(pending(queued[1]));
    EXPECT_TRUE(pending(queued[3])); // no barging past the head
    EXPECT_EQ(l->statistics().total_failed_leases, 0);
}

TEST(Queue, NoQueueLimitUnderNewestFirstEvictsNobody) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, kNoQueueLimit, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    EXPECT_TRUE(pending(a));
    EXPECT_TRUE(pending(b));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(b));
    EXPECT_TRUE(pending(a));
}

TEST(Queue, QueueLimitIsACountOrNoLimit) {
    auto clock = make_clock();
    EXPECT_NO_THROW(make_limiter(clock, 1, kMaxPermits));
    EXPECT_NO_THROW(make_limiter(clock, 1, kNoQueueLimit));
    EXPECT_THROW(make_limiter(clock, 1, kMaxPermits + 1), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, 1, kNoQueueLimit - 1), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, 1, -1), std::invalid_argument);
}

TEST(Queue, QueueAcceptsAgainOnceDrained) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    EXPECT_EQ(l->enqueue(1, -1).outcome.reason, Reason::QueueFull);
    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
    EXPECT_TRUE(pending(l->enqueue(1, -1)));
}

TEST(Queue, NewestFirstEvictsTheOldestRequest) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    ASSERT_EQ(a.waiter->state(), Waiter::Completed);
    const Outcome& o = a.waiter->outcome();
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::Evicted);
    EXPECT_EQ(o.retry_after, -1);
    EXPECT_EQ(o.permits, 1);
    EXPECT_TRUE(pending(b));
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 1);
    EXPECT_EQ(s.total_failed_leases, 1); // an eviction counts as a failed lease
}

TEST(Queue, NewestFirstEvictsAsManyAsNeeded) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 2, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    auto c = l->enqueue(2, -1);
    EXPECT_EQ(failure(a), Reason::Evicted);
    EXPECT_EQ(failure(b), Reason::Evicted);
    EXPECT_TRUE(pending(c));
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 2);
    EXPECT_EQ(s.total_failed_leases, 2);
}

TEST(Queue, NewestFirstEvictsOnlyWhatIsNeeded) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 3, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    auto c = l->enqueue(1, -1);
    auto d = l->enqueue(2, -1);
    EXPECT_EQ(failure(a), Reason::Evicted);
    EXPECT_EQ(failure(b), Reason::Evicted);
    EXPECT_TRUE(pending(c));
    EXPECT_TRUE(pending(d));
    EXPECT_EQ(l->statistics().current_queued_count, 3);
}

TEST(Queue, NewestFirstRequestLargerThanTheQueueLimitEvictsNothing) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 1, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(1, -1);
    const auto big = l->enqueue(2, -1);
    EXPECT_FALSE(big.waiter);
    EXPECT_EQ(big.outcome.reason, Reason::QueueFull);
    EXPECT_TRUE(pending(a));
    EXPECT_EQ(l->statistics().total_failed_leases, 1);
}

TEST(Queue, OldestFirstFullQueueRejectsWithoutEvicting) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    const auto r = l->enqueue(1, -1);
    EXPECT_EQ(r.outcome.reason, Reason::QueueFull);
    EXPECT_TRUE(pending(a));
}

TEST(Queue, EvictionSkipsCancelledEntries) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 2, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    ASSERT_TRUE(l->cancel(*a.waiter));
    auto c = l->enqueue(1, -1); // room freed by the cancellation: nothing evicted
    EXPECT_TRUE(pending(b));
    EXPECT_TRUE(pending(c));
    EXPECT_EQ(l->statistics().total_failed_leases, 0);
    auto d = l->enqueue(1, -1); // evicts b; the cancelled a is skipped, not counted
    EXPECT_EQ(a.waiter->state(), Waiter::Cancelled);
    EXPECT_EQ(failure(b), Reason::Evicted);
    EXPECT_TRUE(pending(c));
    EXPECT_TRUE(pending(d));
    Statistics s = l->statistics();
    EXPECT_EQ(s.total_failed_leases, 1);
    EXPECT_EQ(s.current_queued_count, 2);
    l->give_back(1, 0);
    EXPECT_TRUE(granted(d));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(c));
    s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
}

// ---------------------------------------------------------------- zero permits

TEST(Queue, ZeroPermitRequestsWithAvailability) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 0);
    const Outcome o = l->acquire(0);
    EXPECT_TRUE(o.acquired);
    EXPECT_EQ(o.permits, 0);
    const auto e = l->enqueue(0, -1);
    EXPECT_FALSE(e.waiter);
    EXPECT_TRUE(e.outcome.acquired);
    EXPECT_EQ(l->available_permits(), 1);
    EXPECT_EQ(l->statistics().total_successful_leases, 2);
}

TEST(Queue, ZeroPermitProbeIgnoresTheQueue) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 2);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    l->give_back(1, 0);
    ASSERT_TRUE(pending(a));
    EXPECT_TRUE(l->acquire(0).acquired); // a permit is available: the probe succeeds
    EXPECT_TRUE(l->enqueue(0, -1).outcome.acquired);
}

TEST(Queue, ZeroPermitRequestWaitsForAvailabilityEvenWithQueueLimitZero) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 0);
    ASSERT_TRUE(l->acquire(1).acquired);
    const Outcome probe = l->acquire(0);
    EXPECT_FALSE(probe.acquired);
    EXPECT_EQ(probe.reason, Reason::LimitReached);

    auto z = l->enqueue(0, -1);
    ASSERT_TRUE(pending(z));
    EXPECT_EQ(z.waiter->permits(), 0);
    EXPECT_EQ(l->statistics().current_queued_count, 0); // zero permits take no queue room
    EXPECT_EQ(l->idle_duration(), std::nullopt);

    l->give_back(1, 0);
    ASSERT_TRUE(granted(z));
    EXPECT_EQ(z.waiter->outcome().permits, 0);
    EXPECT_EQ(l->available_permits(), 1); // nothing consumed
    const Statistics s = l->statistics();
    EXPECT_EQ(s.total_successful_leases, 2);
    EXPECT_EQ(s.total_failed_leases, 1);
}

TEST(Queue, ZeroPermitWaiterCompletesWhenPermitsAreAvailable) {
    // A deliberate difference from .NET (docs/design.md, Zero-permit requests; where a zero-permit waiter completes
    // as soon as the queue reaches it, even with nothing available): wait_async(0) means "wait
    // until permits are available" (the documented behaviour), so it completes only when one is.
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 2);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    auto z = l->enqueue(0, -1);
    l->give_back(1, 0);
    EXPECT_TRUE(pending(a));
    EXPECT_TRUE(pending(z)); // blocked behind a
    l->give_back(1, 0);      // a is served; nothing is left, so z still waits
    EXPECT_TRUE(granted(a));
    EXPECT_TRUE(pending(z));
    l->give_back(2, 0); // a's permits come back: z completes, taking nothing
    EXPECT_TRUE(granted(z));
    EXPECT_EQ(l->available_permits(), 2);
}

// ---------------------------------------------------------------- cancellation

TEST(Queue, CancelRestoresQueueAccounting) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 2);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    ASSERT_TRUE(pending(a));
    EXPECT_EQ(l->enqueue(1, -1).outcome.reason, Reason::QueueFull);
    EXPECT_EQ(l->statistics().current_queued_count, 2);

    EXPECT_TRUE(l->cancel(*a.waiter));
    EXPECT_EQ(a.waiter->state(), Waiter::Cancelled);
    Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_failed_leases, 1); // a cancellation is not a failed lease
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_FALSE(l->cancel(*a.waiter)); // only once

    auto b = l->enqueue(2, -1); // the room is back
    ASSERT_TRUE(pending(b));
    l->give_back(2, 0);
    EXPECT_TRUE(granted(b));
    EXPECT_FALSE(l->cancel(*b.waiter)); // already completed
    EXPECT_EQ(b.waiter->state(), Waiter::Completed);
    s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.total_successful_leases, 2);
}

TEST(Queue, CancellingTheBlockingHeadServesTheNext) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 3);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, -1);
    auto b = l->enqueue(1, -1);
    l->give_back(1, 0);
    ASSERT_TRUE(pending(a) && pending(b));
    EXPECT_TRUE(l->cancel(*a.waiter));
    EXPECT_TRUE(granted(b));
    EXPECT_EQ(l->available_permits(), 0);
}

TEST(Queue, CancelledHeadIsSkippedAfterReplenishment) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, -1);
    auto b = tb->enqueue(1, -1);
    ASSERT_TRUE(tb->cancel(*a.waiter));
    auto c = tb->enqueue(1, -1);
    ASSERT_TRUE(pending(b) && pending(c));
    clock->advance(20 * kSec);
    EXPECT_TRUE(granted(b));
    EXPECT_TRUE(pending(c));
    clock->advance(20 * kSec);
    EXPECT_TRUE(granted(c));
    const Statistics s = tb->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
    EXPECT_EQ(s.total_failed_leases, 0);
}

TEST(Queue, ManyCancellationsInTheMiddle) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1000);
    ASSERT_TRUE(l->acquire(1).acquired);
    std::vector<Limiter::Enqueued> waiters;
    for (int i = 0; i < 300; ++i) {
        waiters.push_back(l->enqueue(1, -1));
        ASSERT_TRUE(pending(waiters.back()));
    }
    for (int i = 1; i < 299; ++i) {
        ASSERT_TRUE(l->cancel(*waiters[i].waiter));
    }
    EXPECT_EQ(l->statistics().current_queued_count, 2);
    l->give_back(1, 0);
    EXPECT_TRUE(granted(waiters[0]));
    EXPECT_TRUE(pending(waiters[299]));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(waiters[299]));
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 3);
    EXPECT_EQ(s.total_failed_leases, 0);
}

// ---------------------------------------------------------------- close

TEST(Queue, CloseFailsWaitersInOldestFirstProcessingOrder) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3);
    auto notifier = std::make_shared<Notifier>();
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1, notifier, 1);
    auto b = l->enqueue(1, -1, notifier, 2);
    auto c = l->enqueue(1, -1, notifier, 3);
    EXPECT_EQ(notifier->wakeups(), 0u);
    l->close();
    const auto done = notifier->drain();
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[0]->id(), 1u);
    EXPECT_EQ(done[1]->id(), 2u);
    EXPECT_EQ(done[2]->id(), 3u);
    for (const auto& w : done) {
        EXPECT_EQ(w->state(), Waiter::Completed);
        EXPECT_FALSE(w->outcome().acquired);
        EXPECT_EQ(w->outcome().reason, Reason::Closed);
        EXPECT_EQ(w->outcome().retry_after, -1);
    }
    EXPECT_EQ(notifier->wakeups(), 1u);
    EXPECT_THROW(l->acquire(1), ClosedError);
    EXPECT_THROW(l->enqueue(1, -1), ClosedError);
    EXPECT_THROW(l->statistics(), ClosedError);
}

TEST(Queue, CloseFailsWaitersInNewestFirstProcessingOrder) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3, QueueOrder::NewestFirst);
    auto notifier = std::make_shared<Notifier>();
    ASSERT_TRUE(l->acquire(1).acquired);
    l->enqueue(1, -1, notifier, 1);
    l->enqueue(1, -1, notifier, 2);
    l->enqueue(1, -1, notifier, 3);
    l->close();
    const auto done = notifier->drain();
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[0]->id(), 3u);
    EXPECT_EQ(done[1]->id(), 2u);
    EXPECT_EQ(done[2]->id(), 1u);
    for (const auto& w : done) {
        EXPECT_EQ(w->outcome().reason, Reason::Closed);
    }
}

TEST(Queue, CloseAfterCancellingAQueuedRequest) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 2);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    auto b = l->enqueue(1, -1);
    ASSERT_TRUE(l->cancel(*a.waiter));
    l->close();
    EXPECT_EQ(a.waiter->state(), Waiter::Cancelled);
    EXPECT_EQ(failure(b), Reason::Closed);
    EXPECT_FALSE(l->cancel(*b.waiter));
}

TEST(Queue, CloseFailsTimedWaitersAndLaterTimersAreHarmless) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, 5 * kSec);
    auto b = tb->enqueue(1, -1);
    tb->close();
    EXPECT_EQ(failure(a), Reason::Closed);
    EXPECT_EQ(failure(b), Reason::Closed);
    clock->advance(60 * kSec);
    EXPECT_EQ(failure(a), Reason::Closed);
}

// ---------------------------------------------------------------- timeouts

TEST(Queue, TimeoutFailsTheWaiterAtItsDeadline) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    clock->advance(2 * kSec);
    auto a = l->enqueue(1, 5 * kSec);
    ASSERT_TRUE(pending(a));
    EXPECT_EQ(a.waiter->deadline(), 7 * kSec);
    EXPECT_GE(clock->pending(), 1u);
    clock->advance(5 * kSec - 1);
    EXPECT_TRUE(pending(a));
    clock->advance(1);
    ASSERT_EQ(a.waiter->state(), Waiter::Completed);
    const Outcome& o = a.waiter->outcome();
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::Timeout);
    EXPECT_EQ(o.retry_after, -1);
    EXPECT_EQ(o.permits, 1);
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_failed_leases, 0); // a timeout is not counted, like a cancellation
    EXPECT_FALSE(l->cancel(*a.waiter));
}

TEST(Queue, TimeoutFreesQueueRoom) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, 5 * kSec);
    EXPECT_EQ(l->enqueue(1, -1).outcome.reason, Reason::QueueFull);
    clock->advance(5 * kSec);
    EXPECT_EQ(failure(a), Reason::Timeout);
    EXPECT_TRUE(pending(l->enqueue(1, -1)));
}

TEST(Queue, TimedOutHeadUnblocksTheRequestsBehindIt) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 3);
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(2, 5 * kSec);
    auto b = l->enqueue(1, -1);
    l->give_back(1, 0);
    ASSERT_TRUE(pending(a) && pending(b));
    clock->advance(5 * kSec);
    EXPECT_EQ(failure(a), Reason::Timeout);
    EXPECT_TRUE(granted(b));
}

TEST(Queue, DeadlinesExpireInTheirOwnTime) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, 3 * kSec);
    auto b = l->enqueue(1, 5 * kSec);
    auto c = l->enqueue(1, -1);
    clock->advance(4 * kSec);
    EXPECT_EQ(failure(a), Reason::Timeout);
    EXPECT_TRUE(pending(b));
    clock->advance(1 * kSec);
    EXPECT_EQ(failure(b), Reason::Timeout);
    EXPECT_TRUE(pending(c));
    clock->advance(1000 * kSec);
    EXPECT_TRUE(pending(c));
    EXPECT_EQ(l->statistics().current_queued_count, 1);
}

TEST(Queue, LaterDeadlineDoesNotDelayAnEarlierOne) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 3);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto late = l->enqueue(1, 10 * kSec);
    auto early = l->enqueue(1, 2 * kSec);
    clock->advance(2 * kSec);
    EXPECT_EQ(failure(early), Reason::Timeout);
    EXPECT_TRUE(pending(late));
    clock->advance(8 * kSec);
    EXPECT_EQ(failure(late), Reason::Timeout);
}

TEST(Queue, GrantBeforeTheDeadlineStands) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, 5 * kSec);
    clock->advance(2 * kSec);
    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
    clock->advance(10 * kSec);
    EXPECT_TRUE(granted(a));
    EXPECT_EQ(l->available_permits(), 0);
}

TEST(Queue, TimedWaiterIsGrantedByReplenishmentBeforeItsDeadline) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, 5 * kSec); // the token comes at 20 s: too late
    clock->advance(5 * kSec);
    EXPECT_EQ(failure(a), Reason::Timeout);
    auto b = tb->enqueue(1, 30 * kSec);
    clock->advance(15 * kSec - 1);
    EXPECT_TRUE(pending(b));
    clock->advance(1);
    EXPECT_TRUE(granted(b));
    EXPECT_EQ(b.waiter->outcome().tag, 20 * kSec); // the start of window (period, segment) 1
}

TEST(Queue, EarlierDeadlineIsHonouredWhenALaterTimerIsSet) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, -1); // timer for the token at 20 s
    auto b = tb->enqueue(1, 5 * kSec);
    clock->advance(5 * kSec);
    EXPECT_EQ(failure(b), Reason::Timeout);
    EXPECT_TRUE(pending(a));
    clock->advance(15 * kSec);
    EXPECT_TRUE(granted(a));
}

TEST(Queue, TimeoutsRunInManualMode) {
    auto clock = make_clock();
    auto tb = make_bucket(clock, 2, true);
    ASSERT_TRUE(tb->acquire(1).acquired);
    auto a = tb->enqueue(1, 5 * kSec);
    auto b = tb->enqueue(1, -1);
    clock->advance(5 * kSec);
    EXPECT_EQ(failure(a), Reason::Timeout);
    clock->advance(20 * kSec);
    EXPECT_TRUE(pending(b)); // manual: served only by try_replenish
    EXPECT_TRUE(tb->try_replenish());
    EXPECT_TRUE(granted(b));
}

TEST(Queue, ZeroTimeoutDoesNotQueue) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 2);
    const auto now = l->enqueue(1, 0);
    EXPECT_FALSE(now.waiter);
    EXPECT_TRUE(now.outcome.acquired);
    const auto r = l->enqueue(1, 0);
    EXPECT_FALSE(r.waiter);
    EXPECT_FALSE(r.outcome.acquired);
    EXPECT_EQ(r.outcome.reason, Reason::Timeout);
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 0);
    EXPECT_EQ(s.total_successful_leases, 1);
    EXPECT_EQ(s.total_failed_leases, 0);
}

TEST(Queue, ZeroTimeoutRequestEvictsNobodyUnderNewestFirst) {
    // A request that will not queue must not push queued requests out to make room for itself.
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1, QueueOrder::NewestFirst);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    const auto r = l->enqueue(1, 0);
    EXPECT_FALSE(r.waiter);
    EXPECT_FALSE(r.outcome.acquired);
    EXPECT_TRUE(pending(a));
    const Statistics s = l->statistics();
    EXPECT_EQ(s.current_queued_count, 1);
    EXPECT_EQ(s.total_failed_leases, 0);
}

// ---------------------------------------------------------------- completion delivery

TEST(Queue, CompletionsReachTheNotifierWithTheirIds) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 2, 4);
    auto notifier = std::make_shared<Notifier>();
    ASSERT_TRUE(l->acquire(2).acquired);
    auto a = l->enqueue(1, -1, notifier, 41);
    auto b = l->enqueue(1, -1, notifier, 42);
    EXPECT_EQ(a.waiter->id(), 41u);
    EXPECT_TRUE(notifier->drain().empty());
    l->give_back(2, 0); // one pass completes both: one wake-up
    EXPECT_EQ(notifier->wakeups(), 1u);
    const auto done = notifier->drain();
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0]->id(), 41u);
    EXPECT_EQ(done[1]->id(), 42u);
    EXPECT_TRUE(done[0]->outcome().acquired);
    EXPECT_EQ(done[0], a.waiter);
}

TEST(Queue, ImmediateGrantDoesNotTouchTheNotifier) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    auto notifier = std::make_shared<Notifier>();
    const auto r = l->enqueue(1, -1, notifier, 7);
    EXPECT_FALSE(r.waiter);
    EXPECT_TRUE(r.outcome.acquired);
    EXPECT_EQ(notifier->wakeups(), 0u);
    EXPECT_TRUE(notifier->drain().empty());
}

TEST(Queue, CancelledWaiterIsNotDelivered) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    auto notifier = std::make_shared<Notifier>();
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1, notifier, 1);
    ASSERT_TRUE(l->cancel(*a.waiter));
    l->give_back(1, 0);
    EXPECT_EQ(notifier->wakeups(), 0u);
    EXPECT_TRUE(notifier->drain().empty());
    EXPECT_EQ(l->available_permits(), 1);
}

// ---------------------------------------------------------------- more accounting and timers

TEST(Queue, CancelledEntriesDoNotBlockBarging) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 2);
    ASSERT_TRUE(l->acquire(1).acquired);
    auto a = l->enqueue(1, -1);
    ASSERT_TRUE(l->cancel(*a.waiter));
    l->give_back(1, 0);
    EXPECT_EQ(a.waiter->state(), Waiter::Cancelled);
    EXPECT_TRUE(l->acquire(1).acquired); // the queue count is 0: nothing is ahead
}

TEST(Queue, NewestFirstTimerFollowsTheNewestRequest) {
    auto clock = make_clock();
    auto tb = std::make_shared<TokenBucket>(clock, 2, 1, 20 * kSec, QueueOptions{3, QueueOrder::NewestFirst}, false);
    ASSERT_TRUE(tb->acquire(2).acquired);
    auto a = tb->enqueue(1, -1);
    auto b = tb->enqueue(2, -1); // newest: served first, needs two tokens (40 s)
    clock->advance(20 * kSec);
    EXPECT_TRUE(pending(a)); // one token, but the newest request blocks the older one
    EXPECT_TRUE(pending(b));
    clock->advance(20 * kSec);
    EXPECT_TRUE(granted(b));
    EXPECT_TRUE(pending(a));
    clock->advance(20 * kSec - 1);
    EXPECT_TRUE(pending(a));
    clock->advance(1);
    EXPECT_TRUE(granted(a));
    EXPECT_EQ(a.waiter->outcome().tag, 60 * kSec); // the start of window (period, segment) 3
}

TEST(Queue, HugeTimeoutMeansNoDeadline) {
    auto clock = make_clock();
    auto l = make_limiter(clock, 1, 1);
    ASSERT_TRUE(l->acquire(1).acquired);
    clock->advance(5 * kSec);
    auto a = l->enqueue(1, kNever);
    ASSERT_TRUE(pending(a));
    EXPECT_EQ(a.waiter->deadline(), kNever);
    clock->advance(1'000'000 * kSec);
    EXPECT_TRUE(pending(a));
    l->give_back(1, 0);
    EXPECT_TRUE(granted(a));
}

TEST(Queue, LimiterDestroyedWithATimerPendingIsHarmless) {
    auto clock = make_clock();
    std::shared_ptr<Waiter> w;
    {
        auto tb = make_bucket(clock, 1);
        ASSERT_TRUE(tb->acquire(1).acquired);
        w = tb->enqueue(1, 5 * kSec).waiter;
        ASSERT_TRUE(w);
        EXPECT_GE(clock->pending(), 1u);
    }
    clock->advance(60 * kSec);
    EXPECT_EQ(clock->pending(), 0u);
    EXPECT_EQ(w->state(), Waiter::Pending); // nobody left to complete it
}
