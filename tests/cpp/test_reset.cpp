// Limiter::reset() and PerKeyLimiter::reset(key): a time-based limit full again at once, its queue
// served from it, and nothing granted before it given back into it; concurrency keeps what is held.
#include <gtest/gtest.h>

#include <memory>
#include <string>
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

/// Every time-based kind, 10 permits a second (the sliding window in 4 segments, the log in 4).
std::vector<std::pair<std::string, std::shared_ptr<Limiter>>> timed(const std::shared_ptr<ManualClock>& clock) {
    return {
        {"token bucket", std::make_shared<TokenBucket>(clock, 10, 10, kSec, kQueue, false)},
        {"fixed window", std::make_shared<FixedWindow>(clock, 10, kSec, kQueue, false)},
        {"sliding window", std::make_shared<SlidingWindow>(clock, 10, kSec, 4, kQueue, false)},
        {"sliding log", std::make_shared<SlidingWindow>(clock, 10, kSec, -4, kQueue, false)},
        {"sliding window counter", std::make_shared<SlidingWindowCounter>(clock, 10, kSec, kQueue, false)},
    };
}

} // namespace

TEST(Reset, ATimedLimiterHasItsWholeLimitAgainAndNoMore) {
    auto clock = make_clock();
    clock->advance(3 * kSec + 100 * kMs); // not at the first window: a reset is no new limiter
    for (auto& [name, l] : timed(clock)) {
        std::vector<Outcome> before;
        for (int i = 0; i < 10; ++i) {
            before.push_back(l->acquire(1));
            ASSERT_TRUE(before.back().acquired) << name;
        }
        ASSERT_FALSE(l->acquire(1).acquired) << name;
        ASSERT_TRUE(l->reset()) << name;
        EXPECT_EQ(l->available_permits(), 10) << name;
        std::vector<Outcome> after;
        for (int i = 0; i < 10; ++i) {
            after.push_back(l->acquire(1));
            ASSERT_TRUE(after.back().acquired) << name;
        }
        for (const Outcome& o : before) {
            l->give_back(1, o.tag); // granted before the reset: nothing comes back
        }
        EXPECT_EQ(l->available_permits(), 0) << name;
        l->give_back(1, after[0].tag); // granted in the reset's window: nothing either (never loosens)
        EXPECT_FALSE(l->acquire(1).acquired) << name;
    }
}

TEST(Reset, ASlidingWindowForgetsItsOlderSegmentsToo) {
    auto clock = make_clock();
    for (const std::int64_t segments : {4, -4}) {
        auto l = std::make_shared<SlidingWindow>(clock, 10, kSec, segments, kQueue, false);
        ASSERT_TRUE(l->acquire(6).acquired);
        clock->advance(300 * kMs); // the 6 in an older segment, still in the window
        ASSERT_TRUE(l->acquire(4).acquired);
        ASSERT_TRUE(l->reset());
        clock->advance(300 * kMs); // past the head's segment: the ring is read again
        EXPECT_EQ(l->available_permits(), 10) << segments;
        EXPECT_TRUE(l->acquire(10).acquired) << segments;
    }
}

TEST(Reset, TheQueueIsServedFromTheNewLimit) {
    auto clock = make_clock();
    for (auto& [name, l] : timed(clock)) {
        ASSERT_TRUE(l->acquire(10).acquired) << name;
        auto a = l->enqueue(6, -1);
        auto b = l->enqueue(6, -1);
        ASSERT_TRUE(a.waiter && b.waiter) << name;
        ASSERT_TRUE(l->reset()) << name;
        EXPECT_EQ(a.waiter->state(), Waiter::Completed) << name;
        EXPECT_TRUE(a.waiter->outcome().acquired) << name;
        EXPECT_TRUE(b.waiter->pending()) << name; // 4 left: not its 6
        EXPECT_EQ(l->queued_requests(), 1) << name;
        ASSERT_TRUE(l->cancel(*b.waiter)) << name;
    }
}

TEST(Reset, ConcurrencyKeepsWhatIsHeld) {
    auto clock = make_clock();
    auto l = std::make_shared<Concurrency>(clock, 2, kQueue);
    const Outcome held = l->acquire(2);
    ASSERT_TRUE(held.acquired);
    EXPECT_FALSE(l->reset());
    EXPECT_EQ(l->available_permits(), 0);
    l->give_back(2, held.tag);
    EXPECT_EQ(l->available_permits(), 2);
}

TEST(Reset, AClosedLimiterIsNotReset) {
    auto clock = make_clock();
    auto l = std::make_shared<FixedWindow>(clock, 1, kSec, kQueue, false);
    l->close();
    EXPECT_FALSE(l->reset());
}

TEST(Reset, APerKeyRecordStartsAfterTheResetAndOtherKeysKeepTheirs) {
    auto clock = make_clock();
    auto keyed = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(10, kSec), QueueOptions{}), kSec, 0);
    EXPECT_FALSE(keyed->reset("a")); // absent: made full at its first request
    EXPECT_EQ(keyed->size(), 0);
    const Outcome before = keyed->acquire("a", 10).outcome;
    ASSERT_TRUE(before.acquired);
    ASSERT_TRUE(keyed->acquire("b", 10).outcome.acquired);
    ASSERT_TRUE(keyed->reset("a")); // at the instant of the grant: its window is still not the new state's
    ASSERT_TRUE(keyed->acquire("a", 10).outcome.acquired);
    keyed->give_back("a", 10, before.tag);
    EXPECT_FALSE(keyed->acquire("a", 1).outcome.acquired);
    EXPECT_FALSE(keyed->acquire("b", 1).outcome.acquired);
    const auto stats = keyed->statistics("a");
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->total_successful_leases, 2);
    EXPECT_EQ(stats->total_failed_leases, 1);
    keyed->check_invariants();
}

TEST(Reset, APerKeySlidingWindowRecordStartsEmpty) {
    auto clock = make_clock();
    auto keyed = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::sliding_window(clock, 10, kSec, 4, QueueOptions{}), kSec, 0);
    ASSERT_TRUE(keyed->acquire("a", 6).outcome.acquired);
    clock->advance(300 * kMs);
    ASSERT_TRUE(keyed->acquire("a", 4).outcome.acquired);
    ASSERT_TRUE(keyed->reset("a"));
    clock->advance(300 * kMs);
    EXPECT_TRUE(keyed->acquire("a", 10).outcome.acquired);
    EXPECT_FALSE(keyed->acquire("a", 1).outcome.acquired);
}

TEST(Reset, APromotedKeysQueueIsServedAndItsConcurrencyKeepsWhatIsHeld) {
    auto clock = make_clock();
    auto keyed = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(10, kSec), kQueue), kSec, 0);
    ASSERT_TRUE(keyed->acquire("a", 10).outcome.acquired);
    auto q = keyed->enqueue("a", 4, -1); // queued: the key is a full limiter now
    ASSERT_TRUE(q.enqueued.waiter);
    ASSERT_TRUE(keyed->reset("a"));
    EXPECT_TRUE(q.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(keyed->statistics("a")->current_available_permits, 6);

    auto jobs = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(1), kQueue), kSec, 0);
    const Outcome held = jobs->acquire("a", 1).outcome;
    ASSERT_TRUE(held.acquired);
    EXPECT_FALSE(jobs->reset("a"));
    EXPECT_FALSE(jobs->acquire("a", 1).outcome.acquired);
    jobs->give_back("a", 1, held.tag);
    EXPECT_TRUE(jobs->acquire("a", 1).outcome.acquired);
}
