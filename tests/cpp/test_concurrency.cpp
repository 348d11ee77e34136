// Concurrency limiter: permits held until released (docs/design.md: Concurrency, Queues, Statistics, Idleness).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>

#include "permits/clock.hpp"
#include "permits/concurrency.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<Concurrency> make_limiter(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                          std::int64_t queue_limit = 0, QueueOrder order = QueueOrder::OldestFirst) {
    return std::make_shared<Concurrency>(clock, limit, QueueOptions{queue_limit, order});
}

void expect_stats(Limiter& l, std::int64_t available, std::int64_t queued, std::int64_t failed,
                  std::int64_t successful) {
    const Statistics s = l.statistics();
    EXPECT_EQ(s.current_available_permits, available);
    EXPECT_EQ(s.current_queued_count, queued);
    EXPECT_EQ(s.total_failed_leases, failed);
    EXPECT_EQ(s.total_successful_leases, successful);
}

} // namespace

TEST(Concurrency, InvalidConstructionArgumentsThrow) {
    auto clock = make_clock();
    EXPECT_THROW(make_limiter(clock, 0), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, -1), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, kMaxPermits + 1), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, 1, -1), std::invalid_argument);
    EXPECT_THROW(make_limiter(clock, 1, kMaxPermits + 1), std::invalid_argument);
    EXPECT_NO_THROW(make_limiter(clock, kMaxPermits, kMaxPermits, QueueOrder::NewestFirst));
}

TEST(Concurrency, PropertiesReflectOptions) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 5, 3, QueueOrder::NewestFirst);
    EXPECT_EQ(c->permit_limit(), 5);
    EXPECT_EQ(c->max_permits(), 5);
    EXPECT_EQ(c->queue_options().queue_limit, 3);
    EXPECT_EQ(c->queue_options().order, QueueOrder::NewestFirst);
    EXPECT_TRUE(c->releases_permits());
    EXPECT_FALSE(c->manual());
    EXPECT_FALSE(c->try_replenish());
}

TEST(Concurrency, BadPermitCountsThrow) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 2, 5);
    EXPECT_THROW(c->acquire(3), std::invalid_argument);
    EXPECT_THROW(c->acquire(-1), std::invalid_argument);
    EXPECT_THROW(c->enqueue(3, -1), std::invalid_argument);
    EXPECT_THROW(c->enqueue(-1, -1), std::invalid_argument);
    expect_stats(*c, 2, 0, 0, 0);
}

TEST(Concurrency, PermitsComeBackOnlyOnRelease) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 1);
    const Outcome o = c->acquire(1);
    ASSERT_TRUE(o.acquired);
    EXPECT_EQ(o.permits, 1);
    EXPECT_EQ(o.reason, Reason::None);
    EXPECT_EQ(o.retry_after, -1);

    const Outcome f = c->acquire(1);
    EXPECT_FALSE(f.acquired);
    EXPECT_EQ(f.reason, Reason::LimitReached);
    EXPECT_EQ(f.retry_after, -1); // concurrency failures carry no retry-after

    clock->advance(1000 * kSec); // time brings nothing back
    EXPECT_EQ(c->available_permits(), 0);
    EXPECT_FALSE(c->acquire(1).acquired);

    c->give_back(1, o.tag);
    EXPECT_EQ(c->available_permits(), 1);
    EXPECT_TRUE(c->acquire(1).acquired);
}

TEST(Concurrency, PartialReleases) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 5);
    ASSERT_TRUE(c->acquire(3).acquired);
    ASSERT_TRUE(c->acquire(2).acquired);
    c->give_back(2, 0);
    EXPECT_EQ(c->available_permits(), 2);
    EXPECT_FALSE(c->acquire(3).acquired);
    c->give_back(1, 0);
    EXPECT_TRUE(c->acquire(3).acquired);
    EXPECT_EQ(c->available_permits(), 0);
}

TEST(Concurrency, StatisticsWorkedExample) {
    // docs/design.md, Statistics (.NET's GetStatisticsHasCorrectValues).
    auto clock = make_clock();
    auto c = make_limiter(clock, 100, 50);
    expect_stats(*c, 100, 0, 0, 0);
    const Outcome sixty = c->acquire(60);
    ASSERT_TRUE(sixty.acquired);
    expect_stats(*c, 40, 0, 0, 1);

    auto fifty = c->enqueue(50, -1);
    ASSERT_TRUE(fifty.waiter);
    EXPECT_EQ(fifty.waiter->state(), Waiter::Pending);
    expect_stats(*c, 40, 50, 0, 1);

    auto one = c->enqueue(1, -1);
    EXPECT_FALSE(one.waiter);
    EXPECT_FALSE(one.outcome.acquired);
    EXPECT_EQ(one.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(one.outcome.retry_after, -1);
    expect_stats(*c, 40, 50, 1, 1);

    const Outcome hundred = c->acquire(100);
    EXPECT_FALSE(hundred.acquired);
    EXPECT_EQ(hundred.reason, Reason::LimitReached);
    expect_stats(*c, 40, 50, 2, 1);

    c->give_back(60, sixty.tag);
    ASSERT_EQ(fifty.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(fifty.waiter->outcome().acquired);
    EXPECT_EQ(fifty.waiter->outcome().permits, 50);
    expect_stats(*c, 50, 0, 2, 2);
}

TEST(Concurrency, StatisticsWithZeroPermitCount) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 1);
    EXPECT_TRUE(c->acquire(0).acquired);
    EXPECT_TRUE(c->enqueue(0, -1).outcome.acquired);
    expect_stats(*c, 1, 0, 0, 2);
    ASSERT_TRUE(c->acquire(1).acquired);
    const Outcome f = c->acquire(0);
    EXPECT_FALSE(f.acquired);
    EXPECT_EQ(f.reason, Reason::LimitReached);
    EXPECT_EQ(f.retry_after, -1);
    expect_stats(*c, 0, 0, 1, 3);
}

TEST(Concurrency, StatisticsReturnsSnapshots) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 2);
    const Statistics before = c->statistics();
    ASSERT_TRUE(c->acquire(1).acquired);
    const Statistics after = c->statistics();
    EXPECT_EQ(before.current_available_permits, 2);
    EXPECT_EQ(before.total_successful_leases, 0);
    EXPECT_EQ(after.current_available_permits, 1);
    EXPECT_EQ(after.total_successful_leases, 1);
}

TEST(Concurrency, QueuedRequestIsGrantedOnRelease) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 1, 1);
    const Outcome o = c->acquire(1);
    ASSERT_TRUE(o.acquired);
    auto q = c->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    EXPECT_EQ(q.waiter->permits(), 1);
    EXPECT_EQ(q.waiter->deadline(), kNever);
    EXPECT_EQ(clock->pending(), 0u); // nothing in time can serve it: no timer
    clock->advance(100 * kSec);
    EXPECT_EQ(q.waiter->state(), Waiter::Pending);
    c->give_back(1, o.tag);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    const Outcome& got = q.waiter->outcome();
    EXPECT_TRUE(got.acquired);
    EXPECT_EQ(got.reason, Reason::None);
    EXPECT_EQ(got.retry_after, -1);
    EXPECT_EQ(got.permits, 1);
    EXPECT_EQ(c->available_permits(), 0);
}

TEST(Concurrency, OneReleaseServesSeveralWaiters) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 3, 3);
    ASSERT_TRUE(c->acquire(3).acquired);
    auto a = c->enqueue(1, -1);
    auto b = c->enqueue(2, -1);
    ASSERT_TRUE(a.waiter && b.waiter);
    c->give_back(3, 0);
    EXPECT_TRUE(a.waiter->outcome().acquired);
    EXPECT_TRUE(b.waiter->outcome().acquired);
    expect_stats(*c, 0, 0, 0, 3);
}

TEST(Concurrency, EnqueueGrantsAtOnceWhenPermitsAreFree) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 2, 0);
    const auto r = c->enqueue(2, -1);
    EXPECT_FALSE(r.waiter);
    EXPECT_TRUE(r.outcome.acquired);
    EXPECT_EQ(r.outcome.permits, 2);
    const auto full = c->enqueue(1, -1); // queue limit 0: rejected
    EXPECT_FALSE(full.waiter);
    EXPECT_EQ(full.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(full.outcome.retry_after, -1);
}

TEST(Concurrency, IdleDuration) {
    auto clock = make_clock();
    clock->advance(4 * kSec);
    auto c = make_limiter(clock, 2, 1);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(0)); // idle since construction
    clock->advance(3 * kSec);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(3 * kSec));
    EXPECT_TRUE(c->acquire(0).acquired);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(3 * kSec));

    ASSERT_TRUE(c->acquire(2).acquired);
    EXPECT_EQ(c->idle_duration(), std::nullopt);
    clock->advance(5 * kSec);
    c->give_back(1, 0);
    EXPECT_EQ(c->idle_duration(), std::nullopt); // not all released
    clock->advance(1 * kSec);
    c->give_back(1, 0);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(0));
    clock->advance(2 * kSec);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(2 * kSec));
}

TEST(Concurrency, IdleDurationIsNullWhileRequestsWait) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 1, 1);
    ASSERT_TRUE(c->acquire(1).acquired);
    auto q = c->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    c->give_back(1, 0); // straight to the waiter
    EXPECT_EQ(c->idle_duration(), std::nullopt);
    clock->advance(kSec);
    c->give_back(1, 0);
    EXPECT_EQ(c->idle_duration(), std::optional<Nanos>(0));
}

TEST(Concurrency, LargeAcquiresAndQueuesDoNotOverflow) {
    auto clock = make_clock();
    auto c = make_limiter(clock, kMaxPermits, kMaxPermits);
    const Outcome o = c->acquire(kMaxPermits);
    ASSERT_TRUE(o.acquired);
    auto q = c->enqueue(kMaxPermits, -1);
    ASSERT_TRUE(q.waiter);
    expect_stats(*c, 0, kMaxPermits, 0, 1);
    const auto full = c->enqueue(1, -1);
    EXPECT_FALSE(full.waiter);
    EXPECT_EQ(full.outcome.reason, Reason::QueueFull);
    c->give_back(kMaxPermits, o.tag);
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_TRUE(q.waiter->outcome().acquired);
    expect_stats(*c, 0, 0, 1, 2);
    c->give_back(kMaxPermits, 0);
    EXPECT_EQ(c->available_permits(), kMaxPermits);
}

TEST(Concurrency, CloseFailsWaitersAndLaterCallsThrow) {
    auto clock = make_clock();
    auto c = make_limiter(clock, 1, 2);
    const Outcome held = c->acquire(1);
    ASSERT_TRUE(held.acquired);
    auto q = c->enqueue(1, -1);
    ASSERT_TRUE(q.waiter);
    c->close();
    EXPECT_TRUE(c->closed());
    ASSERT_EQ(q.waiter->state(), Waiter::Completed);
    EXPECT_FALSE(q.waiter->outcome().acquired);
    EXPECT_EQ(q.waiter->outcome().reason, Reason::Closed);
    EXPECT_EQ(q.waiter->outcome().retry_after, -1);
    EXPECT_THROW(c->acquire(1), ClosedError);
    EXPECT_THROW(c->acquire(0), ClosedError);
    EXPECT_THROW(c->enqueue(1, -1), ClosedError);
    EXPECT_THROW(c->enqueue(0, -1), ClosedError);
    EXPECT_THROW(c->statistics(), ClosedError);
    EXPECT_THROW(c->available_permits(), ClosedError);
    EXPECT_THROW(c->acquire(2), std::invalid_argument);
    EXPECT_THROW(c->enqueue(-1, -1), std::invalid_argument);
    EXPECT_NO_THROW(c->give_back(1, held.tag)); // releasing after close is a silent no-op
    EXPECT_FALSE(c->cancel(*q.waiter));
    EXPECT_NO_THROW(c->close());
}
