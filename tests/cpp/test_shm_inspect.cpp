// Inspecting a shared-memory segment from outside (shm_inspect.hpp): every kind's parameters and
// availability, the holders of concurrency permits (a killed one judged dead, its permits left for
// the engine to reclaim), and never a segment created, changed, or a damaged one followed.
#if defined(__linux__)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "permits/shm_inspect.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_limiters.hpp"
#include "shm_support.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::shm;
using permits::testing::kSec;
using permits::testing::Named;
using permits::testing::unique_name;

namespace {

const QueueOptions kNoQueue{0, QueueOrder::OldestFirst};

const SlotInfo& slot_named(const SegmentInfo& info, const std::string& name) {
    for (const auto& s : info.slots) {
        if (s.name == name) {
            return s;
        }
    }
    throw std::logic_error("no slot " + name);
}

std::int64_t param(const SlotInfo& s, const std::string& name) {
    for (const auto& p : s.params) {
        if (p.name == name) {
            return p.value;
        }
    }
    throw std::logic_error("no parameter " + name);
}

NamedSlot& raw_slot(Store& s, const char* name) {
    if (NamedSlot* slot = s.segment().find(name)) {
        return *slot;
    }
    throw std::logic_error("no such slot");
}

void overwrite(AtomicPair& word, Pair value) {
    Pair seen = word.load();
    while (!word.compare_exchange(seen, value)) {
    }
}

bool exists(const std::string& name) {
    return std::filesystem::exists("/dev/shm/permits." + name);
}

} // namespace

TEST(ShmInspect, EveryKindIsReadWithItsParametersAndWhatIsAvailable) {
    Named n("kinds");
    Store& s = *n.store;
    auto tb = s.token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue);
    auto fw = s.fixed_window("fw", FixedWindowRule(4, 2 * kSec), kNoQueue);
    auto sw = s.sliding_window("sw", 6, kSec, 3, kNoQueue);
    auto swc = s.sliding_window_counter("swc", SlidingWindowCounterRule(8, kSec), kNoQueue);
    auto c = s.concurrency("conc", 5, 3600 * kSec, kNoQueue);
    ASSERT_TRUE(tb->acquire(3).acquired);
    ASSERT_TRUE(fw->acquire(1).acquired);
    ASSERT_TRUE(sw->acquire(2).acquired);
    ASSERT_TRUE(swc->acquire(8).acquired);
    const Outcome held = c->acquire(2);
    ASSERT_TRUE(held.acquired);

    const SegmentInfo info = describe(n.name, n.clock->now());
    EXPECT_EQ(info.name, n.name);
    EXPECT_EQ(info.capacity, 64U);
    EXPECT_EQ(info.size, s.segment().size());
    EXPECT_EQ(info.used_bytes, s.segment().header().arena_used);
    EXPECT_GT(info.arena_bytes, info.used_bytes);
    EXPECT_EQ(info.clock, ClockKind::Manual);
    ASSERT_EQ(info.slots.size(), 5U);

    const SlotInfo& t = slot_named(info, "tb");
    EXPECT_EQ(t.kind, "token_bucket");
    EXPECT_EQ(param(t, "token_limit"), 5);
    EXPECT_EQ(param(t, "tokens_per_period"), 5);
    EXPECT_EQ(param(t, "replenishment_period"), kSec);
    EXPECT_TRUE(t.params[2].duration);
    EXPECT_EQ(t.available, 2);
    EXPECT_EQ(t.limit, 5);
    EXPECT_EQ(slot_named(info, "fw").available, 3);
    EXPECT_EQ(param(slot_named(info, "fw"), "window"), 2 * kSec);
    EXPECT_EQ(slot_named(info, "sw").available, 4);
    EXPECT_EQ(param(slot_named(info, "sw"), "segments_per_window"), 3);
    EXPECT_EQ(slot_named(info, "swc").available, 0);
    EXPECT_EQ(slot_named(info, "swc").kind, "sliding_window_counter");

    const SlotInfo& conc = slot_named(info, "conc");
    EXPECT_EQ(conc.kind, "concurrency");
    EXPECT_EQ(param(conc, "permit_limit"), 5);
    EXPECT_EQ(param(conc, "lease_ttl"), 3600 * kSec);
    EXPECT_EQ(conc.available, 3);
    ASSERT_EQ(conc.holders.size(), 1U);
    EXPECT_EQ(conc.holders[0].pid, static_cast<std::uint64_t>(::getpid()));
    EXPECT_EQ(conc.holders[0].permits, 2);
    EXPECT_TRUE(conc.holders[0].alive);
    ASSERT_EQ(info.holders.size(), 1U); // the segment's holder table: this process, its 2 uses
    EXPECT_EQ(info.holders[0].pid, static_cast<std::uint64_t>(::getpid()));
    EXPECT_EQ(info.holders[0].permits, 2);

    // Later on the same clock: the time-based kinds refill, the lease still holds.
    n.clock->advance(2 * kSec);
    const SegmentInfo later = describe(n.name, n.clock->now());
    EXPECT_EQ(slot_named(later, "tb").available, 5);
    EXPECT_EQ(slot_named(later, "fw").available, 4);
    EXPECT_EQ(slot_named(later, "swc").available, 8);
    EXPECT_EQ(slot_named(later, "conc").available, 3);
    c->give_back(2, held.tag);
    const SegmentInfo freed = describe(n.name, n.clock->now());
    EXPECT_EQ(slot_named(freed, "conc").available, 5);
    EXPECT_TRUE(slot_named(freed, "conc").holders.empty());
    EXPECT_TRUE(freed.holders.empty());
}

TEST(ShmInspect, AManualClocksSegmentHasTimeBasedAvailabilityOnlyAtAGivenTime) {
    Named n("manual");
    n.store->token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue)->acquire(1);
    n.store->concurrency("c", 2, 3600 * kSec, kNoQueue);
    const SegmentInfo info = describe(n.name); // a ManualClock's time is its process's own
    EXPECT_FALSE(slot_named(info, "tb").available.has_value());
    EXPECT_EQ(slot_named(info, "c").available, 2); // (no time in it)
}

TEST(ShmInspect, APerKeyTablesKeysAndHoldersAreCounted) {
    Named n("table");
    KeyTable::Template tmpl{params_of_concurrency(3, 3600 * kSec), kNoQueue, 3600 * kSec};
    auto table = KeyTable::open(n.store, "per-user", tmpl, 10, kSec);
    ASSERT_TRUE(table->limiter_for("alice")->acquire(2).acquired);
    ASSERT_TRUE(table->limiter_for("bob")->acquire(1).acquired);
    KeyTable::Template fixed{params_of(FixedWindowRule(4, kSec)), kNoQueue, 0};
    auto windows = KeyTable::open(n.store, "per-ip", fixed, 5, kSec);
    ASSERT_TRUE(windows->limiter_for("10.0.0.1")->acquire(1).acquired);

    const SegmentInfo info = describe(n.name, n.clock->now());
    const SlotInfo& t = slot_named(info, "per-user");
    EXPECT_EQ(t.kind, "partitioned");
    EXPECT_EQ(t.key_kind, "concurrency");
    EXPECT_EQ(t.keys, 2);
    EXPECT_EQ(param(t, "permit_limit"), 3);
    EXPECT_EQ(param(t, "max_partitions"), 10);
    EXPECT_EQ(param(t, "idle_timeout"), kSec);
    EXPECT_EQ(t.bytes, table->bytes());
    EXPECT_FALSE(t.available.has_value()); // (per key)
    ASSERT_EQ(t.holders.size(), 1U);
    EXPECT_EQ(t.holders[0].pid, static_cast<std::uint64_t>(::getpid()));
    EXPECT_EQ(t.holders[0].permits, 3); // over both keys
    const SlotInfo& w = slot_named(info, "per-ip");
    EXPECT_EQ(w.key_kind, "fixed_window");
    EXPECT_EQ(w.keys, 1);
    EXPECT_EQ(param(w, "max_partitions"), 5);
    EXPECT_TRUE(w.holders.empty());
}

TEST(ShmInspect, AKilledHolderIsJudgedDeadAndItsPermitsAreLeftToTheEngine) {
    Named n("dead");
    auto c = n.store->concurrency("c", 5, 3600 * kSec, kNoQueue);
    const pid_t child = ::fork();
    if (child == 0) {
        auto mine = std::make_shared<Store>(Segment::open(n.name, {64, 0600, ClockKind::Manual}), n.clock);
        const bool ok = mine->concurrency("c", 5, 3600 * kSec, kNoQueue)->acquire(2).acquired;
        ::_exit(ok ? 0 : 1); // its lease never released
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    const SegmentInfo info = describe(n.name, n.clock->now());
    const SlotInfo& s = slot_named(info, "c");
    EXPECT_EQ(s.available, 3); // inspection reclaims nothing
    ASSERT_EQ(s.holders.size(), 1U);
    EXPECT_EQ(s.holders[0].pid, static_cast<std::uint64_t>(child));
    EXPECT_EQ(s.holders[0].permits, 2);
    EXPECT_FALSE(s.holders[0].alive);
    ASSERT_EQ(info.holders.size(), 1U);
    EXPECT_FALSE(info.holders[0].alive);

    // A take that needs them has the engine give them back; the inspector then sees no holder.
    ASSERT_TRUE(c->acquire(5).acquired);
    const SegmentInfo after = describe(n.name, n.clock->now());
    EXPECT_EQ(slot_named(after, "c").available, 0);
    ASSERT_EQ(slot_named(after, "c").holders.size(), 1U);
    EXPECT_EQ(slot_named(after, "c").holders[0].pid, static_cast<std::uint64_t>(::getpid()));
    EXPECT_TRUE(slot_named(after, "c").holders[0].alive);
}

TEST(ShmInspect, WritersAtWorkNeverMakeItLookDamaged) {
    // Lock-free writers change the state between any two reads: each view is one the engine could
    // have had (within the limits, no damage reported), if a moment stale.
    Named n("busy");
    auto c = n.store->concurrency("c", 4, 3600 * kSec, kNoQueue);
    auto tb = n.store->token_bucket("tb", TokenBucketRule(4, 4, kSec), kNoQueue);
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w) {
        writers.emplace_back([&, w] {
            while (!stop.load()) {
                const Outcome o = c->acquire(1 + (w % 2));
                if (o.acquired) {
                    c->give_back(1 + (w % 2), o.tag);
                }
                const Outcome t = tb->acquire(1);
                if (t.acquired) {
                    tb->give_back(1, t.tag);
                }
            }
        });
    }
    for (int i = 0; i < 300; ++i) {
        const SegmentInfo info = describe(n.name, n.clock->now());
        for (const SlotInfo& s : info.slots) {
            ASSERT_TRUE(s.damage.empty()) << s.name << ": " << s.damage;
            ASSERT_TRUE(s.available.has_value());
            EXPECT_GE(*s.available, 0);
            EXPECT_LE(*s.available, 4);
            std::int64_t held = 0;
            for (const HolderInfo& h : s.holders) {
                EXPECT_EQ(h.pid, static_cast<std::uint64_t>(::getpid()));
                EXPECT_TRUE(h.alive);
                held += h.permits;
            }
            EXPECT_LE(held, 4);
        }
    }
    stop.store(true);
    for (auto& t : writers) {
        t.join();
    }
    EXPECT_EQ(slot_named(describe(n.name, n.clock->now()), "c").available, 4);
}

TEST(ShmInspect, ASegmentThatDoesNotExistIsNeverCreated) {
    const std::string name = unique_name("absent");
    try {
        describe(name);
        FAIL() << "described a missing segment";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ENOENT);
        EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(exists(name));
    EXPECT_THROW(describe("../etc"), std::invalid_argument);
    EXPECT_THROW(describe(""), std::invalid_argument);
}

TEST(ShmInspect, InspectionWritesNothing) {
    Named n("readonly");
    auto c = n.store->concurrency("c", 5, 3600 * kSec, kNoQueue);
    ASSERT_TRUE(c->acquire(2).acquired);
    n.store->token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue)->acquire(1);
    KeyTable::Template tmpl{params_of_concurrency(3, 3600 * kSec), kNoQueue, 3600 * kSec};
    ASSERT_TRUE(KeyTable::open(n.store, "keys", tmpl, 10, kSec)->limiter_for("k")->acquire(1).acquired);
    const Segment& seg = n.store->segment();
    const std::vector<char> before(seg.base(), seg.base() + seg.size());
    describe(n.name, n.clock->now());
    EXPECT_EQ(std::memcmp(before.data(), seg.base(), seg.size()), 0);
}

TEST(ShmInspect, AForeignFileIsRefusedWithAMessage) {
    const std::string name = unique_name("foreign");
    {
        std::ofstream out("/dev/shm/permits." + name, std::ios::binary);
        const std::string text(sizeof(Header) + 4096, 'x'); // another program's data under our prefix
        out << text;
    }
    try {
        describe(name);
        ADD_FAILURE() << "a foreign file was described";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("is not a permits segment"), std::string::npos) << e.what();
    }
    std::filesystem::remove("/dev/shm/permits." + name);
}

TEST(ShmInspect, ADamagedSlotIsReportedAndTheOthersRead) {
    Named n("damaged");
    auto tb = n.store->token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue);
    auto c = n.store->concurrency("c", 2, 3600 * kSec, kNoQueue);
    n.store->fixed_window("fw", FixedWindowRule(4, kSec), kNoQueue);
    overwrite(*n.store->segment().at<AtomicPair>(raw_slot(*n.store, "tb").offset), Pair{0, 1000}); // 1000 tokens of 5
    const ConcurrencyView v = ConcurrencyView::over(n.store->segment().at<char>(raw_slot(*n.store, "c").offset), 2);
    overwrite(v.entry(9), Pair{7, 0}); // a holder said to hold more than the limit
    NamedSlot& fw = raw_slot(*n.store, "fw");
    const std::uint64_t offset = fw.offset;
    fw.offset = n.store->segment().size(); // its data would lie past the end

    const SegmentInfo info = describe(n.name, n.clock->now());
    const SlotInfo& t = slot_named(info, "tb");
    EXPECT_FALSE(t.damage.empty());
    EXPECT_FALSE(t.available.has_value());
    EXPECT_NE(slot_named(info, "c").damage.find("holder 9 holds 7"), std::string::npos) << slot_named(info, "c").damage;
    EXPECT_NE(slot_named(info, "fw").damage.find("do not add up"), std::string::npos);
    fw.offset = offset;
    fw.kind = static_cast<Kind>(77);
    EXPECT_NE(slot_named(describe(n.name), "fw").damage.find("kind, 77"), std::string::npos);
    fw.kind = Kind::KeyTable; // a table's geometry where a window's state is
    EXPECT_FALSE(slot_named(describe(n.name), "fw").damage.empty());
}

TEST(ShmInspect, ADamagedHolderTableIsRefusedAsOpenRefusesIt) {
    Named n("holders");
    HolderSlot& slot = n.store->segment().header().holders[3];
    overwrite(slot.word, Pair{static_cast<std::int64_t>(::getpid()), -7});
    try {
        describe(n.name);
        ADD_FAILURE() << "a damaged holder table was described";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("holder 3"), std::string::npos) << e.what();
    }
    overwrite(slot.word, Pair{0, 0});
}

#endif // __linux__
