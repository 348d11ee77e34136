// A named limiter of a shared-memory segment reconfigured in one process (mapping): every other
// takes the new amounts on at its next decision, a mapping opened later takes them over its own,
// and the state is kept as an in-process limiter keeps it.
#if defined(__linux__)

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "permits/shm_inspect.hpp"
#include "permits/shm_limiters.hpp"
#include "shm_support.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::shm;
using permits::testing::kSec;
using permits::testing::Named;
using permits::testing::take_all;
using permits::testing::Two;

namespace {

constexpr QueueOptions kNoQueue{0, QueueOrder::OldestFirst};
constexpr QueueOptions kQueue{100, QueueOrder::OldestFirst};

std::array<std::int64_t, 2> amounts_of(const Limiter& l) {
    std::int64_t a[2] = {};
    l.amounts(a);
    return {a[0], a[1]};
}

} // namespace

TEST(ShmReconfigure, ALimitLoweredInOneMappingHoldsInTheOtherAtItsNextDecision) {
    Two t("rc-fw");
    auto a = t.a->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    auto b = t.b->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(b->acquire(1).acquired);
    }
    a->reconfigure(FixedWindowRule(5, kSec), kNoQueue);
    EXPECT_EQ(take_all(*b), 1); // 4 of the new 5 were taken already
    EXPECT_EQ(b->max_permits(), 5);
    EXPECT_EQ(b->rule().permit_limit(), 5);
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a) + take_all(*b), 5);
    // Raised again: the difference at once, in both.
    b->reconfigure(FixedWindowRule(8, kSec), kNoQueue);
    EXPECT_EQ(take_all(*a), 3);
    EXPECT_EQ(a->max_permits(), 8);
}

TEST(ShmReconfigure, ATokenBucketsLimitAndRateReachEveryMapping) {
    Two t("rc-tb");
    auto a = t.a->token_bucket("tb", TokenBucketRule(10, 2, kSec), kNoQueue);
    auto b = t.b->token_bucket("tb", TokenBucketRule(10, 2, kSec), kNoQueue);
    a->reconfigure(TokenBucketRule(4, 1, kSec), kNoQueue);
    EXPECT_EQ(b->available_permits(), 4); // its tokens, up to the new limit
    EXPECT_EQ(amounts_of(*b), (std::array<std::int64_t, 2>{4, 1}));
    EXPECT_EQ(take_all(*b), 4);
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a), 1); // the new rate
}

TEST(ShmReconfigure, ASlidingWindowAndLogKeepTheirCountsUnderTheLimitAnotherMappingSets) {
    for (const std::int64_t segments : {std::int64_t{4}, std::int64_t{-8}}) {
        Two t("rc-sw");
        auto a = t.a->sliding_window("sw", 6, kSec, segments, kNoQueue);
        auto b = t.b->sliding_window("sw", 6, kSec, segments, kNoQueue);
        for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(a->acquire(1).acquired);
        }
        a->reconfigure(4, kSec, segments, kNoQueue);
        EXPECT_EQ(take_all(*b), 1) << segments;
        EXPECT_EQ(b->max_permits(), 4) << segments;
        t.clock->advance(2 * kSec);
        EXPECT_EQ(take_all(*b), 4) << segments;
    }
}

TEST(ShmReconfigure, ASlidingWindowCounterFollows) {
    Two t("rc-swc");
    auto a = t.a->sliding_window_counter("c", SlidingWindowCounterRule(6, kSec), kNoQueue);
    auto b = t.b->sliding_window_counter("c", SlidingWindowCounterRule(6, kSec), kNoQueue);
    a->reconfigure(SlidingWindowCounterRule(2, kSec), kNoQueue);
    EXPECT_EQ(take_all(*b), 2);
}

TEST(ShmReconfigure, AnotherWindowOrPeriodIsRefusedAndNothingChanges) {
    Two t("rc-shape");
    auto a = t.a->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    auto b = t.b->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    EXPECT_THROW(a->reconfigure(FixedWindowRule(5, 2 * kSec), kNoQueue), std::invalid_argument);
    EXPECT_EQ(take_all(*b), 10);
}

TEST(ShmReconfigure, AMappingOpenedLaterTakesTheSegmentsAmountsOverItsOwn) {
    Named n("rc-open");
    auto a = n.store->token_bucket("tb", TokenBucketRule(10, 2, kSec), kNoQueue);
    a->reconfigure(TokenBucketRule(3, 1, kSec), kNoQueue);
    auto later = n.reopen();
    // Asking with the amounts it was made with (a process whose configuration still says 10).
    auto b = later->token_bucket("tb", TokenBucketRule(10, 2, kSec), kNoQueue);
    EXPECT_EQ(amounts_of(*b), (std::array<std::int64_t, 2>{3, 1}));
    EXPECT_EQ(take_all(*b), 3);
    // Another period is still another limiter.
    EXPECT_THROW(later->token_bucket("tb", TokenBucketRule(3, 1, 2 * kSec), kNoQueue), std::invalid_argument);
}

TEST(ShmReconfigure, NeverReconfiguredOtherAmountsAreStillRefused) {
    Named n("rc-strict");
    n.store->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    auto later = n.reopen();
    EXPECT_THROW(later->fixed_window("fw", FixedWindowRule(5, kSec), kNoQueue), std::invalid_argument);
}

TEST(ShmReconfigure, AStateCountedUnderAHigherLimitIsNoDamageToAMappingOpenedAfterALowerOne) {
    Named n("rc-highest");
    auto a = n.store->fixed_window("fw", FixedWindowRule(5, kSec), kNoQueue);
    a->reconfigure(FixedWindowRule(20, kSec), kNoQueue);
    EXPECT_EQ(take_all(*a), 20);
    a->reconfigure(FixedWindowRule(5, kSec), kNoQueue);
    auto later = n.reopen();
    auto b = later->fixed_window("fw", FixedWindowRule(5, kSec), kNoQueue); // 20 counted: not refused
    EXPECT_EQ(take_all(*b), 0);
    // The inspector shows the limit that holds, and no damage.
    const auto info = describe(n.name, n.clock->now());
    ASSERT_EQ(info.slots.size(), 1U);
    EXPECT_EQ(info.slots[0].damage, "");
    EXPECT_EQ(info.slots[0].limit, 5);
    EXPECT_EQ(info.slots[0].params.at(0).value, 5);
    ASSERT_TRUE(info.slots[0].available.has_value());
    EXPECT_EQ(*info.slots[0].available, 0);
    n.clock->advance(kSec);
    EXPECT_EQ(take_all(*b), 5);
}

TEST(ShmReconfigure, ARequestQueuedInAnotherMappingThatTheNewLimitCanNeverServeFails) {
    Two t("rc-queue");
    auto a = t.a->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    auto b = t.b->fixed_window("fw", FixedWindowRule(10, kSec), kQueue);
    ASSERT_TRUE(b->acquire(10).acquired);
    auto big = b->enqueue(8, -1);
    auto small = b->enqueue(2, -1);
    ASSERT_NE(big.waiter, nullptr);
    ASSERT_NE(small.waiter, nullptr);
    a->reconfigure(FixedWindowRule(5, kSec), kNoQueue);
    EXPECT_TRUE(big.waiter->pending());   // b has not looked yet
    EXPECT_EQ(b->available_permits(), 0); // its next look takes the new limit on
    ASSERT_FALSE(big.waiter->pending());
    EXPECT_FALSE(big.waiter->outcome().acquired);
    EXPECT_EQ(big.waiter->outcome().reason, Reason::LimitReached);
    EXPECT_TRUE(small.waiter->pending());
    EXPECT_EQ(b->queue_options().queue_limit, 100); // each process's queue stays its own
    t.clock->advance(kSec);
    b->recheck();
    EXPECT_FALSE(small.waiter->pending());
    EXPECT_TRUE(small.waiter->outcome().acquired);
}

TEST(ShmReconfigure, TheGenerationGoesOnPastItsLastValueWithoutMeaningAsMade) {
    Two t("rc-wrap");
    auto a = t.a->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    auto b = t.b->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    NamedSlot* slot = t.a->segment().find("fw");
    ASSERT_NE(slot, nullptr);
    slot->generation.store(std::numeric_limits<std::uint32_t>::max() - 1);
    a->reconfigure(FixedWindowRule(7, kSec), kNoQueue);
    EXPECT_EQ(slot->generation.load(), std::numeric_limits<std::uint32_t>::max());
    a->reconfigure(FixedWindowRule(6, kSec), kNoQueue);
    EXPECT_EQ(slot->generation.load(), 2U);
    EXPECT_EQ(take_all(*b), 6);
}

TEST(ShmReconfigure, ABankWrittenByAWriterKilledBeforeItPublishedIsNeverRead) {
    Two t("rc-torn");
    auto a = t.a->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    a->reconfigure(FixedWindowRule(7, kSec), kNoQueue); // generation 1: bank [3, 4]
    NamedSlot& slot = t.b->segment().header().named[0];
    ASSERT_EQ(slot.generation.load(), 1U);
    slot.values[5] = -1; // the other bank, half written by a process killed there
    auto b = t.b->fixed_window("fw", FixedWindowRule(10, kSec), kNoQueue);
    EXPECT_EQ(take_all(*b), 7);
    b->reconfigure(FixedWindowRule(4, kSec), kNoQueue); // the next writer writes it whole
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a), 4);
}

#endif // __linux__
