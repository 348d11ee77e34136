// A limiter whose queue empties (closed, last waiter cancelled or served) drops its timers from
// the scheduler: a weak pointer in the timer heap pins a make_shared limiter's whole allocation
// until the timer is due, which can be a window, a period or a deadline years away.
#include <gtest/gtest.h>

#include <memory>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {
constexpr Nanos kYear = 365 * 24 * 3600 * kSec;
const QueueOptions kQueue{8, QueueOrder::OldestFirst};
} // namespace

TEST(TimerCancel, CloseDropsTheLimitersTimerAndItsMemory) {
    auto clock = make_clock();
    auto lim = std::make_shared<TokenBucket>(clock, 1, 1, kYear, kQueue, false);
    ASSERT_TRUE(lim->acquire(1).acquired);
    auto q = lim->enqueue(1, -1); // served by the refill a year from now
    ASSERT_TRUE(q.waiter);
    ASSERT_EQ(clock->pending(), 1u);
    const std::weak_ptr<Limiter> watch = lim;
    lim->close();
    EXPECT_EQ(clock->pending(), 0u);
    q = {};
    lim.reset();
    EXPECT_EQ(watch.use_count(), 0); // gone now, not in a year
}

TEST(TimerCancel, TheLastWaitersCancellationDropsTheTimer) {
    auto clock = make_clock();
    auto lim = std::make_shared<Concurrency>(clock, 1, kQueue);
    ASSERT_TRUE(lim->acquire(1).acquired);
    auto a = lim->enqueue(1, kYear); // a deadline: the limiter's timer
    auto b = lim->enqueue(1, 2 * kYear);
    ASSERT_GE(clock->pending(), 1u);
    ASSERT_TRUE(lim->cancel(*a.waiter));
    EXPECT_GE(clock->pending(), 1u); // b still waits for its deadline
    ASSERT_TRUE(lim->cancel(*b.waiter));
    EXPECT_EQ(clock->pending(), 0u);
    // And it still works: a new waiter sets a new timer that fires.
    auto c = lim->enqueue(1, kSec);
    EXPECT_EQ(clock->pending(), 1u);
    clock->advance(kSec);
    EXPECT_EQ(c.waiter->state(), Waiter::Completed);
    EXPECT_EQ(c.waiter->outcome().reason, Reason::Timeout);
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(TimerCancel, AQueueEmptiedByAReleaseDropsTheTimer) {
    auto clock = make_clock();
    auto lim = std::make_shared<Concurrency>(clock, 1, kQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto a = lim->enqueue(1, kYear);
    ASSERT_EQ(clock->pending(), 1u);
    lim->give_back(1, held.tag); // a is served: nothing waits for its deadline any more
    ASSERT_EQ(a.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(TimerCancel, AStaleLaterTimerGoesOnceTheQueueEmptiesAtAnEarlierOne) {
    auto clock = make_clock();
    auto lim = std::make_shared<Concurrency>(clock, 1, kQueue);
    ASSERT_TRUE(lim->acquire(1).acquired);
    auto far = lim->enqueue(1, kYear);
    auto near = lim->enqueue(1, kSec); // an earlier timer; the year's stays in the heap
    ASSERT_EQ(clock->pending(), 2u);
    ASSERT_TRUE(lim->cancel(*far.waiter));
    clock->advance(kSec); // near times out: the queue is empty, the year's timer serves nothing
    EXPECT_EQ(near.waiter->outcome().reason, Reason::Timeout);
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(TimerCancel, TheEngineThreadLetsAClosedLimiterGo) {
    const std::size_t before = EngineThread::instance().pending();
    auto lim = std::make_shared<FixedWindow>(MonotonicClock::instance(), 1, kYear, kQueue, false);
    ASSERT_TRUE(lim->acquire(1).acquired);
    auto q = lim->enqueue(1, -1); // served when the window turns, in a year
    ASSERT_TRUE(q.waiter);
    ASSERT_EQ(EngineThread::instance().pending(), before + 1);
    const std::weak_ptr<Limiter> watch = lim;
    lim->close();
    EXPECT_EQ(EngineThread::instance().pending(), before);
    q = {};
    lim.reset();
    EXPECT_EQ(watch.use_count(), 0);
}

TEST(TimerCancel, AClosedKeyedTableDropsItsEvictionTimer) {
    auto clock = make_clock();
    auto k = std::make_shared<PerKeyLimiter>(clock, PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(1), kQueue),
                                             kYear, 0);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    ASSERT_GE(clock->pending(), 1u);
    const std::weak_ptr<PerKeyLimiter> watch = k;
    k->close();
    EXPECT_EQ(clock->pending(), 0u);
    k.reset();
    EXPECT_EQ(watch.use_count(), 0);
}
