// This process's side of a shared per-key table (shm::KeyedLimiter, Linux): a time-based key's
// requests are granted from its record with no Limiter made for it, until one of them queues; a
// concurrency key goes through its Limiter, which keeps track of its leases; the keys kept here are
// bounded, their counts adding up across both paths and the keys dropped.
#if defined(__linux__)

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>

#include "permits/shm_keyed.hpp"
#include "permits/shm_limiters.hpp"
#include "shm_support.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::shm;
using permits::testing::kSec;
using permits::testing::make_clock;
using permits::testing::Two;

namespace {

constexpr Nanos kHour = 3600 * kSec;
const QueueOptions kQueue{100, QueueOrder::OldestFirst};

std::shared_ptr<KeyedLimiter> keyed(Store& s, const Params& p, std::int64_t max, Nanos idle, std::size_t kept = 4096,
                                    const char* name = "keys") {
    KeyTable::Template tmpl{p, kQueue, kHour};
    return std::make_shared<KeyedLimiter>(KeyTable::open(s.shared_from_this(), name, tmpl, max, idle), kept);
}

void judged_dead(Store& s) {
    Segment& seg = s.segment();
    Holding h;
    ASSERT_TRUE(seg.current(h));
    HolderSlot& slot = seg.header().holders[h.index];
    for (int i = 0; i < 100; ++i) {
        slot.pid_ns.store(1);
        slot.heartbeat.store(monotonic_now() - 10 * kSec);
        if (seg.reclaim_holder(h.index, kSec)) {
            return;
        }
    }
    FAIL() << "the holder was never reclaimed";
}

} // namespace

TEST(ShmKeyed, ATimeBasedKeyIsGrantedFromItsRecordWithNoLimiter) {
    Two t("direct");
    auto k = keyed(*t.a, params_of(FixedWindowRule(2, kSec)), 8, kSec);
    auto other = keyed(*t.b, params_of(FixedWindowRule(2, kSec)), 8, kSec);
    const auto first = k->acquire("alice", 1);
    EXPECT_TRUE(first.outcome.acquired);
    EXPECT_EQ(first.limiter, nullptr);
    EXPECT_TRUE(other->acquire("alice", 1).outcome.acquired); // one state, every process's
    const auto refused = k->acquire("alice", 1);
    EXPECT_FALSE(refused.outcome.acquired);
    EXPECT_EQ(refused.outcome.reason, Reason::LimitReached);
    EXPECT_EQ(refused.outcome.retry_after, kSec); // as the key's Limiter would say
    EXPECT_EQ(k->limiters(), 0U);
    EXPECT_EQ(k->kept(), 1U);
    EXPECT_EQ(k->table().size(), 1);
    const Statistics s = k->statistics("alice");
    EXPECT_EQ(s.current_available_permits, 0);
    EXPECT_EQ(s.total_successful_leases, 1); // this process's
    EXPECT_EQ(s.total_failed_leases, 1);
    EXPECT_THROW(k->acquire("alice", 3), std::invalid_argument);
    EXPECT_THROW(k->acquire("alice", -1), std::invalid_argument);
}

TEST(ShmKeyed, AResetKeyIsFullForEveryProcessAndTakesBackNothingGrantedBefore) {
    for (const Params& p : {params_of(FixedWindowRule(2, kHour)), params_of(TokenBucketRule(2, 1, kHour)),
                            params_of(SlidingWindowCounterRule(2, kHour)), params_of_sliding(2, kHour, 4),
                            params_of_sliding(2, kHour, -4)}) {
        Two t("reset");
        auto k = keyed(*t.a, p, 8, kSec);
        auto other = keyed(*t.b, p, 8, kSec);
        EXPECT_FALSE(other->reset("alice")); // no record: made full at its first request
        const Outcome before = k->acquire("alice", 2).outcome;
        ASSERT_TRUE(before.acquired);
        ASSERT_TRUE(k->acquire("bob", 2).outcome.acquired);
        EXPECT_TRUE(other->reset("alice")); // another process's, at the instant of the grant
        EXPECT_EQ(k->statistics("alice").current_available_permits, 2);
        EXPECT_TRUE(k->acquire("alice", 2).outcome.acquired);
        k->give_back("alice", 2, before.tag); // granted before the reset: nothing comes back
        EXPECT_FALSE(other->acquire("alice", 1).outcome.acquired);
        EXPECT_FALSE(other->acquire("bob", 1).outcome.acquired);
    }
}

TEST(ShmKeyed, AResetConcurrencyKeyKeepsItsHeldPermits) {
    Two t("reset-cc");
    auto k = keyed(*t.a, params_of_concurrency(1, kHour), 8, kSec);
    auto jobs = k->limiter("k");
    const Outcome held = jobs->acquire(1);
    ASSERT_TRUE(held.acquired);
    EXPECT_FALSE(k->reset("k"));
    EXPECT_FALSE(jobs->acquire(1).acquired);
    jobs->give_back(1, held.tag);
    EXPECT_TRUE(jobs->acquire(1).acquired);
}

TEST(ShmKeyed, AKeyGrantedFromItsRecordThenWaitedOnSharesOneStateAndQueueOrder) {
    Two t("wait");
    auto k = keyed(*t.a, params_of(FixedWindowRule(2, kSec)), 8, kSec);
    ASSERT_TRUE(k->acquire("k", 2).outcome.acquired);
    auto lim = k->limiter("k");
    EXPECT_EQ(k->limiters(), 1U);
    EXPECT_EQ(lim->available_permits(), 0); // the record's state: the direct grant counts
    auto queued = lim->enqueue(1, -1);
    ASSERT_TRUE(queued.waiter);
    // Requests of the key now go through its Limiter: none barges ahead of the queued one.
    t.clock->advance(kSec - 1);
    const auto behind = k->try_now("k", 1);
    EXPECT_FALSE(behind.has_value());
    const auto refused = k->acquire("k", 1);
    EXPECT_FALSE(refused.outcome.acquired);
    EXPECT_EQ(refused.limiter, lim);
    t.clock->advance(1); // the next window: the queued request first
    EXPECT_FALSE(queued.waiter->pending());
    EXPECT_TRUE(queued.waiter->outcome().acquired);
    // Nothing queued: the record again, the Limiter kept.
    const auto direct = k->acquire("k", 1);
    EXPECT_TRUE(direct.outcome.acquired);
    EXPECT_EQ(direct.limiter, nullptr);
    EXPECT_FALSE(k->acquire("k", 1).outcome.acquired);
    const Statistics s = k->statistics("k");
    EXPECT_EQ(s.total_successful_leases, 3); // two grants of the record, one of the queue
    EXPECT_EQ(s.total_failed_leases, 2);     // one through the Limiter, one of the record
    const Statistics all = k->totals();
    EXPECT_EQ(all.total_successful_leases, 3);
    EXPECT_EQ(all.total_failed_leases, 2);
}

TEST(ShmKeyed, ARefundOfARecordsGrantGoesBackToTheRecordAndServesTheQueue) {
    Two t("refund");
    auto k = keyed(*t.a, params_of(FixedWindowRule(1, kHour)), 8, kSec);
    const auto granted = k->acquire("k", 1);
    ASSERT_TRUE(granted.outcome.acquired);
    auto queued = k->limiter("k")->enqueue(1, -1);
    ASSERT_TRUE(queued.waiter);
    k->give_back("k", 1, granted.outcome.tag);
    EXPECT_FALSE(queued.waiter->pending());
    EXPECT_TRUE(queued.waiter->outcome().acquired);
}

TEST(ShmKeyed, IdleKeysMakeRoomForNewOnesAtTheBound) {
    Two t("bound");
    auto k = keyed(*t.a, params_of(FixedWindowRule(1, kSec)), 3, 10 * kSec);
    for (const char* key : {"a", "b", "c"}) {
        ASSERT_TRUE(k->acquire(key, 1).outcome.acquired);
    }
    const auto refused = k->acquire("d", 1);
    EXPECT_FALSE(refused.outcome.acquired);
    EXPECT_EQ(refused.outcome.reason, Reason::PartitionLimit);
    EXPECT_EQ(refused.outcome.retry_after, -1);
    EXPECT_EQ(k->limiters(), 0U); // refused at the record too
    t.clock->advance(12 * kSec);  // every key idle for longer than 10 s
    for (const char* key : {"d", "e", "f"}) {
        EXPECT_TRUE(k->acquire(key, 1).outcome.acquired) << key;
    }
    EXPECT_EQ(k->table().size(), 3);
    EXPECT_EQ(k->acquire("g", 1).outcome.reason, Reason::PartitionLimit); // d, e and f are not idle
    EXPECT_EQ(k->totals().total_successful_leases, 6);
    EXPECT_EQ(k->totals().total_failed_leases, 2);
}

TEST(ShmKeyed, KeysComingAndGoingAtTheBoundAreNeverLostNorDoubled) {
    // One shard of 18 records for 16 keys, 64 keys coming and going through the records' path: no
    // key present is ever missed by its probe past the records dropped (a miss would make it a
    // second record, whose grant the second acquire below would get).
    Two t("churn");
    auto k = keyed(*t.a, params_of(FixedWindowRule(1, 10)), 16, 0, 8);
    std::mt19937 rng(7);
    int granted = 0;
    for (int i = 0; i < 20000; ++i) {
        if (i % 3 != 0) {
            t.clock->advance(10); // every key's window over: all idle, any may make room
        }
        const std::string key = "k" + std::to_string(rng() % 64);
        const Outcome first = k->acquire(key, 1).outcome;
        if (!first.acquired) { // used in this window already, or no key idle to make room
            continue;
        }
        ++granted;
        const Outcome again = k->acquire(key, 1).outcome;
        ASSERT_FALSE(again.acquired) << i;
        ASSERT_EQ(again.reason, Reason::LimitReached) << i;
        ASSERT_LE(k->table().size(), 16);
        if (i % 1000 == 999) {
            t.clock->advance(10);
            const std::int64_t live = k->table().size(); // (read first: argument order is unspecified)
            EXPECT_EQ(k->table().evict_idle(), live == 0 ? 0 : 16);
            EXPECT_EQ(k->table().size(), 0);
        }
    }
    EXPECT_GT(granted, 10000);
}

TEST(ShmKeyed, TheKeysKeptAreBoundedTheirCountsGoingToTheTotals) {
    Two t("kept");
    auto k = keyed(*t.a, params_of(FixedWindowRule(1, kHour)), 32, kHour, 3);
    auto lim = k->limiter("busy");
    ASSERT_TRUE(lim->acquire(1).acquired);
    auto queued = lim->enqueue(1, -1); // a request queued: its key stays kept
    ASSERT_TRUE(queued.waiter);
    for (int i = 0; i < 10; ++i) {
        const std::string key = "k" + std::to_string(i);
        EXPECT_TRUE(k->acquire(key, 1).outcome.acquired);
        EXPECT_FALSE(k->acquire(key, 1).outcome.acquired);
    }
    EXPECT_EQ(k->kept(), 3U);
    EXPECT_EQ(k->limiters(), 1U);
    const Statistics all = k->totals();
    EXPECT_EQ(all.total_successful_leases, 11);
    EXPECT_EQ(all.total_failed_leases, 10);
    EXPECT_EQ(all.current_queued_count, 1);
    // A key dropped starts its counts again; the state in the segment is the same.
    const Statistics first = k->statistics("k0");
    EXPECT_EQ(first.total_successful_leases, 0);
    EXPECT_EQ(first.current_available_permits, 0);
    EXPECT_EQ(k->statistics("busy").current_queued_count, 1);
}

TEST(ShmKeyed, CloseFailsTheQueuedAndLaterCallsThrow) {
    Two t("close");
    auto k = keyed(*t.a, params_of(FixedWindowRule(1, kHour)), 8, kSec);
    ASSERT_TRUE(k->acquire("k", 1).outcome.acquired);
    auto queued = k->limiter("k")->enqueue(1, -1);
    ASSERT_TRUE(queued.waiter);
    k->close();
    EXPECT_TRUE(k->closed());
    EXPECT_FALSE(queued.waiter->pending());
    EXPECT_EQ(queued.waiter->outcome().reason, Reason::Closed);
    EXPECT_THROW(k->acquire("k", 1), ClosedError);
    EXPECT_THROW(k->try_now("other", 1), ClosedError);
    EXPECT_THROW(k->limiter("k"), ClosedError);
    EXPECT_THROW(k->statistics("k"), ClosedError);
    EXPECT_THROW(k->totals(), ClosedError);
}

TEST(ShmKeyed, AConcurrencyKeyGoesThroughItsLimiterWhichTakesBackOrLosesItsLeases) {
    Two t("conc");
    auto ka = keyed(*t.a, params_of_concurrency(1, kHour), 8, kSec);
    auto kb = keyed(*t.b, params_of_concurrency(1, kHour), 8, kSec);
    const auto held = ka->acquire("k", 1);
    ASSERT_TRUE(held.outcome.acquired);
    ASSERT_NE(held.limiter, nullptr); // the leases are the key's Limiter's
    EXPECT_EQ(ka->acquire("k", 1).limiter, held.limiter);
    judged_dead(*t.a);
    EXPECT_FALSE(held.limiter->lost(held.outcome.tag)); // taken back: the key's permit was free
    EXPECT_FALSE(kb->acquire("k", 1).outcome.acquired);
    held.limiter->give_back_lease(1, held.outcome.tag);
    EXPECT_EQ(kb->statistics("k").current_available_permits, 1);

    const auto again = ka->acquire("k", 1);
    ASSERT_TRUE(again.outcome.acquired);
    judged_dead(*t.a);
    const auto theirs = kb->acquire("k", 1); // the permit the segment forgot, granted again
    ASSERT_TRUE(theirs.outcome.acquired);
    EXPECT_TRUE(again.limiter->lost(again.outcome.tag));
    EXPECT_EQ(ka->table().lost_leases(), 1);
    EXPECT_TRUE(again.limiter->give_back_lease(1, again.outcome.tag)); // lost: gives nothing back
    EXPECT_EQ(kb->statistics("k").current_available_permits, 0);
    theirs.limiter->give_back_lease(1, theirs.outcome.tag);
    EXPECT_EQ(kb->statistics("k").current_available_permits, 1);
}

TEST(ShmKeyed, AForkedChildUsesItsCopyAndItsCopyOfALeaseReleasesNothing) {
    Two t("fork");
    auto k = keyed(*t.a, params_of_concurrency(2, kHour), 8, kSec);
    auto bucket = keyed(*t.a, params_of(FixedWindowRule(2, kHour)), 8, kSec, 4096, "bucket");
    const auto held = k->acquire("k", 1);
    ASSERT_TRUE(held.outcome.acquired);
    ASSERT_TRUE(bucket->acquire("b", 1).outcome.acquired);
    const pid_t pid = ::fork();
    if (pid == 0) {
        held.limiter->give_back_lease(1, held.outcome.tag); // the parent's lease, copied
        bool ok = k->statistics("k").current_available_permits == 1;
        const auto mine = k->acquire("k", 1);
        ok = ok && mine.outcome.acquired && k->statistics("k").current_available_permits == 0;
        mine.limiter->give_back_lease(1, mine.outcome.tag);
        ok = ok && bucket->acquire("b", 1).outcome.acquired && !bucket->acquire("b", 1).outcome.acquired;
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(k->statistics("k").current_available_permits, 1); // the parent's lease still held
    held.limiter->give_back_lease(1, held.outcome.tag);
    EXPECT_EQ(k->statistics("k").current_available_permits, 2);
    EXPECT_EQ(bucket->statistics("b").current_available_permits, 0); // the child's grant counts
}

#endif // __linux__
