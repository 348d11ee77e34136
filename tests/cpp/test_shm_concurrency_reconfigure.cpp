// A named concurrency limiter of a shared-memory segment reconfigured in one process (mapping): the
// limit and the available permits change together in one swap of the state, every other mapping
// takes the limit on at its next decision, one opened later takes it over its own, what is held
// stays held (a lower limit holds as permits come back), and a dead holder's permits all come back.
#if defined(__linux__)

#include <gtest/gtest.h>

#include <cstdint>
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
constexpr Nanos kHour = 3600 * kSec;

} // namespace

TEST(ShmConcurrencyReconfigure, ARaiseInOneMappingFreesTheDifferenceInTheOther) {
    Two t("rcc-raise");
    auto a = t.a->concurrency("c", 2, kHour, kNoQueue);
    auto b = t.b->concurrency("c", 2, kHour, kNoQueue);
    const Outcome held = b->acquire(2);
    ASSERT_TRUE(held.acquired);
    a->reconfigure_limit(4, kNoQueue);
    EXPECT_EQ(b->available_permits(), 2);
    EXPECT_EQ(take_all(*b), 2);
    EXPECT_EQ(b->max_permits(), 4);
    EXPECT_EQ(a->max_permits(), 4);
    b->give_back(2, held.tag);
    EXPECT_EQ(a->available_permits(), 2); // (b's two others still held)
}

TEST(ShmConcurrencyReconfigure, ALoweredLimitHoldsAsTheHeldPermitsComeBack) {
    Two t("rcc-lower");
    auto a = t.a->concurrency("c", 4, kHour, kNoQueue);
    auto b = t.b->concurrency("c", 4, kHour, kNoQueue);
    const Outcome three = b->acquire(3);
    const Outcome one = b->acquire(1);
    ASSERT_TRUE(three.acquired && one.acquired);
    a->reconfigure_limit(2, kNoQueue); // 4 held, 2 allowed: 2 below zero available
    EXPECT_EQ(b->available_permits(), 0);
    EXPECT_FALSE(a->acquire(1).acquired);
    EXPECT_THROW(b->acquire(3), std::invalid_argument); // more than the limit, as any limiter
    b->give_back(3, three.tag);                         // 1 held of 2
    EXPECT_EQ(take_all(*a), 1);
    EXPECT_FALSE(b->acquire(1).acquired);
    b->give_back(1, one.tag);
    EXPECT_EQ(a->available_permits(), 1); // (a's one still held)
}

TEST(ShmConcurrencyReconfigure, AMappingOpenedLaterTakesTheLimitOverItsOwnAndNoDamageIsSeen) {
    Named n("rcc-later");
    auto a = n.store->concurrency("c", 4, kHour, kNoQueue);
    const Outcome held = a->acquire(4);
    ASSERT_TRUE(held.acquired);
    // Never changed: another limit is refused, as it always was.
    EXPECT_THROW(n.reopen()->concurrency("c", 3, kHour, kNoQueue), std::invalid_argument);
    a->reconfigure_limit(1, kNoQueue); // 4 held of 1
    for (const std::int64_t own : {std::int64_t{4}, std::int64_t{1}, std::int64_t{9}}) {
        auto later = n.reopen()->concurrency("c", own, kHour, kNoQueue); // (4 held: sound, not damaged)
        EXPECT_EQ(later->max_permits(), 1) << own;
        EXPECT_EQ(later->available_permits(), 0) << own;
    }
    // Its lease_ttl stays: another is refused still.
    EXPECT_THROW(n.reopen()->concurrency("c", 1, 2 * kHour, kNoQueue), std::invalid_argument);
    const auto info = describe(n.name, n.clock->now());
    ASSERT_EQ(info.slots.size(), 1U);
    EXPECT_EQ(info.slots[0].damage, "");
    EXPECT_EQ(info.slots[0].limit, 1); // the inspector shows the limit that holds
    EXPECT_EQ(*info.slots[0].available, 0);
    a->give_back(4, held.tag);
    auto later = n.reopen()->concurrency("c", 4, kHour, kNoQueue);
    EXPECT_EQ(take_all(*later), 1);
}

TEST(ShmConcurrencyReconfigure, AChangeLeftPendingByAWriterKilledAfterItsSwapIsSettledByTheNext) {
    Two t("rcc-pending");
    auto a = t.a->concurrency("c", 4, kHour, kNoQueue);
    auto b = t.b->concurrency("c", 4, kHour, kNoQueue);
    ASSERT_TRUE(a->acquire(1).acquired);
    // A writer raised it to 6 and died after its swap: the bank of generation 1 written, the state
    // {seq + 1, the limit's change, available + 2, from generation 0} swapped in, nothing settled.
    NamedSlot* found = t.a->segment().find("c");
    ASSERT_NE(found, nullptr);
    NamedSlot& slot = *found;
    slot.values[3] = 6;
    slot.values[7] = 6;
    auto* state = t.a->segment().at<AtomicPair>(slot.offset);
    Pair s = state->load();
    const auto seq = static_cast<std::uint64_t>(s.a) >> 16;
    const Pair pending{static_cast<std::int64_t>(((seq + 1) << 16) | 0xffffU),
                       static_cast<std::int64_t>(static_cast<std::uint64_t>(3 + 2) << 32)};
    ASSERT_TRUE(state->compare_exchange(s, pending));
    ASSERT_EQ(slot.generation.load(), 0U);
    ASSERT_TRUE(b->acquire(1).acquired); // its take settles it first
    EXPECT_EQ(slot.generation.load(), 1U);
    EXPECT_EQ(take_all(*b), 4); // 6, of which 2 held
    EXPECT_EQ(b->max_permits(), 6);
    EXPECT_EQ(a->available_permits(), 0); // a's next look takes it on
    EXPECT_EQ(a->max_permits(), 6);
}

TEST(ShmConcurrencyReconfigure, AStateWordNamingAChangeNoWriterMadeIsClearedAndTheLimitKept) {
    Two t("rcc-damaged");
    auto a = t.a->concurrency("c", 4, kHour, kNoQueue);
    ASSERT_TRUE(a->acquire(1).acquired);
    // Damage: a state word naming a change of the limit from generation 0, whose bank holds none.
    NamedSlot* found = t.a->segment().find("c");
    ASSERT_NE(found, nullptr);
    NamedSlot& slot = *found;
    auto* state = t.a->segment().at<AtomicPair>(slot.offset);
    Pair s = state->load();
    const auto seq = static_cast<std::uint64_t>(s.a) >> 16;
    const Pair damaged{static_cast<std::int64_t>(((seq + 1) << 16) | 0xffffU),
                       static_cast<std::int64_t>(static_cast<std::uint64_t>(3) << 32)};
    ASSERT_TRUE(state->compare_exchange(s, damaged));
    auto b = t.b->concurrency("c", 4, kHour, kNoQueue);
    EXPECT_EQ(slot.generation.load(), 0U);
    EXPECT_EQ(take_all(*b), 3);
    EXPECT_EQ(b->max_permits(), 4);
}

TEST(ShmConcurrencyReconfigure, AQueuedRequestIsServedByARaiseAndFailsUnderALimitThatCanNeverServeIt) {
    Two t("rcc-queue");
    auto a = t.a->concurrency("c", 2, kHour, kNoQueue);
    auto b = t.b->concurrency("c", 2, kHour, kQueue);
    ASSERT_TRUE(a->acquire(2).acquired);
    auto small = b->enqueue(1, -1);
    auto big = b->enqueue(2, -1);
    ASSERT_NE(small.waiter, nullptr);
    ASSERT_NE(big.waiter, nullptr);
    a->reconfigure_limit(3, kNoQueue);
    EXPECT_TRUE(small.waiter->pending()); // b has not looked yet
    EXPECT_EQ(b->available_permits(), 0); // its next look takes the raise on and serves its queue
    ASSERT_FALSE(small.waiter->pending());
    EXPECT_TRUE(small.waiter->outcome().acquired);
    EXPECT_TRUE(big.waiter->pending());
    a->reconfigure_limit(1, kNoQueue);
    EXPECT_EQ(b->available_permits(), 0);
    ASSERT_FALSE(big.waiter->pending());
    EXPECT_EQ(big.waiter->outcome().reason, Reason::LimitReached);
    EXPECT_EQ(b->queue_options().queue_limit, 100); // each process's queue stays its own
}

TEST(ShmConcurrencyReconfigure, ADeadHoldersPermitsAllComeBackUnderARaisedLimit) {
    Two t("rcc-dead");
    auto a = t.a->concurrency("c", 2, kHour, kNoQueue);
    a->reconfigure_limit(6, kNoQueue);
    ASSERT_TRUE(a->acquire(5).acquired); // more than the limit it was made with
    Segment& seg = t.a->segment();
    Holding h;
    ASSERT_TRUE(seg.current(h));
    HolderSlot& holder = seg.header().holders[h.index];
    bool reclaimed = false;
    for (int i = 0; i < 100 && !reclaimed; ++i) { // (the watcher may renew the heartbeat meanwhile)
        holder.pid_ns.store(1);
        holder.heartbeat.store(monotonic_now() - 10 * kSec);
        reclaimed = seg.reclaim_holder(h.index, kSec);
    }
    ASSERT_TRUE(reclaimed);
    auto b = t.b->concurrency("c", 2, kHour, kNoQueue);
    EXPECT_EQ(b->available_permits(), 6);
}

#endif // __linux__
