// RuleLimiter::reconfigure: a new limit from now on, the state kept (what is taken stays taken, a
// lower limit holds as permits come back), the queue trimmed to the new queue limit and served.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {
constexpr QueueOptions kQueue{100, QueueOrder::OldestFirst};
} // namespace

TEST(Reconfigure, AFixedWindowsLowerLimitHoldsWhatWasTakenAndTheNextWindowGetsTheNewLimit) {
    auto clock = make_clock();
    FixedWindow l(clock, 10, kSec, kQueue, false);
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(l.acquire(1).acquired);
    }
    l.reconfigure(FixedWindowRule(5, kSec), kQueue);
    EXPECT_EQ(l.permit_limit(), 5);
    EXPECT_EQ(l.available_permits(), 0); // 8 taken, more than the new limit: none left
    const Outcome refused = l.acquire(1);
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.retry_after, kSec); // the next window
    clock->advance(kSec);
    EXPECT_EQ(take_all(l), 5);
    EXPECT_THROW(l.acquire(6), std::invalid_argument); // beyond the new limit, as at construction
}

TEST(Reconfigure, AFixedWindowsHigherLimitAddsTheDifferenceNow) {
    auto clock = make_clock();
    FixedWindow l(clock, 10, kSec, kQueue, false);
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(l.acquire(1).acquired);
    }
    l.reconfigure(FixedWindowRule(20, kSec), kQueue);
    EXPECT_EQ(l.available_permits(), 12);
    EXPECT_EQ(take_all(l), 12);
    clock->advance(kSec);
    EXPECT_EQ(take_all(l), 20);
}

TEST(Reconfigure, ATokenBucketHoldsNoMoreThanItsNewTokenLimitAndRefillsAtItsNewRate) {
    auto clock = make_clock();
    TokenBucket l(clock, 10, 2, kSec, kQueue, false);
    l.reconfigure(TokenBucketRule(4, 1, kSec), kQueue); // full: 10 tokens, the bucket holds 4
    EXPECT_EQ(l.available_permits(), 4);
    EXPECT_EQ(take_all(l), 4);
    clock->advance(kSec);
    EXPECT_EQ(take_all(l), 1); // the new rate: 1 a period
    l.reconfigure(TokenBucketRule(30, 10, kSec), kQueue);
    EXPECT_EQ(l.available_permits(), 0); // raising adds nothing now: the bucket fills at its rate
    clock->advance(2 * kSec);
    EXPECT_EQ(take_all(l), 20);
    clock->advance(10 * kSec);
    EXPECT_EQ(l.available_permits(), 30);
}

TEST(Reconfigure, ASlidingWindowCounterKeepsItsCountsUnderTheNewLimit) {
    auto clock = make_clock();
    SlidingWindowCounter l(clock, 10, kSec, kQueue, false);
    EXPECT_EQ(take_all(l), 10);
    clock->advance(kSec + kSec / 2); // half the previous window still counts: 5
    l.reconfigure(SlidingWindowCounterRule(4, kSec), kQueue);
    EXPECT_EQ(l.available_permits(), 0);
    clock->advance(kSec / 4); // a quarter of it: 2.5
    EXPECT_EQ(take_all(l), 1);
    l.reconfigure(SlidingWindowCounterRule(20, kSec), kQueue);
    EXPECT_EQ(take_all(l), 16); // 20 - 2.5 - 1, rounded down
}

TEST(Reconfigure, ASlidingWindowAndLogKeepTheirCountsUntilTheyLeaveTheWindow) {
    for (const std::int64_t segments : {4, -4}) { // the window in 4 segments; the log
        auto clock = make_clock();
        SlidingWindow l(clock, 10, kSec, segments, kQueue, false);
        for (int i = 0; i < 8; ++i) {
            ASSERT_TRUE(l.acquire(1).acquired) << segments; // 8 in the first segment
        }
        clock->advance(kSec / 4 + 1);
        ASSERT_EQ(take_all(l), 2) << segments; // 2 in the second
        l.reconfigure(5, kSec, segments, kQueue);
        EXPECT_EQ(l.permit_limit(), 5);
        EXPECT_EQ(l.available_permits(), 0) << segments;
        const Outcome refused = l.acquire(1);
        EXPECT_FALSE(refused.acquired) << segments;
        clock->advance(kSec * 3 / 4); // the first segment's 8 have left: 2 in the window
        EXPECT_EQ(take_all(l), 3) << segments;
        clock->advance(kSec + kSec / 4); // (the log: a permit comes back a window and 1 ns after it was taken)
        EXPECT_EQ(take_all(l), 5) << segments;
        l.reconfigure(12, kSec, segments, kQueue);
        EXPECT_EQ(take_all(l), 7) << segments; // the difference, at once
        EXPECT_THROW(l.reconfigure(12, 2 * kSec, segments, kQueue), std::invalid_argument);
        EXPECT_THROW(l.reconfigure(12, kSec, -segments, kQueue), std::invalid_argument);
        EXPECT_THROW(l.reconfigure(12, kSec, 8, kQueue), std::invalid_argument);
        EXPECT_THROW(l.acquire(13), std::invalid_argument);
    }
}

TEST(Reconfigure, ConcurrencyKeepsWhatIsHeldAndAReleaseGivesBackExactlyWhatItTook) {
    auto clock = make_clock();
    Concurrency l(clock, 4, kQueue);
    std::vector<Outcome> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(l.acquire(1));
        ASSERT_TRUE(held.back().acquired);
    }
    l.reconfigure(ConcurrencyRule(2), kQueue); // 3 held, limit 2
    EXPECT_EQ(l.available_permits(), 0);
    EXPECT_FALSE(l.full_at() != kNever);
    l.give_back(1, held[0].tag);
    EXPECT_EQ(l.available_permits(), 0); // 2 held: at the limit
    l.give_back(1, held[1].tag);
    EXPECT_EQ(l.available_permits(), 1);
    l.reconfigure(ConcurrencyRule(6), kQueue); // 1 held
    EXPECT_EQ(l.available_permits(), 5);
    l.give_back(1, held[2].tag);
    EXPECT_EQ(l.available_permits(), 6);
    EXPECT_NE(l.full_at(), kNever); // idle again
    EXPECT_EQ(take_all(l), 6);
}

TEST(Reconfigure, AHigherLimitServesTheQueueAtOnce) {
    auto clock = make_clock();
    Concurrency l(clock, 1, kQueue);
    ASSERT_TRUE(l.acquire(1).acquired);
    auto first = l.enqueue(1, -1).waiter;
    auto second = l.enqueue(1, -1).waiter;
    ASSERT_TRUE(first && second);
    l.reconfigure(ConcurrencyRule(2), kQueue);
    EXPECT_TRUE(first->outcome().acquired);
    EXPECT_TRUE(second->pending());
    l.reconfigure(ConcurrencyRule(3), kQueue);
    EXPECT_TRUE(second->outcome().acquired);
    EXPECT_EQ(l.statistics().current_queued_count, 0);
}

TEST(Reconfigure, AQueueBeyondItsNewLimitFailsTheRequestsServedLast) {
    for (QueueOrder order : {QueueOrder::OldestFirst, QueueOrder::NewestFirst}) {
        auto clock = make_clock();
        auto made = std::make_shared<FixedWindow>(clock, 1, kSec, QueueOptions{10, order}, false); // (timers: shared)
        FixedWindow& l = *made;
        ASSERT_TRUE(l.acquire(1).acquired);
        std::vector<std::shared_ptr<Waiter>> queued;
        for (int i = 0; i < 4; ++i) {
            queued.push_back(l.enqueue(1, -1).waiter);
            ASSERT_TRUE(queued.back());
        }
        l.reconfigure(FixedWindowRule(1, kSec), {2, order});
        const bool oldest = order == QueueOrder::OldestFirst;
        // Kept: the two served first (the oldest, or the newest); the other two fail.
        for (int i = 0; i < 4; ++i) {
            const bool kept = oldest ? i < 2 : i >= 2;
            ASSERT_EQ(queued[i]->pending(), kept) << i;
            if (!kept) {
                EXPECT_EQ(queued[i]->outcome().reason, Reason::QueueFull) << i;
                EXPECT_GT(queued[i]->outcome().retry_after, 0) << i;
            }
        }
        EXPECT_EQ(l.statistics().current_queued_count, 2);
        EXPECT_EQ(l.statistics().total_failed_leases, 2);
        EXPECT_EQ(l.queue_options().queue_limit, 2);
        clock->advance(kSec);
        EXPECT_TRUE(queued[oldest ? 0 : 3]->outcome().acquired);
    }
}

TEST(Reconfigure, AQueuedRequestLargerThanTheNewLimitFailsAtOnce) {
    auto clock = make_clock();
    auto made = std::make_shared<FixedWindow>(clock, 10, kSec, kQueue, false); // (timers: shared)
    FixedWindow& l = *made;
    ASSERT_TRUE(l.acquire(10).acquired);
    auto big = l.enqueue(8, -1).waiter;
    auto small = l.enqueue(2, -1).waiter;
    l.reconfigure(FixedWindowRule(5, kSec), kQueue);
    EXPECT_EQ(big->outcome().reason, Reason::LimitReached); // it could never be served
    EXPECT_EQ(big->outcome().retry_after, -1);
    EXPECT_TRUE(small->pending());
    clock->advance(kSec);
    EXPECT_TRUE(small->outcome().acquired);
}

TEST(Reconfigure, TheQueueOrderChangesWhoIsServedNext) {
    auto clock = make_clock();
    Concurrency l(clock, 1, kQueue);
    const Outcome held = l.acquire(1);
    auto older = l.enqueue(1, -1).waiter;
    auto newer = l.enqueue(1, -1).waiter;
    l.reconfigure(ConcurrencyRule(1), {100, QueueOrder::NewestFirst});
    l.give_back(1, held.tag);
    EXPECT_TRUE(newer->outcome().acquired);
    EXPECT_TRUE(older->pending());
}

TEST(Reconfigure, AnotherWindowOrPeriodIsRefusedAndChangesNothing) {
    auto clock = make_clock();
    FixedWindow fw(clock, 10, kSec, kQueue, false);
    EXPECT_THROW(fw.reconfigure(FixedWindowRule(10, 2 * kSec), kQueue), std::invalid_argument);
    TokenBucket tb(clock, 10, 1, kSec, kQueue, false);
    EXPECT_THROW(tb.reconfigure(TokenBucketRule(10, 1, 2 * kSec), kQueue), std::invalid_argument);
    SlidingWindowCounter swc(clock, 10, kSec, kQueue, false);
    EXPECT_THROW(swc.reconfigure(SlidingWindowCounterRule(10, 2 * kSec), kQueue), std::invalid_argument);
    EXPECT_THROW(fw.reconfigure(FixedWindowRule(10, kSec), {-1, QueueOrder::OldestFirst}), std::invalid_argument);
    EXPECT_EQ(fw.window(), kSec);
    EXPECT_EQ(fw.queue_options().queue_limit, 100);
}

TEST(Reconfigure, AClosedLimiterRefuses) {
    auto clock = make_clock();
    Concurrency l(clock, 1, kQueue);
    l.close();
    EXPECT_THROW(l.reconfigure(ConcurrencyRule(2), kQueue), ClosedError);
}

TEST(Reconfigure, ReleasesRacingLimitChangesNeitherLoseNorMakePermits) {
    auto clock = make_clock();
    auto l = std::make_shared<Concurrency>(clock, 4, QueueOptions{});
    std::atomic<bool> stop{false};
    std::atomic<int> over{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 20000; ++i) {
                const Outcome o = l->acquire(1);
                if (o.acquired) {
                    over += l->available_permits() > 8 ? 1 : 0; // never more than the highest limit
                    l->give_back(1, o.tag);
                }
            }
        });
    }
    std::thread changer([&] {
        for (int i = 0; !stop.load(); ++i) {
            l->reconfigure(ConcurrencyRule(i % 2 == 0 ? 2 : 8), QueueOptions{});
        }
    });
    for (auto& th : threads) {
        th.join();
    }
    stop = true;
    changer.join();
    l->reconfigure(ConcurrencyRule(5), QueueOptions{});
    EXPECT_EQ(over.load(), 0);
    EXPECT_EQ(l->available_permits(), 5); // everything released: exactly the limit, none lost or made
    EXPECT_NE(l->full_at(), kNever);
}

// ---- PerKeyLimiter::reconfigure: every key, present and future

namespace {
std::shared_ptr<PerKeyLimiter> fixed_per_key(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                             QueueOptions queue = kQueue) {
    return std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(limit, kSec), queue), 100 * kSec, 0);
}

int take_all(PerKeyLimiter& k, const char* key) {
    int granted = 0;
    while (k.acquire(key, 1).outcome.acquired) {
        ++granted;
    }
    return granted;
}
} // namespace

TEST(ReconfigurePerKey, EveryKeyPresentAndFutureHasTheNewLimitAndKeepsWhatItTook) {
    auto clock = make_clock();
    auto k = fixed_per_key(clock, 10);
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    }
    ASSERT_TRUE(k->acquire("b", 1).outcome.acquired);
    k->reconfigure(PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(5, kSec), kQueue));
    EXPECT_EQ(take_all(*k, "a"), 0); // 8 taken: more than 5
    EXPECT_EQ(take_all(*k, "b"), 4);
    EXPECT_EQ(take_all(*k, "c"), 5); // a key made since
    EXPECT_THROW(k->acquire("d", 6), std::invalid_argument);
    clock->advance(kSec);
    EXPECT_EQ(take_all(*k, "a"), 5);
    k->reconfigure(PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(7, kSec), kQueue));
    EXPECT_EQ(take_all(*k, "a"), 2); // the difference, at once
}

TEST(ReconfigurePerKey, AConcurrencyKeysReleasesGiveBackExactlyWhatTheyTook) {
    auto clock = make_clock();
    auto k = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(4), QueueOptions{}), 100 * kSec, 0);
    std::vector<Outcome> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(k->acquire("a", 1).outcome);
        ASSERT_TRUE(held.back().acquired);
    }
    k->reconfigure(PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(2), QueueOptions{}));
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 0);
    for (const Outcome& o : held) {
        k->give_back("a", 1, o.tag);
    }
    EXPECT_EQ(k->statistics("a")->current_available_permits, 2);
    EXPECT_EQ(take_all(*k, "fresh"), 2);
}

TEST(ReconfigurePerKey, AKeysQueueIsServedFromTheNewLimitAndTrimmedToTheNewQueueLimit) {
    auto clock = make_clock();
    auto k = fixed_per_key(clock, 1);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    auto first = k->enqueue("a", 1, -1).enqueued.waiter;
    auto second = k->enqueue("a", 1, -1).enqueued.waiter;
    auto third = k->enqueue("a", 1, -1).enqueued.waiter;
    ASSERT_TRUE(first && second && third);
    k->reconfigure(
        PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(2, kSec), QueueOptions{1, QueueOrder::OldestFirst}));
    EXPECT_TRUE(first->outcome().acquired); // the raised limit serves it at once
    EXPECT_TRUE(second->pending());         // kept: within the new queue limit of 1
    EXPECT_EQ(third->outcome().reason, Reason::QueueFull);
    // A key promoted since (its request queues) gets the new queue options too.
    ASSERT_TRUE(k->acquire("b", 2).outcome.acquired);
    EXPECT_TRUE(k->enqueue("b", 1, -1).enqueued.waiter);
    EXPECT_EQ(k->enqueue("b", 1, -1).enqueued.outcome.reason, Reason::QueueFull);
    clock->advance(kSec);
    EXPECT_TRUE(second->outcome().acquired);
}

TEST(ReconfigurePerKey, ACompactSlidingWindowKeyKeepsItsCounts) {
    for (const std::int64_t segments : {4, -4}) {
        auto clock = make_clock();
        auto k = std::make_shared<PerKeyLimiter>(
            clock, PerKeyTemplate::sliding_window(clock, 10, kSec, segments, kQueue), 100 * kSec, 0);
        for (int i = 0; i < 8; ++i) {
            ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
        }
        k->reconfigure(PerKeyTemplate::sliding_window(clock, 5, kSec, segments, kQueue));
        EXPECT_EQ(take_all(*k, "a"), 0) << segments;
        EXPECT_EQ(take_all(*k, "b"), 5) << segments;
        clock->advance(kSec + kSec / 4);
        EXPECT_EQ(take_all(*k, "a"), 5) << segments;
    }
}

TEST(ReconfigurePerKey, AnotherKindOrWindowOrAHandMadeTemplateIsRefused) {
    auto clock = make_clock();
    auto k = fixed_per_key(clock, 10);
    EXPECT_THROW(k->reconfigure(PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(10, 2 * kSec), kQueue)),
                 std::invalid_argument);
    EXPECT_THROW(k->reconfigure(PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(10), kQueue)),
                 std::invalid_argument);
    EXPECT_THROW(k->reconfigure(PerKeyTemplate::sliding_window(clock, 10, kSec, 4, kQueue)), std::invalid_argument);
    EXPECT_EQ(take_all(*k, "a"), 10); // nothing changed
    auto make = [clock](Nanos, Pair) { return std::make_shared<FixedWindow>(clock, 2, kSec, QueueOptions{}, false); };
    PerKeyTemplate made_by_hand;
    made_by_hand.promote = make;
    auto by_hand = std::make_shared<PerKeyLimiter>(clock, made_by_hand, kSec, 0);
    EXPECT_THROW(by_hand->reconfigure(PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(3, kSec), kQueue)),
                 std::logic_error);
    k->close();
    EXPECT_THROW(k->reconfigure(PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(3, kSec), kQueue)), ClosedError);
}
