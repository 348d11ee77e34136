// KeyedLimiter: a limiter per key, built on first use, dropped once idle (semantics.md 10, 11).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "permits/fixed_window.hpp"
#include "permits/keyed.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<KeyedLimiter> make_keyed(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                         Nanos idle_timeout, std::int64_t max_partitions = 0) {
    auto tmpl = KeyedTemplate::of<FixedWindow>(clock, FixedWindowRule(limit, 10 * kSec),
                                               QueueOptions{4, QueueOrder::OldestFirst});
    return std::make_shared<KeyedLimiter>(clock, tmpl, idle_timeout, max_partitions);
}

} // namespace

TEST(Keyed, EachKeyHasItsOwnLimit) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 2, 10 * kSec);
    EXPECT_TRUE(k->acquire("a", 2).outcome.acquired);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    EXPECT_TRUE(k->acquire("b", 2).outcome.acquired);
    EXPECT_EQ(k->size(), 2);
    const Statistics t = k->totals();
    EXPECT_EQ(t.total_successful_leases, 2);
    EXPECT_EQ(t.total_failed_leases, 1);
}

TEST(Keyed, AnIdlePartitionIsDroppedOnlyAfterTheIdleTimeout) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 5 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired); // window 0: full again at 10 s
    clock->advance(14 * kSec);
    EXPECT_EQ(k->size(), 1); // idle for 4 s
    clock->advance(1 * kSec);
    EXPECT_EQ(k->size(), 1); // idle for exactly 5 s: not yet
    clock->advance(1);
    EXPECT_EQ(k->size(), 0);                           // the timer dropped it, in advance()
    EXPECT_EQ(k->totals().total_successful_leases, 1); // its counts are kept
}

TEST(Keyed, EvictionNeverLoosensALimit) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 1 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    clock->advance(9 * kSec); // unused for 9 s, but its window still holds the grant
    EXPECT_EQ(k->size(), 1);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
}

TEST(Keyed, AQueuedRequestKeepsItsPartition) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 1 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    auto q = k->enqueue("a", 1, -1);
    ASSERT_TRUE(q.enqueued.waiter);
    clock->advance(10 * kSec); // the next window serves it
    EXPECT_TRUE(q.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(k->size(), 1);
    clock->advance(12 * kSec);
    EXPECT_EQ(k->size(), 0);
}

TEST(Keyed, AtTheBoundANewKeyTakesAnIdlePartitionsPlaceOrIsRefused) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 100 * kSec, 1);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    const Outcome refused = k->acquire("b", 1).outcome;
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.reason, Reason::PartitionLimit);
    EXPECT_EQ(refused.retry_after, -1);
    clock->advance(10 * kSec); // a is idle (however briefly): b may take its place
    EXPECT_TRUE(k->acquire("b", 1).outcome.acquired);
    EXPECT_EQ(k->size(), 1);
}

TEST(Keyed, ChurnLeavesNoPendingLooksBehind) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 1 * kSec, 1);
    for (int i = 0; i < 2000; ++i) {
        clock->advance(10 * kSec); // the previous key is idle
        ASSERT_TRUE(k->acquire(std::to_string(i), 1).outcome.acquired) << i;
    }
    EXPECT_EQ(k->size(), 1);
    clock->advance(100 * kSec);
    EXPECT_EQ(k->size(), 0);
}

TEST(Keyed, CloseFailsWaitersInEveryPartitionAndLaterCallsThrow) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1, 1 * kSec);
    std::vector<std::shared_ptr<Waiter>> waiters;
    for (const char* key : {"a", "b"}) {
        ASSERT_TRUE(k->acquire(key, 1).outcome.acquired);
        waiters.push_back(k->enqueue(key, 1, -1).enqueued.waiter);
    }
    k->close();
    for (auto& w : waiters) {
        EXPECT_EQ(w->outcome().reason, Reason::Closed);
    }
    EXPECT_THROW(k->acquire("a", 1), ClosedError);
}

TEST(Keyed, ManyThreadsOnFewKeysGetExactPerKeyTotals) {
    auto clock = make_clock();
    auto k = make_keyed(clock, 1000, 100 * kSec);
    std::atomic<int> granted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 2000; ++i) {
                granted += k->acquire(std::string(1, static_cast<char>('a' + (i + t) % 3)), 1).outcome.acquired ? 1 : 0;
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    EXPECT_EQ(granted.load(), 3000); // exactly the limit of each of the 3 keys
    EXPECT_EQ(k->totals().total_failed_leases, 8000 - 3000);
}
