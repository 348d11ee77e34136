// PerKeyLimiter: a limiter per key, built on first use, dropped once idle (docs/design.md, Partitions).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/key_hash.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

std::shared_ptr<PerKeyLimiter> make_per_key(const std::shared_ptr<ManualClock>& clock, std::int64_t limit,
                                            Nanos idle_timeout, std::int64_t max_partitions = 0) {
    auto tmpl = PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(limit, 10 * kSec),
                                                QueueOptions{4, QueueOrder::OldestFirst});
    return std::make_shared<PerKeyLimiter>(clock, tmpl, idle_timeout, max_partitions);
}

template <class L, class R>
std::shared_ptr<PerKeyLimiter> per_key_of(const std::shared_ptr<ManualClock>& clock, const R& rule, Nanos idle_timeout,
                                          QueueOptions queue = {}) {
    return std::make_shared<PerKeyLimiter>(clock, PerKeyTemplate::of<L>(clock, rule, queue), idle_timeout, 0);
}

/// A ManualClock whose now() stalls, on threads that ask for it, until `go`: holds the caller's
/// shard lock for as long as a test wants.
class StallingClock final : public Clock {
public:
    explicit StallingClock(std::shared_ptr<ManualClock> inner) : inner_(std::move(inner)) {}
    Nanos now() const noexcept override {
        if (stall_this_thread) {
            entered = true;
            while (!go.load()) {
                std::this_thread::yield();
            }
        }
        return inner_->now();
    }
    Scheduler& scheduler() noexcept override { return inner_->scheduler(); }

    static inline thread_local bool stall_this_thread = false;
    mutable std::atomic<bool> entered{false};
    std::atomic<bool> go{false};

private:
    std::shared_ptr<ManualClock> inner_;
};

} // namespace

TEST(PerKey, EachKeyHasItsOwnLimit) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 2, 10 * kSec);
    EXPECT_TRUE(k->acquire("a", 2).outcome.acquired);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    EXPECT_TRUE(k->acquire("b", 2).outcome.acquired);
    EXPECT_EQ(k->size(), 2);
    const Statistics t = k->totals();
    EXPECT_EQ(t.total_successful_leases, 2);
    EXPECT_EQ(t.total_failed_leases, 1);
}

TEST(PerKey, AnIdlePartitionIsDroppedOnlyAfterTheIdleTimeout) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 5 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired); // window 0: full again at 10 s
    clock->advance(14 * kSec);
    EXPECT_EQ(k->size(), 1); // idle for 4 s
    clock->advance(1 * kSec);
    EXPECT_EQ(k->size(), 1); // idle for exactly 5 s: not yet
    clock->advance(1);
    EXPECT_EQ(k->size(), 0);                           // the timer dropped it, in advance()
    EXPECT_EQ(k->totals().total_successful_leases, 1); // its counts are kept
}

TEST(PerKey, EvictionNeverLoosensALimit) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 1 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    clock->advance(9 * kSec); // unused for 9 s, but its window still holds the grant
    EXPECT_EQ(k->size(), 1);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
}

TEST(PerKey, AQueuedRequestKeepsItsPartition) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 1 * kSec);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    auto q = k->enqueue("a", 1, -1);
    ASSERT_TRUE(q.enqueued.waiter);
    clock->advance(10 * kSec); // the next window serves it
    EXPECT_TRUE(q.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(k->size(), 1);
    clock->advance(12 * kSec);
    EXPECT_EQ(k->size(), 0);
}

TEST(PerKey, AtTheBoundANewKeyTakesAnIdlePartitionsPlaceOrIsRefused) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 100 * kSec, 1);
    ASSERT_TRUE(k->acquire("a", 1).outcome.acquired);
    const Outcome refused = k->acquire("b", 1).outcome;
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.reason, Reason::PartitionLimit);
    EXPECT_EQ(refused.retry_after, -1);
    clock->advance(10 * kSec); // a is idle (however briefly): b may take its place
    EXPECT_TRUE(k->acquire("b", 1).outcome.acquired);
    EXPECT_EQ(k->size(), 1);
}

TEST(PerKey, AtTheBoundAnIdlePartitionGivesItsPlaceWhileAnotherThreadHoldsItsShard) {
    // A thread holds the idle key's shard (stalled in the clock, which a request reads under its
    // shard's lock) when a new key needs a place: the new key waits for that shard rather than
    // being refused "partition_limit" while an idle partition could give its place.
    auto manual = make_clock();
    auto clock = std::make_shared<StallingClock>(manual);
    auto tmpl = PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(10, 10 * kSec), QueueOptions{});
    auto k = std::make_shared<PerKeyLimiter>(clock, tmpl, 100 * kSec, 1);
    const std::string idle = "idle";
    std::string fresh = "fresh";
    while (hash_key(fresh) % 64 == hash_key(idle) % 64) { // another shard (there are 64)
        fresh += "!";
    }
    ASSERT_TRUE(k->acquire(idle, 0).outcome.acquired); // taking nothing: the key stays idle
    std::thread holder([&] {
        StallingClock::stall_this_thread = true;
        (void)k->acquire(idle, 0); // stalls holding idle's shard
    });
    while (!clock->entered.load()) {
        std::this_thread::yield();
    }
    std::thread releaser([&] {
        // Only an order, never a verdict: a release before the new key looks would let the old
        // code pass too, not fail the new one.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        clock->go = true;
    });
    const Outcome placed = k->acquire(fresh, 1).outcome;
    releaser.join();
    holder.join();
    EXPECT_TRUE(placed.acquired) << reason_name(placed.reason);
    EXPECT_EQ(k->size(), 1);
}

TEST(PerKey, ChurnLeavesNoPendingLooksBehind) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 1 * kSec, 1);
    for (int i = 0; i < 2000; ++i) {
        clock->advance(10 * kSec); // the previous key is idle
        ASSERT_TRUE(k->acquire(std::to_string(i), 1).outcome.acquired) << i;
    }
    EXPECT_EQ(k->size(), 1);
    clock->advance(100 * kSec);
    EXPECT_EQ(k->size(), 0);
}

TEST(PerKey, CloseFailsWaitersInEveryPartitionAndLaterCallsThrow) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 1 * kSec);
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

TEST(PerKey, ManyThreadsOnFewKeysGetExactPerKeyTotals) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1000, 100 * kSec);
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

TEST(PerKey, AReleaseComesBackToTheKeyAndItIsEvictedExactlyIdleTimeoutLater) {
    auto clock = make_clock();
    auto k = per_key_of<Concurrency>(clock, ConcurrencyRule(1), 5 * kSec);
    const auto held = k->acquire("a", 1);
    ASSERT_TRUE(held.outcome.acquired);
    EXPECT_FALSE(held.promoted); // decided by the key's record
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    clock->advance(100 * kSec); // held: never idle, never evicted
    EXPECT_EQ(k->size(), 1);
    k->give_back("a", 1, held.outcome.tag);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 1);
    clock->advance(5 * kSec);
    EXPECT_EQ(k->size(), 1); // idle for exactly 5 s: not yet
    clock->advance(1);
    EXPECT_EQ(k->size(), 0);
    EXPECT_EQ(k->totals().total_successful_leases, 1);
    EXPECT_EQ(k->totals().total_failed_leases, 1);
}

TEST(PerKey, ARefundGoesBackToTheKeysBucketAndWindow) {
    auto clock = make_clock();
    auto tb = per_key_of<TokenBucket>(clock, TokenBucketRule(2, 1, 10 * kSec), 60 * kSec);
    const auto first = tb->acquire("a", 2);
    ASSERT_TRUE(first.outcome.acquired);
    EXPECT_FALSE(tb->acquire("a", 1).outcome.acquired);
    tb->give_back("a", 1, first.outcome.tag);
    EXPECT_TRUE(tb->acquire("a", 1).outcome.acquired);
    EXPECT_FALSE(tb->acquire("a", 1).outcome.acquired);
    // A late refund: only what the refills since the grant could not have brought comes back.
    const auto late = tb->acquire("b", 2);
    ASSERT_TRUE(late.outcome.acquired);
    clock->advance(10 * kSec); // one token came to "b"
    ASSERT_TRUE(tb->acquire("b", 1).outcome.acquired);
    tb->give_back("b", 2, late.outcome.tag);
    EXPECT_EQ(tb->statistics("b")->current_available_permits, 1);

    auto fw = per_key_of<FixedWindow>(clock, FixedWindowRule(1, 10 * kSec), 60 * kSec);
    const auto granted = fw->acquire("a", 1);
    fw->give_back("a", 1, granted.outcome.tag); // same window: counted back
    const auto again = fw->acquire("a", 1);
    EXPECT_TRUE(again.outcome.acquired);
    clock->advance(10 * kSec);
    fw->give_back("a", 1, again.outcome.tag); // its window has gone: nothing to give back
    EXPECT_TRUE(fw->acquire("a", 1).outcome.acquired);
    EXPECT_FALSE(fw->acquire("a", 1).outcome.acquired);
}

// A key evicted and made again starts a new timeline at a later anchor: a refund of a grant the
// evicted record made (a lease settled long after its work began) must not go into the new record,
// whose windows count other grants (before: the refund matched the new record's window of the same
// index, and a limit of 4 granted 8 in one window).
template <class L, class R> void check_a_refund_outlives_its_record(const R& rule, const char* kind) {
    auto clock = make_clock();
    clock->advance(3 * kSec + 7); // anchors not on a window boundary
    auto k = per_key_of<L>(clock, rule, 1 * kSec);
    const auto old = k->acquire("a", 4);
    ASSERT_TRUE(old.outcome.acquired) << kind;
    clock->advance(40 * kSec); // the record is full again, and idle: evicted (by the clock's timer)
    EXPECT_EQ(k->size(), 0) << kind;
    clock->advance(5 * kSec + 3);
    ASSERT_TRUE(k->acquire("a", 4).outcome.acquired) << kind; // a new record, its whole limit taken
    k->give_back("a", 4, old.outcome.tag);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 0) << kind;
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired) << kind;
}

TEST(PerKey, ARefundOfAGrantOfAnEvictedRecordGivesNothingToTheKeysNewRecord) {
    check_a_refund_outlives_its_record<FixedWindow>(FixedWindowRule(4, 10 * kSec), "fixed window");
    check_a_refund_outlives_its_record<TokenBucket>(TokenBucketRule(4, 4, 10 * kSec), "token bucket");
    check_a_refund_outlives_its_record<SlidingWindowCounter>(SlidingWindowCounterRule(4, 10 * kSec),
                                                             "sliding window counter");
    // A sliding window's record: its compact state out of the record.
    auto clock = make_clock();
    clock->advance(3 * kSec + 7);
    auto k =
        std::make_shared<PerKeyLimiter>(clock, PerKeyTemplate::sliding_window(clock, 4, 10 * kSec, 5, {}), 1 * kSec, 0);
    const auto old = k->acquire("a", 4);
    ASSERT_TRUE(old.outcome.acquired);
    clock->advance(40 * kSec);
    EXPECT_EQ(k->size(), 0);
    clock->advance(5 * kSec + 3);
    ASSERT_TRUE(k->acquire("a", 4).outcome.acquired);
    k->give_back("a", 4, old.outcome.tag);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 0);
}

TEST(PerKey, AFailedRecordRequestReportsTheExactRetryAfter) {
    auto clock = make_clock();
    auto k = per_key_of<TokenBucket>(clock, TokenBucketRule(4, 2, 10 * kSec), 60 * kSec);
    clock->advance(3 * kSec); // the key's anchor: 3 s
    ASSERT_TRUE(k->acquire("a", 4).outcome.acquired);
    clock->advance(4 * kSec);
    const Outcome o = k->acquire("a", 3).outcome; // 2 tokens at 13 s, 4 at 23 s
    EXPECT_FALSE(o.acquired);
    EXPECT_EQ(o.reason, Reason::LimitReached);
    EXPECT_EQ(o.retry_after, 16 * kSec);
    const Outcome zero = k->acquire("a", 0).outcome; // a zero-permit request counts as one
    EXPECT_FALSE(zero.acquired);
    EXPECT_EQ(zero.retry_after, 6 * kSec);
    EXPECT_THROW(k->acquire("a", 5), std::invalid_argument);
}

TEST(PerKey, AQueuedRequestCarriesTheKeysStateIntoItsOwnLimiter) {
    auto clock = make_clock();
    auto k = per_key_of<TokenBucket>(clock, TokenBucketRule(3, 3, 10 * kSec), 60 * kSec, {5, QueueOrder::OldestFirst});
    ASSERT_TRUE(k->acquire("a", 3).outcome.acquired);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    clock->advance(4 * kSec);
    EXPECT_EQ(k->enqueue("a", 1, 0).enqueued.outcome.reason, Reason::Timeout); // would wait: not queued
    auto q = k->enqueue("a", 2, -1);
    ASSERT_TRUE(q.enqueued.waiter);
    ASSERT_NE(q.owner, nullptr);
    const Statistics s = *k->statistics("a");
    EXPECT_EQ(s.current_available_permits, 0); // the state came along: still empty
    EXPECT_EQ(s.current_queued_count, 2);
    EXPECT_EQ(s.total_successful_leases, 1);
    clock->advance(6 * kSec); // the bucket's first period ends at 10 s, from its anchor at 0
    EXPECT_TRUE(q.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 1);
    EXPECT_EQ(k->statistics("a")->total_successful_leases, 2);
    // From now on the key's own limiter decides, and it is evicted once idle like any key.
    EXPECT_TRUE(k->acquire("a", 1).promoted);
    clock->advance(200 * kSec);
    EXPECT_EQ(k->size(), 0);
    EXPECT_EQ(k->totals().total_successful_leases, 3);
}

TEST(PerKey, QueueFullAndZeroTimeoutAreDecidedByTheRecord) {
    auto clock = make_clock();
    auto k = per_key_of<FixedWindow>(clock, FixedWindowRule(3, 10 * kSec), 60 * kSec, {1, QueueOrder::OldestFirst});
    ASSERT_TRUE(k->acquire("a", 3).outcome.acquired);
    const auto full = k->enqueue("a", 2, -1); // more than the queue limit
    EXPECT_EQ(full.owner, nullptr);
    EXPECT_EQ(full.enqueued.outcome.reason, Reason::QueueFull);
    EXPECT_EQ(full.enqueued.outcome.retry_after, 10 * kSec);
    const auto now_only = k->enqueue("a", 1, 0);
    EXPECT_EQ(now_only.owner, nullptr);
    EXPECT_EQ(now_only.enqueued.outcome.reason, Reason::Timeout);
    const Statistics s = *k->statistics("a");
    EXPECT_EQ(s.total_failed_leases, 1); // the timeout is not counted, as in a limiter
}

TEST(PerKey, NoQueueLimitQueuesARequestLargerThanAnyBoundedQueue) {
    auto clock = make_clock();
    auto k = per_key_of<FixedWindow>(clock, FixedWindowRule(kMaxPermits, 10 * kSec), 60 * kSec,
                                     {kNoQueueLimit, QueueOrder::OldestFirst});
    ASSERT_TRUE(k->acquire("a", kMaxPermits).outcome.acquired);
    const auto first = k->enqueue("a", kMaxPermits, -1);
    const auto second = k->enqueue("a", kMaxPermits, -1);
    ASSERT_NE(first.owner, nullptr);
    ASSERT_NE(second.owner, nullptr);
    EXPECT_EQ(first.enqueued.waiter->state(), Waiter::Pending);
    EXPECT_EQ(second.enqueued.waiter->state(), Waiter::Pending);
    clock->advance(10 * kSec);
    EXPECT_TRUE(first.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(second.enqueued.waiter->state(), Waiter::Pending);
}

TEST(PerKey, LongBinaryAndNearlyEqualKeysAreDistinct) {
    auto clock = make_clock();
    auto k = per_key_of<FixedWindow>(clock, FixedWindowRule(1, 10 * kSec), 60 * kSec);
    const std::vector<std::string> keys = {
        "",
        std::string("\0", 1),
        std::string("\0\0", 2),
        "abcdefghijklm",   // 13 bytes
        "abcdefghijklmn",  // 14: the longest inline key
        "abcdefghijklmno", // 15: on the heap
        "abcdefghijklmnp",
        std::string(1000, 'x'),
        std::string(999, 'x') + "y",
    };
    for (const auto& key : keys) {
        EXPECT_TRUE(k->acquire(key, 1).outcome.acquired) << key.size();
    }
    for (const auto& key : keys) {
        EXPECT_FALSE(k->acquire(key, 1).outcome.acquired) << key.size();
    }
    EXPECT_EQ(k->size(), static_cast<std::int64_t>(keys.size()));
    clock->advance(100 * kSec);
    EXPECT_EQ(k->size(), 0);
}

// An inline key is compared a few words at a time: keys of every inline length that differ in a
// single byte, at every position, are still different partitions.
TEST(PerKey, InlineKeysDifferingInOneByteAreDistinct) {
    auto clock = make_clock();
    auto k = per_key_of<FixedWindow>(clock, FixedWindowRule(1, 10 * kSec), 60 * kSec);
    std::vector<std::string> keys;
    for (std::size_t n = 1; n <= 14; ++n) {
        const std::string base(n, 'k');
        keys.push_back(base);
        for (std::size_t at = 0; at < n; ++at) {
            std::string other = base;
            other[at] = 'K';
            keys.push_back(other);
        }
    }
    for (const auto& key : keys) {
        ASSERT_TRUE(k->acquire(key, 1).outcome.acquired) << key;
    }
    for (const auto& key : keys) {
        ASSERT_FALSE(k->acquire(key, 1).outcome.acquired) << key;
    }
    EXPECT_EQ(k->size(), static_cast<std::int64_t>(keys.size()));
    k->check_invariants();
}

TEST(PerKey, KeysOutliveTheirNeighboursEvictionAndMemoryIsResetOnceAllAreGone) {
    auto clock = make_clock();
    auto k = per_key_of<FixedWindow>(clock, FixedWindowRule(1, 10 * kSec), 5 * kSec);
    for (int i = 0; i < 10000; ++i) {
        ASSERT_TRUE(k->acquire("early" + std::to_string(i), 1).outcome.acquired);
    }
    clock->advance(6 * kSec);
    for (int i = 0; i < 10000; ++i) {
        ASSERT_TRUE(k->acquire("late" + std::to_string(i), 1).outcome.acquired);
    }
    clock->advance(9 * kSec + 1); // 15 s + 1 ns: the early keys have been idle for longer than 5 s
    EXPECT_EQ(k->size(), 10000);
    for (int i = 0; i < 10000; ++i) { // every late key is still found, with its count, after the deletions
        ASSERT_FALSE(k->acquire("late" + std::to_string(i), 1).outcome.acquired) << i;
    }
    EXPECT_TRUE(k->acquire("early0", 1).outcome.acquired); // a new partition
    clock->advance(30 * kSec);
    EXPECT_EQ(k->size(), 0);
    EXPECT_EQ(k->totals().total_successful_leases, 20001);
    EXPECT_EQ(k->totals().total_failed_leases, 10000);
    EXPECT_TRUE(k->acquire("again", 1).outcome.acquired); // the table works after being reset
}

namespace {

struct WindowCase {
    std::int64_t limit;
    Nanos window;
    std::int64_t segments;
};

// The sliding window specs.parse("10/second") made before the sliding log: 20 segments of 52,632 us.
constexpr WindowCase kParsed{10, 20 * 52'632'000, 20};
// Segments below zero: the sliding log of that many segments (specs.SlidingLog: -32), whose record
// keeps each segment's stamp in ns while a segment is under 2**32 ns, and so decides exactly as the
// standalone limiter does.
constexpr WindowCase kWindowCases[] = {
    {1, 10 * kSec, 1},
    {3, 10 * kSec, 2},
    {5, 7 * kSec, 3},
    kParsed,
    {4, 1000, 7},
    {6, 20, 20},
    {kMaxPermits, kSec, 5},
    {10, kSec, -32},
    {100, 60 * kSec, -32},
    {3, 4 * kSec, -1},
    {5, 7 * kSec, -2},
    {4, 10'000, -7},
    {kMaxPermits, kSec, -5},
};

std::string describe(const WindowCase& c) {
    return "limit " + std::to_string(c.limit) + ", window " + std::to_string(c.window) + " ns, " +
           std::to_string(c.segments) + " segments";
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& where) {
    EXPECT_EQ(got.acquired, want.acquired) << where;
    EXPECT_EQ(got.reason, want.reason) << where;
    EXPECT_EQ(got.retry_after, want.retry_after) << where;
    EXPECT_EQ(got.permits, want.permits) << where;
    EXPECT_EQ(got.tag, want.tag) << where;
}

void expect_same(const Statistics& got, const Statistics& want, const std::string& where) {
    EXPECT_EQ(got.current_available_permits, want.current_available_permits) << where;
    EXPECT_EQ(got.current_queued_count, want.current_queued_count) << where;
    EXPECT_EQ(got.total_successful_leases, want.total_successful_leases) << where;
    EXPECT_EQ(got.total_failed_leases, want.total_failed_leases) << where;
}

// A per-key sliding window key and a standalone SlidingWindow (the reference, built when the key
// is, rebuilt once the key is evicted) fed the same random acquires, zero-permit probes, try_nows,
// refunds (of the current segment's grants and of stale ones) and clock advances (within a segment
// to several windows), on one ManualClock. With `queue`, some denied requests queue instead: the
// key then becomes a full limiter, which must go on from exactly the record's state.
void run_window_differential(const WindowCase& c, bool queue, std::uint64_t seed) {
    auto clock = make_clock();
    const QueueOptions q{queue ? 4 : 0, QueueOrder::OldestFirst};
    // No eviction with queues (a queued key's check follows its own timer; the fuzz target covers it).
    const Nanos idle = queue ? kNever / 4 : 2 * c.window;
    auto k = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::sliding_window(clock, c.limit, c.window, c.segments, q), idle, 0);
    std::shared_ptr<SlidingWindow> ref;
    auto reference = [&] {
        if (!ref) {
            ref = std::make_shared<SlidingWindow>(clock, c.limit, c.window, c.segments, q, false);
        }
        return ref;
    };
    std::mt19937_64 rng(seed);
    auto below = [&](std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); };
    auto count = [&] {
        const std::int64_t pick = below(10);
        return pick == 0 ? 0 : pick == 1 ? c.limit : 1 + below(std::min<std::int64_t>(c.limit, 4));
    };
    struct Grant {
        std::int64_t n;
        std::int64_t tag;
    };
    std::vector<Grant> grants;
    std::vector<std::pair<std::shared_ptr<Waiter>, std::shared_ptr<Waiter>>> waiters; // (key's, reference's)
    std::int64_t promotions = 0;
    const Nanos segment = SlidingWindowShape::of(c.limit, c.window, c.segments, 0).segment;
    for (int step = 0; step < 3000; ++step) {
        const std::string where =
            describe(c) + ", step " + std::to_string(step) + " at " + std::to_string(clock->now()) + " ns";
        switch (below(9)) {
        case 0:
        case 1:
        case 2: {
            const std::int64_t n = count();
            const auto got = k->acquire("key", n);
            const Outcome want = reference()->acquire(n);
            expect_same(got.outcome, want, where + ": acquire " + std::to_string(n));
            // Decided by the compact record until a request queued (no eviction with queues).
            ASSERT_EQ(got.promoted, promotions > 0) << where;
            if (want.acquired && n > 0) {
                grants.push_back({n, want.tag});
            }
            break;
        }
        case 3: {
            const std::int64_t n = count();
            const auto got = k->try_now("key", n);
            const auto want = reference()->try_now(n);
            ASSERT_EQ(got.has_value(), want.has_value()) << where;
            if (want) {
                expect_same(got->outcome, *want, where + ": try_now");
                if (n > 0) {
                    grants.push_back({n, want->tag});
                }
            }
            break;
        }
        case 4: { // a refund, of a grant whose segment may be gone by
            if (grants.empty()) {
                break;
            }
            const auto i = static_cast<std::size_t>(below(static_cast<std::int64_t>(grants.size())));
            k->give_back("key", grants[i].n, grants[i].tag);
            if (ref) {
                ref->give_back(grants[i].n, grants[i].tag);
            }
            grants.erase(grants.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
        case 5: {
            if (!queue) {
                expect_same(*k->statistics("key"), reference()->statistics(), where + ": statistics");
                break;
            }
            const std::int64_t n = 1 + below(std::min<std::int64_t>(c.limit, 4));
            const Nanos timeout = below(2) == 0 ? -1 : 1 + below(2 * c.window);
            auto got = k->enqueue("key", n, timeout);
            const auto want = reference()->enqueue(n, timeout);
            ASSERT_EQ(got.enqueued.waiter != nullptr, want.waiter != nullptr) << where;
            if (want.waiter) {
                ++promotions;
                waiters.emplace_back(got.enqueued.waiter, want.waiter);
            } else {
                expect_same(got.enqueued.outcome, want.outcome, where + ": enqueue");
            }
            break;
        }
        default: {
            const Nanos steps[] = {
                1, segment - 1, segment, 1 + below(c.window), c.window, 3 * c.window, below(2 * c.window + 1)};
            clock->advance(steps[below(7)]);
            if (ref && !queue) {
                const auto idle_for = ref->idle_duration();
                if (idle_for && *idle_for > idle) {
                    ref.reset(); // the key was evicted exactly then, in advance()
                    grants.clear();
                }
            }
            break;
        }
        }
        if (!queue) {
            ASSERT_EQ(k->size(), ref ? 1 : 0) << where;
        }
        for (const auto& [got, want] : waiters) {
            ASSERT_EQ(got->state(), want->state()) << where;
            if (want->state() == Waiter::Completed) {
                expect_same(got->outcome(), want->outcome(), where + ": a queued request's outcome");
            }
        }
        std::erase_if(waiters, [](const auto& w) { return !w.second->pending(); });
        if (::testing::Test::HasFailure()) {
            return;
        }
    }
    if (queue) {
        EXPECT_GT(promotions, 0) << describe(c); // the promotions were exercised
    }
    k->check_invariants();
}

} // namespace

TEST(PerKey, ACompactSlidingWindowKeyDecidesExactlyAsAStandaloneSlidingWindow) {
    std::uint64_t seed = 1;
    for (const WindowCase& c : kWindowCases) {
        for (int run = 0; run < 3; ++run) {
            SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
            run_window_differential(c, false, seed++);
            if (HasFailure()) {
                return;
            }
        }
    }
}

TEST(PerKey, ASlidingWindowKeyWhoseRequestQueuesGoesOnFromItsExactState) {
    std::uint64_t seed = 100;
    for (const WindowCase& c : kWindowCases) {
        for (int run = 0; run < 3; ++run) {
            SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
            run_window_differential(c, true, seed++);
            if (HasFailure()) {
                return;
            }
        }
    }
}

TEST(PerKey, ASlidingWindowKeyIsACompactRecordUntilARequestQueues) {
    // (parse's former "10/second") The counts of permits taken a segment ago are in the record, and go
    // with the key into its full limiter when a request has to queue.
    auto clock = make_clock();
    const Nanos segment = kParsed.window / kParsed.segments;
    auto k = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::sliding_window(clock, kParsed.limit, kParsed.window, kParsed.segments, QueueOptions{5}),
        10 * kSec, 0);
    const Nanos created = clock->now(); // the key's anchor
    const auto first = k->acquire("a", 4);
    ASSERT_TRUE(first.outcome.acquired);
    EXPECT_FALSE(first.promoted);
    clock->advance(3 * segment);
    ASSERT_TRUE(k->acquire("a", 6).outcome.acquired); // segment 3: 10 in the window
    clock->advance(segment);
    const auto denied = k->acquire("a", 1); // segment 4: segment 0's 4 come back at segment 20
    EXPECT_FALSE(denied.outcome.acquired);
    EXPECT_FALSE(denied.promoted);
    EXPECT_EQ(denied.outcome.retry_after, 16 * segment);
    EXPECT_EQ(k->statistics("a")->current_available_permits, 0);
    auto queued = k->enqueue("a", 5, -1); // more than segment 0 gives back: served at segment 23
    ASSERT_TRUE(queued.enqueued.waiter);
    EXPECT_TRUE(k->acquire("a", 0).promoted); // a full limiter from now on
    clock->advance(16 * segment);             // segment 20: segment 0's 4 are back, not 5
    EXPECT_TRUE(queued.enqueued.waiter->pending());
    clock->advance(3 * segment - 1);
    EXPECT_TRUE(queued.enqueued.waiter->pending());
    clock->advance(1); // segment 23: segment 3's 6 are back too
    ASSERT_FALSE(queued.enqueued.waiter->pending());
    EXPECT_TRUE(queued.enqueued.waiter->outcome().acquired);
    EXPECT_EQ(queued.enqueued.waiter->outcome().tag, created + 23 * segment); // segment 23's start
}

TEST(PerKey, KindsWithoutARuleGetAFullLimiterPerKey) {
    auto clock = make_clock();
    const QueueOptions q{};
    auto make = [clock, q](Nanos, Pair) { return std::make_shared<SlidingWindow>(clock, 2, 10 * kSec, 2, q, false); };
    auto k = std::make_shared<PerKeyLimiter>(clock, PerKeyTemplate{nullptr, q, make}, 1 * kSec, 0);
    const auto a = k->acquire("a", 2);
    ASSERT_TRUE(a.outcome.acquired);
    EXPECT_TRUE(a.promoted);
    EXPECT_FALSE(k->acquire("a", 1).outcome.acquired);
    EXPECT_TRUE(k->acquire("b", 1).outcome.acquired);
    clock->advance(10 * kSec); // a's permits come back at 10 s; idle for longer than 1 s at 11 s
    EXPECT_EQ(k->size(), 2);
    clock->advance(1 * kSec + 1);
    EXPECT_EQ(k->size(), 0);
}

TEST(PerKey, AKeyWhoseCountsReachTheirLimitMovesToAFullLimiterAndKeepsEveryCount) {
    auto clock = make_clock();
    auto k = per_key_of<TokenBucket>(clock, TokenBucketRule(100, 100, 10 * kSec), 60 * kSec);
    k->set_count_limit_for_testing(3); // 2^32 - 1 in use
    for (int i = 0; i < 3; ++i) {
        const auto r = k->acquire("a", 1);
        EXPECT_TRUE(r.outcome.acquired);
        EXPECT_FALSE(r.promoted);
    }
    const auto fourth = k->acquire("a", 1);
    EXPECT_TRUE(fourth.outcome.acquired);
    EXPECT_TRUE(fourth.promoted);
    EXPECT_FALSE(k->acquire("a", 97).outcome.acquired); // the bucket's state came along: 96 left
    const Statistics s = *k->statistics("a");
    EXPECT_EQ(s.current_available_permits, 96);
    EXPECT_EQ(s.total_successful_leases, 4);
    EXPECT_EQ(s.total_failed_leases, 1);
    ASSERT_TRUE(k->acquire("b", 100).outcome.acquired);
    for (int i = 0; i < 3; ++i) { // failures count towards the limit too
        EXPECT_FALSE(k->acquire("b", 1).promoted);
    }
    EXPECT_TRUE(k->acquire("b", 1).promoted);
    EXPECT_EQ(k->statistics("b")->total_failed_leases, 4);
    clock->advance(100 * kSec);
    EXPECT_EQ(k->size(), 0);
    EXPECT_EQ(k->totals().total_successful_leases, 5);
    EXPECT_EQ(k->totals().total_failed_leases, 5);
}

TEST(PerKey, EvictionFollowsEachKeysOwnIdleTimeAcrossManyKeysAndRefunds) {
    // Keys idle at scattered times, some refunded to idle sooner: each is evicted exactly when it
    // has been idle for longer than the timeout, whatever order the checks were set in.
    auto clock = make_clock();
    const Nanos idle = 5 * kSec;
    auto k = per_key_of<TokenBucket>(clock, TokenBucketRule(10, 1, 1 * kSec), idle);
    std::vector<Nanos> full_at(500);
    std::vector<Outcome> granted(500);
    for (int i = 0; i < 500; ++i) {
        const std::int64_t take = 1 + (i * 7919) % 10; // full again `take` seconds from now
        granted[i] = k->acquire(std::to_string(i), take).outcome;
        ASSERT_TRUE(granted[i].acquired);
        full_at[i] = take * kSec;
    }
    for (int i = 0; i < 500; i += 3) { // refunded: full at once
        k->give_back(std::to_string(i), granted[i].permits, granted[i].tag);
        full_at[i] = 0;
    }
    for (Nanos t = 0; t <= 16 * kSec; t += kSec / 2) {
        clock->advance(t - clock->now());
        std::int64_t live = 0;
        for (const Nanos f : full_at) {
            live += clock->now() - f > idle ? 0 : 1;
        }
        ASSERT_EQ(k->size(), live) << "at " << t;
        k->check_invariants();
    }
}

TEST(PerKey, NewKeysAtTheBoundTakeIdlePlacesAndTheTableStaysConsistent) {
    // Each new key at the bound drops an idle partition wherever its check sits in the heap; the
    // checks are out of order by then (each first check at 20 s sets the next at full + 20 s).
    auto clock = make_clock();
    auto tmpl = PerKeyTemplate::of<TokenBucket>(clock, TokenBucketRule(10, 1, 1 * kSec), QueueOptions{});
    auto k = std::make_shared<PerKeyLimiter>(clock, tmpl, 20 * kSec, 300);
    int created = 0;
    auto fill = [&](const char* prefix) {
        for (int i = 0; k->size() < 300; ++i, ++created) {
            ASSERT_TRUE(k->acquire(prefix + std::to_string(i), 1 + (created * 7919) % 10).outcome.acquired);
            clock->advance(kSec / 100);
        }
    };
    fill("old");
    clock->advance(23 * kSec - clock->now()); // every first check done; the keys full at < 3 s evicted
    ASSERT_LT(k->size(), 300);
    fill("refill");
    std::int64_t granted = 0;
    for (int i = 0; i < 500; ++i) {
        granted += k->acquire("new" + std::to_string(i), 1 + (i * 104729) % 10).outcome.acquired ? 1 : 0;
        ASSERT_LE(k->size(), 300);
        k->check_invariants();
        clock->advance(kSec / 100);
    }
    EXPECT_GT(granted, 100); // most found an idle key to replace
    clock->advance(100 * kSec);
    EXPECT_EQ(k->size(), 0);
    k->check_invariants();
}

TEST(PerKey, MemoryCountsRecordsIndexChecksAndLongKeysAndComesBackWhenAllAreGone) {
    auto clock = make_clock();
    auto k = make_per_key(clock, 1, 1 * kSec);
    const auto empty = k->memory();
    EXPECT_EQ(empty.key_bytes, 0U);
    constexpr int kKeys = 10'000;
    std::size_t key_bytes = 0;
    for (int i = 0; i < kKeys; ++i) {
        // Every tenth key too long to sit in its record.
        const std::string key = (i % 10 == 0 ? std::string(40, 'x') : std::string("user-")) + std::to_string(i);
        key_bytes += key.size();
        ASSERT_TRUE(k->acquire(key, 1).outcome.acquired);
    }
    const auto full = k->memory();
    EXPECT_EQ(full.key_bytes, key_bytes);
    const double per_key = static_cast<double>(full.bytes - empty.bytes) / kKeys;
    // A 64-byte record each, plus index slots and check-heap entries (4 bytes each, tables run 57-85%
    // full) and the long keys' heap bytes; chunks of 64 records across 64 shards add up to 63
    // unused records a shard.
    const double long_keys = 45.0 / 10;
    EXPECT_GT(per_key, 64 + 8 + long_keys);
    EXPECT_LT(per_key, 64 + 2 * 4 / 0.57 + long_keys + 64.0 * 63 * 64 / kKeys);
    clock->advance(12 * kSec); // every key idle for longer than the timeout: all evicted
    EXPECT_EQ(k->size(), 0);
    EXPECT_EQ(k->memory().key_bytes, 0U);
    EXPECT_EQ(k->memory().bytes, empty.bytes);
}
