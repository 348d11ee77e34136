// detail::KeyTable on its own: the per-key limiter's records, index and eviction-check heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "permits/key_table.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::detail;

namespace {

std::uint32_t add(KeyTable& t, const std::string& key) {
    return t.add(key, hash_key(key));
}

std::uint32_t find(const KeyTable& t, const std::string& key) {
    return t.find(key, hash_key(key));
}

/// Keys whose hashes share the index's home slot at capacity 16 and the 8-bit tag: each lookup
/// has to compare their bytes, and erasing one shifts the others back.
std::vector<std::string> colliding_keys(std::size_t count) {
    std::map<std::uint64_t, std::vector<std::string>> by_home_and_tag;
    for (int n = 0;; ++n) {
        std::string key = "k" + std::to_string(n);
        const std::uint64_t h = hash_key(key);
        const std::uint64_t home = ((h >> 32) * 16) >> 32;
        auto& keys = by_home_and_tag[home << 8 | ((h >> 8) & 0xff)];
        keys.push_back(std::move(key));
        if (keys.size() == count) {
            return keys;
        }
    }
}

} // namespace

TEST(KeyTable, AddFindRemove) {
    KeyTable t;
    EXPECT_EQ(find(t, "a"), kNoRecord); // empty: no index yet
    const std::uint32_t a = add(t, "a");
    const std::uint32_t b = add(t, "b");
    EXPECT_NE(a, b);
    EXPECT_EQ(find(t, "a"), a);
    EXPECT_EQ(find(t, "b"), b);
    EXPECT_EQ(find(t, "c"), kNoRecord);
    EXPECT_EQ(t.live_count(), 2U);
    EXPECT_TRUE(t.live(a));
    EXPECT_EQ(t.at(a).key.view(), "a");
    EXPECT_EQ(Pair(t.at(a).state), (Pair{0, 0})); // a new record starts from zero
    EXPECT_EQ(t.at(a).successful, 0U);
    EXPECT_EQ(Nanos(t.at(a).check_at), kNever);
    t.remove(a);
    EXPECT_EQ(find(t, "a"), kNoRecord);
    EXPECT_EQ(find(t, "b"), b);
    EXPECT_FALSE(t.live(a));
    EXPECT_EQ(t.live_count(), 1U);
    t.check_invariants();
}

TEST(KeyTable, GrowsAndShrinksItsIndex) {
    KeyTable t;
    std::vector<std::uint32_t> ids;
    for (int n = 0; n < 5000; ++n) {
        ids.push_back(add(t, "key-" + std::to_string(n)));
    }
    t.check_invariants();
    for (int n = 0; n < 5000; ++n) {
        ASSERT_EQ(find(t, "key-" + std::to_string(n)), ids[n]);
    }
    const std::size_t grown = t.memory().bytes;
    for (int n = 0; n < 4900; ++n) {
        t.remove(ids[n]);
    }
    t.check_invariants();
    EXPECT_LT(t.memory().bytes, grown); // the index halves once an eighth full
    for (int n = 4900; n < 5000; ++n) {
        ASSERT_EQ(find(t, "key-" + std::to_string(n)), ids[n]);
    }
    EXPECT_EQ(find(t, "key-0"), kNoRecord);
}

TEST(KeyTable, CollidingKeysAreToldApartAndShiftBackOnErase) {
    const auto keys = colliding_keys(6);
    KeyTable t;
    std::vector<std::uint32_t> ids;
    for (const auto& k : keys) {
        ids.push_back(add(t, k));
    }
    t.check_invariants();
    for (std::size_t n = 0; n < keys.size(); ++n) {
        EXPECT_EQ(find(t, keys[n]), ids[n]);
    }
    // Erasing from the middle of the probe run: those after it must still be found.
    t.remove(ids[2]);
    t.remove(ids[0]);
    t.check_invariants();
    for (std::size_t n = 1; n < keys.size(); ++n) {
        if (n != 2) {
            EXPECT_EQ(find(t, keys[n]), ids[n]);
        }
    }
    EXPECT_EQ(find(t, keys[0]), kNoRecord);
    EXPECT_EQ(find(t, keys[2]), kNoRecord);
}

TEST(KeyTable, LongAndEmptyKeys) {
    KeyTable t;
    const std::string empty;
    const std::string inline14(14, 'x');
    const std::string long15(15, 'x');
    const std::string long_key(1000, 'y');
    const std::string with_nul("a\0b", 3);
    for (const auto& k : {empty, inline14, long15, long_key, with_nul, std::string("a")}) {
        add(t, k);
    }
    t.check_invariants();
    for (const auto& k : {empty, inline14, long15, long_key, with_nul, std::string("a")}) {
        const std::uint32_t i = find(t, k);
        ASSERT_NE(i, kNoRecord) << k.size();
        EXPECT_EQ(t.at(i).key.view(), k);
    }
    EXPECT_EQ(find(t, std::string("a\0c", 3)), kNoRecord);
    EXPECT_EQ(find(t, std::string(13, 'x')), kNoRecord);
    EXPECT_EQ(find(t, std::string(999, 'y')), kNoRecord);
    const auto m = t.memory();
    EXPECT_EQ(m.key_bytes, 0U + 14 + 15 + 1000 + 3 + 1);
    t.remove(find(t, long_key)); // its heap bytes go with it (AddressSanitizer would see a leak)
    EXPECT_EQ(t.memory().key_bytes, 0U + 14 + 15 + 3 + 1);
}

TEST(KeyTable, ChecksComeOutEarliestFirst) {
    KeyTable t;
    std::mt19937_64 rng(7);
    std::vector<std::pair<Nanos, std::uint32_t>> expected;
    for (int n = 0; n < 300; ++n) {
        const std::uint32_t i = add(t, "k" + std::to_string(n));
        const Nanos when = static_cast<Nanos>(rng() % 1000);
        EXPECT_TRUE(t.schedule_check(i, when));
        expected.emplace_back(when, i);
    }
    t.check_invariants();
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(t.next_check(), expected.front().first);
    EXPECT_EQ(t.pop_due_check(expected.front().first - 1), kNoRecord); // none due yet
    Nanos last = -1;
    std::size_t popped = 0;
    for (std::uint32_t i = t.pop_due_check(2000); i != kNoRecord; i = t.pop_due_check(2000)) {
        EXPECT_EQ(Nanos(t.at(i).check_at), kNever); // taken out
        const auto it = std::find_if(expected.begin(), expected.end(), [&](auto& e) { return e.second == i; });
        ASSERT_NE(it, expected.end());
        EXPECT_GE(it->first, last);
        last = it->first;
        ++popped;
    }
    EXPECT_EQ(popped, expected.size());
    EXPECT_EQ(t.next_check(), kNever);
    t.check_invariants();
}

TEST(KeyTable, OnlyASoonerCheckReplacesThePendingOne) {
    KeyTable t;
    const std::uint32_t a = add(t, "a");
    const std::uint32_t b = add(t, "b");
    EXPECT_TRUE(t.schedule_check(a, 100));
    EXPECT_TRUE(t.schedule_check(b, 50));
    EXPECT_FALSE(t.schedule_check(a, 200)); // the earlier one will set the next
    EXPECT_FALSE(t.schedule_check(a, 100));
    EXPECT_TRUE(t.schedule_check(a, 10));
    EXPECT_EQ(t.next_check(), 10);
    EXPECT_EQ(t.pop_due_check(60), a);
    EXPECT_EQ(t.pop_due_check(60), b);
    EXPECT_EQ(t.pop_due_check(60), kNoRecord);
}

TEST(KeyTable, CancelledAndRemovedChecksLeaveTheHeap) {
    KeyTable t;
    std::vector<std::uint32_t> ids;
    for (int n = 0; n < 50; ++n) {
        ids.push_back(add(t, "k" + std::to_string(n)));
        t.schedule_check(ids.back(), 1000 - n * 10);
    }
    t.cancel_check(ids[49]); // the earliest
    t.cancel_check(ids[10]); // one in the middle
    t.remove(ids[48]);       // a record with a pending check
    t.remove(ids[0]);
    t.check_invariants();
    EXPECT_EQ(t.next_check(), 1000 - 47 * 10);
    std::size_t popped = 0;
    while (t.pop_due_check(kNever - 1) != kNoRecord) {
        ++popped;
    }
    EXPECT_EQ(popped, 46U);
    t.check_invariants();
}

TEST(KeyTable, FreedRecordsAreReusedAndTheLastOneOutLetsTheMemoryGo) {
    KeyTable t;
    const std::size_t empty = t.memory().bytes;
    std::vector<std::uint32_t> ids;
    for (int n = 0; n < 100; ++n) {
        ids.push_back(add(t, "k" + std::to_string(n)));
    }
    const std::uint32_t used = t.used();
    EXPECT_EQ(used, 100U);
    t.remove(ids[7]);
    t.remove(ids[30]);
    const std::uint32_t again = add(t, "new");
    EXPECT_TRUE(again == ids[7] || again == ids[30]); // from the free list, not a new record
    add(t, "new2");
    EXPECT_EQ(t.used(), used);
    add(t, "new3"); // the free list is empty: a new record
    EXPECT_EQ(t.used(), used + 1);
    t.check_invariants();
    for (std::uint32_t i = 0; i < t.used(); ++i) {
        if (t.live(i)) {
            t.remove(i);
        }
    }
    EXPECT_EQ(t.live_count(), 0U);
    EXPECT_EQ(t.used(), 0U);
    EXPECT_EQ(t.memory().bytes, empty);
}

TEST(KeyTable, RecordsStayPutAcrossChunks) {
    KeyTable t;
    const std::uint32_t first = add(t, "first");
    const KeyRecord* where = &t.at(first);
    for (std::uint32_t n = 0; n < 3 * KeyTable::kChunk; ++n) {
        add(t, "k" + std::to_string(n));
    }
    EXPECT_EQ(&t.at(first), where); // chunks never move
    EXPECT_EQ(find(t, "first"), first);
}

TEST(KeyTable, ClearFreesPromotedRecordsFullLimiters) {
    auto clock = permits::testing::make_clock();
    auto limiter = std::make_shared<TokenBucket>(clock, 1, 1, permits::testing::kSec, QueueOptions{}, false);
    std::weak_ptr<Limiter> watch = limiter;
    {
        KeyTable t;
        const std::uint32_t i = add(t, "a");
        t.at(i).set_full(new std::shared_ptr<Limiter>(std::move(limiter)));
        t.at(i).key.set_flags(kLive | kPromoted);
        EXPECT_EQ(t.at(i).limiter().get(), watch.lock().get());
        add(t, "b");
    } // the table's destructor
    EXPECT_TRUE(watch.expired());
}
