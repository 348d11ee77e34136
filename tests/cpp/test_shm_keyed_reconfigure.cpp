// A shared per-key table reconfigured in one process (mapping): every key, present and future, of
// every mapping counts with the new amounts from its next use; a mapping opened later takes them over
// its own; what each key took stays taken; each process's queues stay its own.
#if defined(__linux__)

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "permits/shm_inspect.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_keyed.hpp"
#include "permits/shm_limiters.hpp"
#include "shm_support.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::shm;
using permits::testing::kSec;
using permits::testing::Named;
using permits::testing::Two;

namespace {

constexpr QueueOptions kNoQueue{0, QueueOrder::OldestFirst};
constexpr QueueOptions kQueue{100, QueueOrder::OldestFirst};

std::shared_ptr<KeyedLimiter> keyed(Store& s, const Params& p, QueueOptions queue = kNoQueue) {
    KeyTable::Template tmpl{p, queue, 3600 * kSec};
    return std::make_shared<KeyedLimiter>(KeyTable::open(s.shared_from_this(), "keys", tmpl, 64, 60 * kSec));
}

/// Every permit `key` grants now, one at a time.
int take_all(KeyedLimiter& k, const std::string& key) {
    int n = 0;
    while (k.acquire(key, 1).outcome.acquired) {
        ++n;
        EXPECT_LE(n, 1000) << "more than any limit";
        if (n > 1000) {
            break;
        }
    }
    return n;
}

} // namespace

TEST(ShmKeyedReconfigure, ALoweredLimitHoldsForEveryKeyOfEveryMappingAtItsNextUse) {
    Two t("rck-fw");
    auto a = keyed(*t.a, params_of(FixedWindowRule(10, kSec)));
    auto b = keyed(*t.b, params_of(FixedWindowRule(10, kSec)));
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(b->acquire("alice", 1).outcome.acquired);
    }
    a->reconfigure(params_of(FixedWindowRule(5, kSec)), kNoQueue);
    EXPECT_EQ(take_all(*b, "alice"), 1); // 4 of the new 5 were taken already
    EXPECT_EQ(take_all(*b, "bob"), 5);   // a key new to both
    EXPECT_EQ(b->table().limit(), 5);
    EXPECT_THROW(b->acquire("carol", 6), std::invalid_argument); // more than the limit, as any limiter
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a, "alice") + take_all(*b, "alice"), 5);
    // Raised again from the other mapping: the difference at once, in the same window.
    b->reconfigure(params_of(FixedWindowRule(8, kSec)), kNoQueue);
    EXPECT_EQ(take_all(*a, "alice"), 3);
    EXPECT_EQ(take_all(*a, "bob"), 8);
}

TEST(ShmKeyedReconfigure, ATokenBucketsLimitAndRateReachEveryMapping) {
    Two t("rck-tb");
    auto a = keyed(*t.a, params_of(TokenBucketRule(10, 2, kSec)));
    auto b = keyed(*t.b, params_of(TokenBucketRule(10, 2, kSec)));
    ASSERT_TRUE(b->acquire("k", 1).outcome.acquired);
    a->reconfigure(params_of(TokenBucketRule(4, 1, kSec)), kNoQueue);
    EXPECT_EQ(b->statistics("k").current_available_permits, 4); // its tokens, up to the new limit
    std::int64_t amounts[2] = {};
    b->table().amounts(amounts);
    EXPECT_EQ(amounts[0], 4);
    EXPECT_EQ(amounts[1], 1);
    EXPECT_EQ(take_all(*b, "k"), 4);
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a, "k"), 1); // the new rate
}

TEST(ShmKeyedReconfigure, ASlidingWindowLogAndCounterKeepTheirCounts) {
    for (const std::int64_t segments : {std::int64_t{4}, std::int64_t{-8}}) {
        Two t("rck-sw");
        auto a = keyed(*t.a, params_of_sliding(6, kSec, segments));
        auto b = keyed(*t.b, params_of_sliding(6, kSec, segments));
        ASSERT_TRUE(a->acquire("k", 4).outcome.acquired);
        b->reconfigure(params_of_sliding(5, kSec, segments), kNoQueue);
        EXPECT_EQ(take_all(*a, "k"), 1) << segments;
        a->reconfigure(params_of_sliding(9, kSec, segments), kNoQueue);
        EXPECT_EQ(take_all(*b, "k"), 4) << segments;
        // Lowered below the 9 counted: sound, not damage (repaired, it would count 5 only, and a
        // raise back would grant 4 more in the same window).
        a->reconfigure(params_of_sliding(5, kSec, segments), kNoQueue);
        EXPECT_EQ(take_all(*b, "k"), 0) << segments;
        b->reconfigure(params_of_sliding(9, kSec, segments), kNoQueue);
        EXPECT_EQ(take_all(*a, "k"), 0) << segments;
    }
    Two t("rck-swc");
    auto a = keyed(*t.a, params_of(SlidingWindowCounterRule(6, kSec)));
    auto b = keyed(*t.b, params_of(SlidingWindowCounterRule(6, kSec)));
    ASSERT_TRUE(a->acquire("k", 6).outcome.acquired);
    b->reconfigure(params_of(SlidingWindowCounterRule(8, kSec)), kNoQueue);
    EXPECT_EQ(take_all(*a, "k"), 2);
}

TEST(ShmKeyedReconfigure, AnotherWindowOrKindIsRefusedAndNothingChanges) {
    Two t("rck-refused");
    auto a = keyed(*t.a, params_of_sliding(6, kSec, 4));
    EXPECT_THROW(a->reconfigure(params_of_sliding(6, 2 * kSec, 4), kNoQueue), std::invalid_argument);
    EXPECT_THROW(a->reconfigure(params_of_sliding(6, kSec, 5), kNoQueue), std::invalid_argument);
    EXPECT_THROW(a->reconfigure(params_of(FixedWindowRule(6, kSec)), kNoQueue), std::invalid_argument);
    EXPECT_THROW(a->reconfigure(params_of_sliding(0, kSec, 4), kNoQueue), std::invalid_argument);
    EXPECT_EQ(take_all(*a, "k"), 6);
}

TEST(ShmKeyedReconfigure, AConcurrencyKeysHeldPermitsStayHeldUnderEveryLimit) {
    Named n("rck-conc");
    const Nanos hour = 3600 * kSec;
    auto a = keyed(*n.store, params_of_concurrency(2, hour));
    auto b = keyed(*n.reopen(), params_of_concurrency(2, hour));
    const auto first = b->acquire("k", 2);
    ASSERT_TRUE(first.outcome.acquired && first.limiter);
    a->reconfigure(params_of_concurrency(4, hour), kNoQueue);
    const auto more = b->acquire("k", 2); // the difference at once (one holder: this process)
    ASSERT_TRUE(more.outcome.acquired);
    EXPECT_FALSE(b->acquire("k", 1).outcome.acquired);
    EXPECT_EQ(a->statistics("other").current_available_permits, 4);
    a->reconfigure(params_of_concurrency(1, hour), kNoQueue); // 4 held of 1: they stay held
    EXPECT_EQ(b->statistics("k").current_available_permits, 0);
    // A table opened later, whatever its own limit, counts with the table's (its records sized as made).
    for (const std::int64_t own : {std::int64_t{2}, std::int64_t{1}, std::int64_t{70}}) {
        auto later = keyed(*n.reopen(), params_of_concurrency(own, hour));
        EXPECT_EQ(later->table().limit(), 1) << own;
        EXPECT_EQ(later->statistics("k").current_available_permits, 0) << own;
    }
    more.limiter->give_back(2, more.outcome.tag);
    first.limiter->give_back(1, first.outcome.tag); // 1 held of 1
    EXPECT_FALSE(a->acquire("k", 1).outcome.acquired);
    first.limiter->give_back(1, first.outcome.tag);
    EXPECT_TRUE(a->acquire("k", 1).outcome.acquired);
    const auto info = describe(n.name, n.clock->now());
    ASSERT_EQ(info.slots.size(), 1U);
    EXPECT_EQ(info.slots[0].damage, "");
    EXPECT_EQ(info.slots[0].limit, 1);
}

TEST(ShmKeyedReconfigure, AMappingOpenedLaterTakesTheTablesAmountsOverItsOwn) {
    Named n("rck-later");
    auto a = keyed(*n.store, params_of(FixedWindowRule(10, kSec)));
    ASSERT_TRUE(a->acquire("k", 2).outcome.acquired);
    // Never changed: another limit is refused, as it always was.
    EXPECT_THROW(keyed(*n.reopen(), params_of(FixedWindowRule(3, kSec))), std::invalid_argument);
    a->reconfigure(params_of(FixedWindowRule(4, kSec)), kNoQueue);
    for (const std::int64_t own : {std::int64_t{10}, std::int64_t{4}, std::int64_t{30}}) {
        auto later = keyed(*n.reopen(), params_of(FixedWindowRule(own, kSec)));
        EXPECT_EQ(later->table().limit(), 4) << own;
        EXPECT_EQ(later->statistics("k").current_available_permits, 2) << own;
    }
    // Its window stays: another is refused still.
    EXPECT_THROW(keyed(*n.reopen(), params_of(FixedWindowRule(4, 2 * kSec))), std::invalid_argument);
}

TEST(ShmKeyedReconfigure, AKeyCountedUnderAHigherLimitIsNoDamageAfterALowerOne) {
    Named n("rck-highest");
    auto a = keyed(*n.store, params_of(TokenBucketRule(5, 5, kSec)));
    a->reconfigure(params_of(TokenBucketRule(20, 5, kSec)), kNoQueue);
    EXPECT_EQ(a->statistics("k").current_available_permits, 20); // a new key: the whole new limit
    ASSERT_TRUE(a->acquire("k", 2).outcome.acquired);            // 18 tokens kept in the record
    a->reconfigure(params_of(TokenBucketRule(5, 5, kSec)), kNoQueue);
    auto later = keyed(*n.reopen(), params_of(TokenBucketRule(5, 5, kSec)));
    EXPECT_EQ(take_all(*later, "k"), 5); // 18 tokens read up to the limit of 5, not judged damaged
    const auto info = describe(n.name, n.clock->now());
    ASSERT_EQ(info.slots.size(), 1U);
    EXPECT_EQ(info.slots[0].damage, "");
    EXPECT_EQ(info.slots[0].limit, 5); // the inspector shows the limit that holds
}

TEST(ShmKeyedReconfigure, AQueuedRequestTheNewLimitCanNeverServeFailsAndARaiseServesTheRest) {
    Two t("rck-queue");
    auto a = keyed(*t.a, params_of(FixedWindowRule(10, kSec)));
    auto b = keyed(*t.b, params_of(FixedWindowRule(10, kSec)), kQueue);
    ASSERT_TRUE(b->acquire("k", 10).outcome.acquired);
    auto queue = b->limiter("k");
    auto big = queue->enqueue(8, -1);
    auto small = queue->enqueue(2, -1);
    ASSERT_NE(big.waiter, nullptr);
    ASSERT_NE(small.waiter, nullptr);
    a->reconfigure(params_of(FixedWindowRule(5, kSec)), kNoQueue);
    EXPECT_EQ(queue->available_permits(), 0); // its next look takes the new limit on
    ASSERT_FALSE(big.waiter->pending());
    EXPECT_EQ(big.waiter->outcome().reason, Reason::LimitReached);
    EXPECT_TRUE(small.waiter->pending());
    EXPECT_EQ(queue->queue_options().queue_limit, 100); // each process's queue stays its own
    // Raised by the queue's own process: served at once.
    b->reconfigure(params_of(FixedWindowRule(12, kSec)), kQueue);
    ASSERT_FALSE(small.waiter->pending());
    EXPECT_TRUE(small.waiter->outcome().acquired);
}

TEST(ShmKeyedReconfigure, ALowerQueueLimitFailsThoseServedLastInThisProcessOnly) {
    Two t("rck-qlimit");
    auto a = keyed(*t.a, params_of(FixedWindowRule(4, kSec)), kQueue);
    ASSERT_TRUE(a->acquire("k", 4).outcome.acquired);
    auto queue = a->limiter("k");
    auto first = queue->enqueue(2, -1);
    auto second = queue->enqueue(2, -1);
    a->reconfigure(params_of(FixedWindowRule(4, kSec)), QueueOptions{2, QueueOrder::OldestFirst});
    EXPECT_TRUE(first.waiter->pending());
    ASSERT_FALSE(second.waiter->pending());
    EXPECT_EQ(second.waiter->outcome().reason, Reason::QueueFull);
    EXPECT_EQ(a->queue_options().queue_limit, 2);
    EXPECT_EQ(a->limiter("new")->queue_options().queue_limit, 2); // a key's limiter made later too
    auto b = keyed(*t.b, params_of(FixedWindowRule(4, kSec)), kQueue);
    EXPECT_EQ(b->limiter("k")->queue_options().queue_limit, 100);
}

TEST(ShmKeyedReconfigure, ABankWrittenByAWriterKilledBeforeItPublishedIsNeverRead) {
    Two t("rck-torn");
    auto a = keyed(*t.a, params_of(FixedWindowRule(10, kSec)));
    a->reconfigure(params_of(FixedWindowRule(7, kSec)), kNoQueue); // generation 1: the odd bank
    // The even bank, half written by a process killed there (the head's words 5 and 6).
    auto* words = reinterpret_cast<std::int64_t*>(t.b->segment().at<char>(t.b->segment().header().named[0].offset));
    ASSERT_EQ(words[3], 7);
    words[5] = -1;
    auto b = keyed(*t.b, params_of(FixedWindowRule(10, kSec)));
    EXPECT_EQ(take_all(*b, "k"), 7);
    b->reconfigure(params_of(FixedWindowRule(4, kSec)), kNoQueue); // the next writer writes it whole
    t.clock->advance(kSec);
    EXPECT_EQ(take_all(*a, "k"), 4);
}

#endif // __linux__
