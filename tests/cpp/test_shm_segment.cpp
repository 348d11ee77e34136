// The shared-memory segment and its limiters (Linux): creation and attachment, parameters
// checked, state shared by two mappings, the concurrency ledger's protocol (a change left pending
// by a process killed between its two steps), dead holders, the per-key table, and creation by
// processes that race, stall or die while creating.
#if defined(__linux__)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "permits/shm_key_table.hpp"
#include "permits/shm_limiters.hpp"
#include "shm_support.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::shm;
using permits::testing::kSec;
using permits::testing::make_clock;
using permits::testing::Two;
using permits::testing::unique_name;

namespace {

const QueueOptions kNoQueue{0, QueueOrder::OldestFirst};

} // namespace

TEST(ShmSegment, TwoMappingsShareOneTokenBucket) {
    Two t("tb");
    auto x = t.a->token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue);
    auto y = t.b->token_bucket("tb", TokenBucketRule(5, 5, kSec), kNoQueue);
    EXPECT_NE(&t.a->segment().header(), &t.b->segment().header()); // two addresses, one state
    EXPECT_TRUE(x->acquire(3).acquired);
    EXPECT_TRUE(y->acquire(2).acquired);
    EXPECT_FALSE(x->acquire(1).acquired);
    EXPECT_EQ(y->available_permits(), 0);
    t.clock->advance(kSec);
    EXPECT_EQ(x->available_permits(), 5);
}

TEST(ShmSegment, EveryTimedKindIsSharedExactly) {
    Two t("kinds");
    auto fw1 = t.a->fixed_window("fw", FixedWindowRule(4, kSec), kNoQueue);
    auto fw2 = t.b->fixed_window("fw", FixedWindowRule(4, kSec), kNoQueue);
    auto sw1 = t.a->sliding_window("sw", 4, kSec, 4, kNoQueue);
    auto sw2 = t.b->sliding_window("sw", 4, kSec, 4, kNoQueue);
    auto c1 = t.a->sliding_window_counter("swc", SlidingWindowCounterRule(4, kSec), kNoQueue);
    auto c2 = t.b->sliding_window_counter("swc", SlidingWindowCounterRule(4, kSec), kNoQueue);
    for (auto [l1, l2] :
         {std::pair<Limiter*, Limiter*>{fw1.get(), fw2.get()}, {sw1.get(), sw2.get()}, {c1.get(), c2.get()}}) {
        int granted = 0;
        for (int i = 0; i < 6; ++i) {
            granted += l1->acquire(1).acquired ? 1 : 0;
            granted += l2->acquire(1).acquired ? 1 : 0;
        }
        EXPECT_EQ(granted, 4);
    }
}

TEST(ShmSegment, OtherParametersForANameAreRefusedNamingTheDifference) {
    Two t("params");
    t.a->token_bucket("x", TokenBucketRule(5, 5, kSec), kNoQueue);
    try {
        t.b->token_bucket("x", TokenBucketRule(6, 5, kSec), kNoQueue);
        FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("has token_limit=5, not token_limit=6"), std::string::npos) << e.what();
    }
    try {
        t.b->fixed_window("x", FixedWindowRule(5, kSec), kNoQueue);
        FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("is a token_bucket, not a fixed_window"), std::string::npos) << e.what();
    }
}

TEST(ShmSegment, ANameIsChecked) {
    for (const char* bad : {"", ".x", "a/b", "a b"}) {
        EXPECT_THROW(Segment::check_name(bad), std::invalid_argument) << bad;
    }
    EXPECT_NO_THROW(Segment::check_name("svc-1.limits_A"));
}

TEST(ShmSegment, AnotherCapacityOrClockIsRefused) {
    const std::string name = unique_name("cap");
    auto seg = Segment::open(name, {10, 0600, ClockKind::Monotonic});
    EXPECT_THROW(Segment::open(name, {20, 0600, ClockKind::Monotonic}), std::invalid_argument);
    EXPECT_THROW(Segment::open(name, {10, 0600, ClockKind::Manual}), std::invalid_argument);
    EXPECT_TRUE(Segment::unlink(name));
    EXPECT_FALSE(Segment::unlink(name));
}

// ---- the concurrency ledger ----

namespace {
struct Ledger {
    // The view's memory, as aligned as a segment's (16-byte state words).
    std::unique_ptr<AtomicPair[]> words{new AtomicPair[ConcurrencyView::bytes() / sizeof(AtomicPair) + 1]};
    ConcurrencyView view;
    explicit Ledger(std::int64_t limit) {
        view = ConcurrencyView::over(reinterpret_cast<char*>(words.get()), limit);
        view.init(0);
    }
};
} // namespace

TEST(ShmConcurrency, TheLedgerAddsUpToThePermitsHeld) {
    Ledger l(5);
    EXPECT_TRUE(l.view.take(0, 2));
    EXPECT_TRUE(l.view.take(1, 3));
    EXPECT_FALSE(l.view.take(2, 1));
    EXPECT_EQ(l.view.held_by(0), 2);
    EXPECT_EQ(l.view.held_by(1), 3);
    EXPECT_EQ(l.view.give_back(1, 1, 0), 1);
    EXPECT_EQ(l.view.available(), 1);
    EXPECT_EQ(l.view.give_back(0, 10, 0), 2); // never more than the holder holds
    EXPECT_EQ(l.view.available(), 3);
    EXPECT_EQ(l.view.held_by(0), 0);
}

TEST(ShmConcurrency, AChangeLeftPendingByAKilledProcessIsAppliedOnceByTheNext) {
    Ledger l(4);
    ASSERT_TRUE(l.view.take(0, 1));
    // A process that made its compare-and-swap and died before applying it to the ledger: the state
    // says 3 available with a pending +2 for holder 1; the ledger does not know yet.
    Pair s = l.view.state->load();
    const std::int64_t seq = static_cast<std::int64_t>(static_cast<std::uint64_t>(s.a) >> 16);
    const Pair pending{static_cast<std::int64_t>((static_cast<std::uint64_t>(seq + 1) << 16) | 2U),
                       static_cast<std::int64_t>((static_cast<std::uint64_t>(1) << 32) | 2U)};
    ASSERT_TRUE(l.view.state->compare_exchange(s, pending));
    EXPECT_EQ(l.view.held_by(1), 0);
    l.view.settle(pending);
    l.view.settle(pending); // a second helper changes nothing
    EXPECT_EQ(l.view.held_by(1), 2);
    EXPECT_TRUE(l.view.take(2, 1));
    EXPECT_FALSE(l.view.take(2, 1));
    EXPECT_EQ(l.view.held_by(0) + l.view.held_by(1) + l.view.held_by(2), 4);
}

TEST(ShmConcurrency, AKilledHoldersPermitsComeBack) {
    Two t("dead");
    auto parent = t.a->concurrency("c", 2, 3600 * kSec, QueueOptions{0, QueueOrder::OldestFirst});
    const pid_t pid = ::fork();
    if (pid == 0) {
        // The child takes both permits through its own mapping and waits to be killed.
        const bool ok = t.b->concurrency("c", 2, 3600 * kSec, kNoQueue)->acquire(2).acquired;
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // Its leases were never released (_exit): the permits come back once its pid is found dead,
    // long before lease_ttl.
    Outcome o;
    for (int i = 0; i < 200 && !(o = parent->acquire(2)).acquired; ++i) {
        ::usleep(10000);
    }
    EXPECT_TRUE(o.acquired);
}

TEST(ShmConcurrency, AForkedChildsCopyOfALeaseReleasesNothing) {
    Two t("forkcopy");
    auto lim = t.a->concurrency("c", 1, 3600 * kSec, kNoQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    const pid_t pid = ::fork();
    if (pid == 0) {
        lim->give_back(1, held.tag); // the parent's lease, copied: not the child's to release
        ::_exit(lim->available_permits() == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(lim->available_permits(), 0);
    lim->give_back(1, held.tag);
    EXPECT_EQ(lim->available_permits(), 1);
}

// ---- the per-key table ----

namespace {
std::shared_ptr<KeyTable> table(Store& s, const Params& p, std::int64_t max, Nanos idle) {
    KeyTable::Template tmpl{p, kNoQueue, 3600 * kSec};
    return KeyTable::open(s.shared_from_this(), "keys", tmpl, max, idle);
}
} // namespace

TEST(ShmKeyTable, KeysAreSharedByMappingsAndBounded) {
    Two t("keys");
    auto ta = table(*t.a, params_of(FixedWindowRule(2, kSec)), 3, 10 * kSec);
    auto tb = table(*t.b, params_of(FixedWindowRule(2, kSec)), 3, 10 * kSec);
    auto a1 = ta->limiter_for("alice");
    auto a2 = tb->limiter_for("alice");
    EXPECT_TRUE(a1->acquire(2).acquired);
    EXPECT_FALSE(a2->acquire(1).acquired);
    EXPECT_TRUE(tb->limiter_for("bob")->acquire(1).acquired);
    EXPECT_TRUE(ta->limiter_for(std::string(300, 'k'))->acquire(1).acquired); // a long key
    EXPECT_EQ(ta->size(), 3);
    const Outcome refused = ta->limiter_for("carol")->acquire(1);
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.reason, Reason::PartitionLimit);
    t.clock->advance(12 * kSec); // every key idle for longer than 10 s
    EXPECT_TRUE(ta->limiter_for("carol")->acquire(1).acquired);
    EXPECT_EQ(tb->evict_idle(), 2);
    EXPECT_EQ(ta->size(), 1);
}

TEST(ShmKeyTable, ConcurrencyKeysRecordTheirHolders) {
    Two t("ckeys");
    auto keys = table(*t.a, params_of_concurrency(2, 3600 * kSec), 8, kSec);
    auto k = keys->limiter_for("k");
    const Outcome first = k->acquire(2);
    ASSERT_TRUE(first.acquired);
    EXPECT_FALSE(keys->limiter_for("k")->acquire(1).acquired);
    k->give_back(1, first.tag);
    EXPECT_EQ(k->available_permits(), 1);
    // Its holder's slot freed (as once a dead holder is reclaimed): its entries are stale at once.
    Segment& seg = t.a->segment();
    Holding h;
    ASSERT_TRUE(seg.current(h));
    seg.free_holder(h.index, seg.header().holders[h.index].tag());
    EXPECT_EQ(k->available_permits(), 2);
}

#endif // __linux__

#if defined(__linux__)
// ---- liveness and the robust lock ----

namespace {
void set_tag(HolderSlot& slot, std::uint64_t tag) {
    Pair seen = slot.word.load();
    while (!slot.word.compare_exchange(seen, Pair{static_cast<std::int64_t>(tag), seen.b})) {
    }
}
} // namespace

TEST(ShmHolders, AHolderInAnotherPidNamespaceIsJudgedByItsHeartbeat) {
    HolderSlot slot{};
    // pid 1 exists in every namespace; recorded as another namespace's, only the heartbeat counts.
    set_tag(slot, 1);
    slot.pid_ns.store(1);
    slot.start_time.store(1);
    const Nanos now = monotonic_now();
    slot.heartbeat.store(now - 5 * kSec);
    EXPECT_FALSE(holder_dead(slot, 10 * kSec, now));
    EXPECT_TRUE(holder_dead(slot, 2 * kSec, now));
}

TEST(ShmHolders, AHolderInOurNamespaceIsJudgedByItsPidAndStartTime) {
    const ProcessId me = ProcessId::self();
    HolderSlot slot{};
    slot.pid_ns.store(me.pid_ns);
    const pid_t child = ::fork();
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    set_tag(slot, static_cast<std::uint64_t>(child));
    slot.heartbeat.store(1); // long ago: the pid decides, not the heartbeat
    EXPECT_FALSE(holder_dead(slot, kSec, monotonic_now()));
    slot.start_time.store(12345); // another start time: the pid was reused
    EXPECT_TRUE(holder_dead(slot, kSec, monotonic_now()));
    // ... unless it still beats: where /proc lies to a process about itself (qemu-user), the start
    // time it recorded is not the one others read.
    slot.heartbeat.store(monotonic_now());
    EXPECT_FALSE(holder_dead(slot, kSec, monotonic_now()));
    EXPECT_FALSE(holder_dead(slot, kNever, monotonic_now()));
    slot.heartbeat.store(monotonic_now() - 2 * kSec);
    EXPECT_TRUE(holder_dead(slot, kSec, monotonic_now()));
    EXPECT_FALSE(holder_dead(slot, kNever, monotonic_now())); // (kNever: only a certain death)
    slot.heartbeat.store(1);
    slot.start_time.store(0);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(holder_dead(slot, kSec, monotonic_now()));
}

TEST(ShmHolders, ALockWhoseHolderDiedIsTakenOn) {
    Two t("robust");
    auto keys = table(*t.a, params_of(FixedWindowRule(5, kSec)), 8, kSec);
    ASSERT_TRUE(keys->limiter_for("k")->acquire(1).acquired);
    const pid_t child = ::fork();
    if (child == 0) {
        // Dies holding the segment's lock (after using a key: its shard's lock was taken and let go).
        RobustLock held(&t.b->segment().header().lock);
        auto other = table(*t.b, params_of(FixedWindowRule(5, kSec)), 8, kSec);
        ::_exit(other->limiter_for("k")->acquire(1).acquired ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // The next locker of the segment's lock (a new name) goes on, and the key counts the child's grant.
    EXPECT_TRUE(t.a->fixed_window("after", FixedWindowRule(1, kSec), kNoQueue)->acquire(1).acquired);
    EXPECT_EQ(keys->limiter_for("k")->available_permits(), 3);
}
#endif // __linux__

#if defined(__linux__)
TEST(ShmSegment, ACorruptedSlotRaisesNeverCrashes) {
    Two t("corrupt");
    t.a->token_bucket("x", TokenBucketRule(5, 5, kSec), kNoQueue);
    NamedSlot* slot = nullptr;
    for (auto& s : t.a->segment().header().named) {
        if (s.ready.load() == 1 && std::string(s.name) == "x") {
            slot = &s;
        }
    }
    ASSERT_NE(slot, nullptr);
    const std::uint64_t offset = slot->offset;
    slot->offset = t.a->segment().size(); // its data would lie past the end
    EXPECT_THROW(t.b->token_bucket("x", TokenBucketRule(5, 5, kSec), kNoQueue), std::invalid_argument);
    slot->offset = offset;
    slot->kind = static_cast<Kind>(99);
    EXPECT_THROW(t.b->token_bucket("x", TokenBucketRule(5, 5, kSec), kNoQueue), std::invalid_argument);
}
#endif // __linux__

#if defined(__linux__)
// ---- processes beyond the holder slots and beyond a key's entries (issue 36, items 1 and 5) ----

namespace {
/// Children forked one after another, each running `body` (its one-byte report is written to the
/// parent), then kept alive until the parent lets them all go: live processes, never reaped early.
class Children {
public:
    Children() {
        EXPECT_EQ(::pipe(report_), 0);
        EXPECT_EQ(::pipe(command_), 0);
    }
    ~Children() { finish(); }
    Children(const Children&) = delete;
    Children& operator=(const Children&) = delete;

    /// Forks a child running `body` (its byte: what it reports); returns the byte it reported. After
    /// reporting, the child runs `on_command` once for each byte it reads from the command pipe
    /// (one child takes each byte), then lives until finish().
    template <class Body, class OnCommand> char spawn(Body body, OnCommand on_command) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(command_[1]);
            char out = 'x';
            try {
                out = body();
            } catch (...) {
                out = 'E'; // an exception: what must never happen
            }
            (void)!::write(report_[1], &out, 1);
            char c = 0;
            if (::read(command_[0], &c, 1) == 1) {
                char done = 'x';
                try {
                    done = on_command();
                } catch (...) {
                    done = 'E';
                }
                (void)!::write(report_[1], &done, 1);
            }
            ::_exit(0);
        }
        pids_.push_back(pid);
        return next_report();
    }
    /// Has one child (whichever reads it) run its command; returns its report.
    char command_one() {
        const char c = 'c';
        EXPECT_EQ(::write(command_[1], &c, 1), 1);
        return next_report();
    }
    void finish() {
        if (command_[1] >= 0) {
            ::close(command_[1]); // children waiting for a command read EOF, report nothing and exit
            command_[1] = -1;
        }
        for (const pid_t pid : pids_) {
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
        pids_.clear();
    }

private:
    char next_report() {
        char c = 0;
        return ::read(report_[0], &c, 1) == 1 ? c : '?';
    }
    int report_[2]{-1, -1};
    int command_[2]{-1, -1};
    std::vector<pid_t> pids_;
};
} // namespace

TEST(ShmHolders, LiveProcessesThatHoldNothingKeepNoSlot) {
    // More live processes than holder slots, each taking and giving back one permit of a limit of 4:
    // a process that holds nothing keeps no slot, so every one of them is served.
    Two t("recycle");
    auto lim = t.a->concurrency("c", 4, 3600 * kSec, kNoQueue);
    Children kids;
    std::string reports;
    for (std::size_t i = 0; i < kMaxHolders + 8; ++i) {
        reports += kids.spawn(
            [&] {
                const Outcome o = lim->acquire(1);
                if (!o.acquired) {
                    return '0';
                }
                lim->give_back(1, o.tag);
                return '1';
            },
            [] { return 'x'; });
    }
    EXPECT_EQ(reports, std::string(kMaxHolders + 8, '1'));
    EXPECT_EQ(lim->available_permits(), 4);
}

TEST(ShmHolders, MoreProcessesHoldingThanSlotsAreRefusedWithAReasonNeverAnException) {
    Two t("slots");
    auto lim = t.a->concurrency("c", 1000, 3600 * kSec, kNoQueue);
    Children kids;
    std::string reports;
    std::shared_ptr<Outcome> held = std::make_shared<Outcome>();
    for (std::size_t i = 0; i < kMaxHolders; ++i) {
        reports += kids.spawn(
            [&] {
                *held = lim->acquire(1);
                return held->acquired ? '1' : '0';
            },
            [&] {
                lim->give_back(1, held->tag);
                return 'r';
            });
    }
    ASSERT_EQ(reports, std::string(kMaxHolders, '1'));
    // Every slot is held by a live process at this moment: this one's request is refused, with the
    // reason, and no retry_after (a release, not time, frees a slot).
    Outcome refused;
    EXPECT_NO_THROW(refused = lim->acquire(1));
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.reason, Reason::ProcessLimit);
    EXPECT_EQ(refused.retry_after, -1);
    EXPECT_EQ(lim->available_permits(), 1000 - static_cast<std::int64_t>(kMaxHolders));
    // One holder gives back its permit: its slot is free, and this process is served.
    EXPECT_EQ(kids.command_one(), 'r');
    const Outcome served = lim->acquire(1);
    EXPECT_TRUE(served.acquired);
    lim->give_back(1, served.tag);
}

TEST(ShmKeyTable, ManyProcessesHoldOneKeyUpToItsLimit) {
    Two t("manykey");
    auto keys = table(*t.a, params_of_concurrency(100, 3600 * kSec), 8, kSec);
    auto k = keys->limiter_for("k");
    Children kids;
    std::string reports;
    std::shared_ptr<Outcome> held = std::make_shared<Outcome>();
    constexpr int kProcesses = 24; // more than the 8 a key once recorded
    for (int i = 0; i < kProcesses; ++i) {
        reports += kids.spawn(
            [&] {
                *held = k->acquire(1);
                return held->acquired ? '1' : '0';
            },
            [&] {
                k->give_back(1, held->tag);
                return 'r';
            });
    }
    EXPECT_EQ(reports, std::string(kProcesses, '1'));
    EXPECT_EQ(k->available_permits(), 100 - kProcesses);
    EXPECT_EQ(kids.command_one(), 'r');
    EXPECT_EQ(k->available_permits(), 100 - kProcesses + 1);
}

TEST(ShmKeyTable, ProcessesBeyondAKeysEntriesAreRefusedWithAReasonThenServed) {
    Two t("keybound");
    auto keys = table(*t.a, params_of_concurrency(100, 3600 * kSec), 8, kSec);
    auto k = keys->limiter_for("k");
    Children kids;
    std::string reports;
    std::shared_ptr<Outcome> held = std::make_shared<Outcome>();
    for (std::size_t i = 0; i < kKeyHolders; ++i) {
        reports += kids.spawn(
            [&] {
                *held = k->acquire(1);
                return held->acquired ? '1' : '0';
            },
            [&] {
                k->give_back(1, held->tag);
                return 'r';
            });
    }
    ASSERT_EQ(reports, std::string(kKeyHolders, '1'));
    const Outcome refused = k->acquire(1);
    EXPECT_FALSE(refused.acquired);
    EXPECT_EQ(refused.reason, Reason::ProcessLimit); // not limit_reached: permits are free
    EXPECT_EQ(refused.retry_after, -1);
    EXPECT_EQ(k->available_permits(), 100 - static_cast<std::int64_t>(kKeyHolders));
    EXPECT_EQ(kids.command_one(), 'r');
    const Outcome served = k->acquire(1);
    EXPECT_TRUE(served.acquired);
    k->give_back(1, served.tag);
}
#endif // __linux__

#if defined(__linux__)
// ---- damaged state is refused, never used (issue 36, item 2) ----

namespace {
NamedSlot& slot_of(Store& s, const char* name) {
    for (auto& slot : s.segment().header().named) {
        if (slot.ready.load() == 1 && std::string(slot.name) == name) {
            return slot;
        }
    }
    throw std::logic_error("no such slot");
}

/// The concurrency state word as the engine lays it out: {seq << 16 | pending holder + 1,
/// available << 32 | pending delta}.
Pair concurrency_word(std::int64_t seq, std::uint32_t pending, std::int64_t available, std::int32_t delta) {
    return {
        static_cast<std::int64_t>((static_cast<std::uint64_t>(seq) << 16) | pending),
        static_cast<std::int64_t>((static_cast<std::uint64_t>(available) << 32) | static_cast<std::uint32_t>(delta))};
}

void overwrite(AtomicPair& word, Pair value) {
    Pair seen = word.load();
    while (!word.compare_exchange(seen, value)) {
    }
}

/// The segment's bytes outside [from, to): what a limiter whose data is [from, to) must never write.
std::string outside(const Segment& seg, std::uint64_t from, std::uint64_t to) {
    const std::uint64_t arena = seg.header().arena_offset;
    return std::string(seg.base() + arena, seg.base() + from) + std::string(seg.base() + to, seg.base() + seg.size());
}
} // namespace

TEST(ShmDamage, AConcurrencyStateBeyondItsLimitIsRefusedNamingTheSegmentAndTheName) {
    Two t("avail");
    t.a->concurrency("c", 2, 3600 * kSec, kNoQueue);
    const NamedSlot& slot = slot_of(*t.a, "c");
    const ConcurrencyView v = ConcurrencyView::over(t.a->segment().at<char>(slot.offset), 2);
    overwrite(*v.state, concurrency_word(5, 0, 1000, 0)); // "1000 available" for a limit of 2
    try {
        t.b->concurrency("c", 2, 3600 * kSec, kNoQueue);
        FAIL() << "a damaged state was opened";
    } catch (const std::invalid_argument& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("'" + t.name + "'"), std::string::npos) << message;
        EXPECT_NE(message.find("'c'"), std::string::npos) << message;
        EXPECT_NE(message.find("1000"), std::string::npos) << message;
    }
}

TEST(ShmDamage, ALedgerEntryBeyondTheLimitIsRefused) {
    Two t("ledger");
    t.a->concurrency("c", 2, 3600 * kSec, kNoQueue);
    const NamedSlot& slot = slot_of(*t.a, "c");
    const ConcurrencyView v = ConcurrencyView::over(t.a->segment().at<char>(slot.offset), 2);
    overwrite(v.entry(7), Pair{50, 0});
    EXPECT_THROW(t.b->concurrency("c", 2, 3600 * kSec, kNoQueue), std::invalid_argument);
}

TEST(ShmDamage, APendingHolderBeyondTheLedgerIsNeverWrittenTo) {
    // A segment large enough that the write the damaged index asks for would land inside it (past
    // the ledger, in memory of no one's): every byte outside the limiter's own data is compared.
    // (2048 places: room for 65534 entries also where an AtomicPair is larger than 16 bytes, as on
    // the spinlock fallback.)
    Two t("pending", 2048);
    auto lim = t.a->concurrency("c", 2, 3600 * kSec, kNoQueue);
    t.a->token_bucket("after", TokenBucketRule(5, 5, kSec), kNoQueue);
    const NamedSlot& slot = slot_of(*t.a, "c");
    const ConcurrencyView v = ConcurrencyView::over(t.a->segment().at<char>(slot.offset), 2);
    ASSERT_GT(t.a->segment().size(), slot.offset + ConcurrencyView::bytes() + 65534 * sizeof(AtomicPair));
    overwrite(*v.state, concurrency_word(5, 65535, 1, 1)); // holder 65534 of a ledger of 256
    EXPECT_THROW(t.b->concurrency("c", 2, 3600 * kSec, kNoQueue), std::invalid_argument); // refused at open
    // A limiter opened before the damage reads it: the index is never followed out of the ledger.
    const std::string before = outside(t.a->segment(), slot.offset, slot.offset + slot.bytes);
    const Outcome o = lim->acquire(1);
    if (o.acquired) {
        lim->give_back(1, o.tag);
    }
    EXPECT_LE(lim->available_permits(), 2);
    EXPECT_EQ(outside(t.a->segment(), slot.offset, slot.offset + slot.bytes), before);
}

TEST(ShmDamage, ASlidingWindowHeadBeforeItsFirstSegmentIsNeverWrittenThrough) {
    Two t("head");
    // Another window just before it: its ring's empty entries are what a write at index -3 would replace.
    t.a->sliding_window("before", 4, kSec, 4, kNoQueue);
    auto sw = t.a->sliding_window("sw", 4, kSec, 4, kNoQueue);
    const NamedSlot& slot = slot_of(*t.a, "sw");
    const std::string before = outside(t.a->segment(), slot.offset, slot.offset + slot.bytes);
    // Its head says segment -3 with a permit taken in it: archiving it would index the ring at -3.
    overwrite(*t.a->segment().at<AtomicPair>(slot.offset), Pair{-3, 1});
    t.clock->advance(kSec / 2);
    sw->acquire(1);
    EXPECT_LE(sw->available_permits(), 4);
    EXPECT_EQ(outside(t.a->segment(), slot.offset, slot.offset + slot.bytes), before);
}
#endif // __linux__

#if defined(__linux__)
// ---- creation: a creator killed or stopped while making the segment (issue 36, item 4) ----

namespace {
/// A capacity whose segment takes its creator a while to allocate (about 400 MB: some 200 ms of
/// posix_fallocate), made smaller where /dev/shm has less than four times that free.
std::uint64_t slow_capacity() {
    struct statvfs fs {};
    std::uint64_t bytes = 400ULL << 20;
    if (::statvfs("/dev/shm", &fs) == 0) {
        bytes = std::min(bytes, static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize / 4);
    }
    return std::max<std::uint64_t>(1000, bytes / 2048);
}

/// Waits (10 s at most) until process `pid` has a file of /dev/shm open: its creation is under way.
bool wait_until_creating(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    for (int i = 0; i < 100000; ++i) {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
            const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
            if (!ec && target.rfind("/dev/shm/", 0) == 0) {
                return true;
            }
        }
        ::usleep(100);
    }
    return false;
}

/// The entries of /dev/shm that belong to segment `name` (the segment itself and anything made
/// while creating it), other than the segment itself.
std::vector<std::string> leftovers(const std::string& name) {
    const std::string prefix = "permits." + name;
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
        const std::string file = entry.path().filename().string();
        if (file.rfind(prefix, 0) != 0 || file == prefix) {
            continue;
        }
        const char next = file[prefix.size()];
        if (std::isalnum(static_cast<unsigned char>(next)) == 0 && next != '_' && next != '.' && next != '-') {
            out.push_back(file); // not another valid name that starts with this one
        }
    }
    return out;
}

/// Reads exactly n bytes (false at end of file).
bool read_all(int fd, void* out, std::size_t n) {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
        const ssize_t got = ::read(fd, p, n);
        if (got <= 0) {
            return false;
        }
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}
} // namespace

TEST(ShmCreation, ACreatorKilledWhileCreatingLeavesNothingAndTheNextOpenCreates) {
    const std::string name = unique_name("killed");
    const Segment::Options opts{slow_capacity(), 0600, ClockKind::Manual};
    const pid_t child = ::fork();
    if (child == 0) {
        try {
            Segment::open(name, opts);
        } catch (...) {
        }
        ::_exit(0);
    }
    ASSERT_TRUE(wait_until_creating(child));
    ::kill(child, SIGKILL); // mid-creation: posix_fallocate of hundreds of megabytes takes a while
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    // The same open, as a restarted service makes it: it creates the segment (it once waited 2 s for
    // the dead creator, then failed until the file was removed by hand).
    std::shared_ptr<Segment> seg;
    ASSERT_NO_THROW(seg = Segment::open(name, opts));
    auto store = std::make_shared<Store>(seg, make_clock());
    auto lim = store->fixed_window("w", FixedWindowRule(1, kSec), kNoQueue);
    EXPECT_TRUE(lim->acquire(1).acquired);
    EXPECT_FALSE(lim->acquire(1).acquired);
    EXPECT_EQ(leftovers(name), std::vector<std::string>{});
    EXPECT_TRUE(Segment::unlink(name));
}

TEST(ShmCreation, AStoppedCreatorHoldsNoOneUpAndThenUsesTheSegmentMadeMeanwhile) {
    const std::string name = unique_name("stopped");
    const Segment::Options opts{slow_capacity(), 0600, ClockKind::Manual};
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(report[0]);
        std::uint64_t seed = 0;
        char took = 'E';
        try {
            auto seg = Segment::open(name, opts);
            seed = seg->header().hash_seed;
            auto store = std::make_shared<Store>(seg, make_clock());
            took = store->fixed_window("w", FixedWindowRule(2, kSec), kNoQueue)->acquire(1).acquired ? '1' : '0';
        } catch (...) {
        }
        (void)!::write(report[1], &seed, sizeof seed);
        (void)!::write(report[1], &took, 1);
        ::_exit(0);
    }
    ::close(report[1]);
    ASSERT_TRUE(wait_until_creating(child));
    ::kill(child, SIGSTOP); // a creator that stalls (stopped, swapped out, starved) while creating
    std::shared_ptr<Segment> seg;
    EXPECT_NO_THROW(seg = Segment::open(name, opts));
    ::kill(child, SIGCONT);
    std::uint64_t seed = 0;
    char took = 0;
    const bool reported = read_all(report[0], &seed, sizeof seed) && read_all(report[0], &took, 1);
    ::close(report[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_NE(seg, nullptr);
    ASSERT_TRUE(reported);
    // The stalled creator, resumed, found the name taken and opened that segment: one state for both.
    EXPECT_EQ(seed, seg->header().hash_seed);
    EXPECT_EQ(took, '1');
    auto store = std::make_shared<Store>(seg, make_clock());
    auto lim = store->fixed_window("w", FixedWindowRule(2, kSec), kNoQueue);
    EXPECT_TRUE(lim->acquire(1).acquired);
    EXPECT_FALSE(lim->acquire(1).acquired);
    EXPECT_EQ(leftovers(name), std::vector<std::string>{});
    EXPECT_TRUE(Segment::unlink(name));
}

TEST(ShmCreation, ProcessesRacingToCreateANameAllUseOneSegment) {
    const std::string name = unique_name("race");
    // Some 20 MB: each creation takes long enough for the others' to overlap it.
    const Segment::Options opts{10000, 0600, ClockKind::Manual};
    constexpr int kProcesses = 4;
    int go[2];
    int report[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(report), 0);
    std::vector<pid_t> pids;
    for (int i = 0; i < kProcesses; ++i) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(go[1]);
            ::close(report[0]);
            char c = 0;
            (void)!::read(go[0], &c, 1); // end of file: every child starts at once
            char out[9] = {};
            try {
                auto seg = Segment::open(name, opts);
                const std::uint64_t seed = seg->header().hash_seed;
                std::memcpy(out, &seed, sizeof seed);
                auto store = std::make_shared<Store>(seg, make_clock());
                auto lim = store->fixed_window("w", FixedWindowRule(kProcesses, kSec), kNoQueue);
                out[8] = lim->acquire(1).acquired ? '1' : '0';
            } catch (...) {
                out[8] = 'E';
            }
            (void)!::write(report[1], out, sizeof out); // one write of 9 bytes: never interleaved
            ::_exit(0);
        }
        pids.push_back(pid);
    }
    ::close(go[0]);
    ::close(report[1]);
    ::close(go[1]);
    std::vector<std::uint64_t> seeds;
    std::string took;
    char in[9];
    while (read_all(report[0], in, sizeof in)) {
        std::uint64_t seed = 0;
        std::memcpy(&seed, in, sizeof seed);
        seeds.push_back(seed);
        took += in[8];
    }
    ::close(report[0]);
    for (const pid_t pid : pids) {
        int status = 0;
        ::waitpid(pid, &status, 0);
    }
    EXPECT_EQ(took, std::string(kProcesses, '1'));
    auto seg = Segment::open(name, opts);
    EXPECT_EQ(seeds, std::vector<std::uint64_t>(kProcesses, seg->header().hash_seed));
    auto store = std::make_shared<Store>(seg, make_clock());
    EXPECT_FALSE(store->fixed_window("w", FixedWindowRule(kProcesses, kSec), kNoQueue)->acquire(1).acquired);
    EXPECT_EQ(leftovers(name), std::vector<std::string>{});
    EXPECT_TRUE(Segment::unlink(name));
}

TEST(ShmCreation, ACreationThatFailsLeavesNothing) {
    const std::string name = unique_name("nospace");
    const pid_t child = ::fork();
    if (child == 0) {
        // Files of at most 1 MB for this process (as a full /dev/shm would refuse the space): the
        // creation fails with an error, never a signal.
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit small{1 << 20, 1 << 20};
        ::setrlimit(RLIMIT_FSIZE, &small);
        try {
            Segment::open(name, {1000, 0600, ClockKind::Manual});
        } catch (const std::system_error&) {
            ::_exit(0);
        } catch (...) {
        }
        ::_exit(1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(leftovers(name), std::vector<std::string>{});
    EXPECT_FALSE(Segment::unlink(name)); // the name was never made
}

TEST(ShmCreation, AnUnfinishedFileUnderTheNameIsRefusedSayingWhatToDo) {
    // What a creator of an earlier build, which made the segment in place, leaves when killed.
    const std::string name = unique_name("unfinished");
    const int fd = ::open(("/dev/shm/permits." + name).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(Segment::size_for(10))), 0);
    ::close(fd);
    try {
        Segment::open(name, {10, 0600, ClockKind::Manual});
        ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("was never finished"), std::string::npos) << message;
        EXPECT_NE(message.find("remove /dev/shm/permits." + name), std::string::npos) << message;
    }
    EXPECT_TRUE(Segment::unlink(name));
}

// ---- every named kind's state is checked as it is opened (issue 36, item 2) ----

namespace {
/// `what` opened from the second mapping is refused as corrupted, naming the segment and `name`.
template <class Open> void expect_refused(const Two& t, const char* name, Open open, const char* shown = nullptr) {
    try {
        open();
        ADD_FAILURE() << "a damaged '" << name << "' was opened";
    } catch (const std::invalid_argument& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("'" + t.name + "'"), std::string::npos) << message;
        EXPECT_NE(message.find("'" + std::string(name) + "'"), std::string::npos) << message;
        EXPECT_NE(message.find("corrupted"), std::string::npos) << message;
        if (shown != nullptr) {
            EXPECT_NE(message.find(shown), std::string::npos) << message;
        }
    }
}

/// A sliding window counter's state: its window, then its previous and current counts.
Pair counter_word(std::int64_t window, std::uint32_t previous, std::uint32_t current) {
    return {window, static_cast<std::int64_t>((static_cast<std::uint64_t>(previous) << 32) | current)};
}

/// A sliding window's head: its segment, then the permits taken in it and in the older segments of its window.
Pair head_word(std::int64_t segment, std::uint32_t current, std::uint32_t older) {
    return {segment, static_cast<std::int64_t>((static_cast<std::uint64_t>(older) << 32) | current)};
}

constexpr std::int64_t kEndOfTime = std::numeric_limits<std::int64_t>::max();

/// Writes `hint` where `word` keeps its hint (found by its bytes, whatever the build's layout), its
/// value left as it was.
void damage_hint(AtomicPair& word, Pair hint) {
    const Pair old = word.load();
    const std::int64_t a = 0x1234567890abcdefLL;
    const std::int64_t b = 0x0fedcba987654321LL;
    overwrite(word, Pair{a, b}); // (a successful compare-and-swap writes the hint too)
    auto* bytes = reinterpret_cast<char*>(&word);
    std::size_t at_a = 0;
    std::size_t at_b = 0;
    for (std::size_t at = 16; at + sizeof(std::int64_t) <= sizeof(AtomicPair); at += sizeof(std::int64_t)) {
        std::int64_t v = 0;
        std::memcpy(&v, bytes + at, sizeof v);
        at_a = v == a ? at : at_a;
        at_b = v == b ? at : at_b;
    }
    overwrite(word, old);
    if (at_a == 0 || at_b == 0) {
        throw std::logic_error("no hint found");
    }
    std::memcpy(bytes + at_a, &hint.a, sizeof hint.a);
    std::memcpy(bytes + at_b, &hint.b, sizeof hint.b);
}
} // namespace

TEST(ShmDamage, ATokenBucketStateBeyondItsLimitIsRefused) {
    Two t("tbdamage");
    const TokenBucketRule rule(5, 5, kSec);
    t.a->token_bucket("tb", rule, kNoQueue);
    AtomicPair& word = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "tb").offset);
    const auto open = [&] { t.b->token_bucket("tb", rule, kNoQueue); };
    overwrite(word, Pair{0, 1000}); // 1000 tokens in a bucket of 5
    expect_refused(t, "tb", open, "1000");
    overwrite(word, Pair{0, -1}); // fewer than none
    expect_refused(t, "tb", open);
    overwrite(word, Pair{kEndOfTime, 5}); // a period past the end of time (its next period overflows)
    expect_refused(t, "tb", open);
    overwrite(word, Pair{-1, 5}); // a period before its first
    expect_refused(t, "tb", open);
    overwrite(word, Pair{3, 2});
    EXPECT_NO_THROW(open());
}

TEST(ShmDamage, AFixedWindowCountOutsideItsLimitIsRefused) {
    Two t("fwdamage");
    const FixedWindowRule rule(4, kSec);
    t.a->fixed_window("fw", rule, kNoQueue);
    AtomicPair& word = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "fw").offset);
    const auto open = [&] { t.b->fixed_window("fw", rule, kNoQueue); };
    overwrite(word, Pair{0, -1000}); // a count below zero: 1004 more permits in its window
    expect_refused(t, "fw", open, "-1000");
    overwrite(word, Pair{0, 5});
    expect_refused(t, "fw", open);
    overwrite(word, Pair{kEndOfTime, 0});
    expect_refused(t, "fw", open);
    overwrite(word, Pair{2, 4});
    EXPECT_NO_THROW(open());
}

TEST(ShmDamage, ASlidingWindowCounterCountBeyondItsLimitIsRefused) {
    Two t("swcdamage");
    const SlidingWindowCounterRule rule(4, kSec);
    t.a->sliding_window_counter("swc", rule, kNoQueue);
    AtomicPair& word = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "swc").offset);
    const auto open = [&] { t.b->sliding_window_counter("swc", rule, kNoQueue); };
    overwrite(word, counter_word(0, 0, 1000));
    expect_refused(t, "swc", open);
    overwrite(word, counter_word(0, 1000, 0));
    expect_refused(t, "swc", open);
    overwrite(word, counter_word(-5, 0, 0));
    expect_refused(t, "swc", open);
    overwrite(word, counter_word(7, 4, 4)); // each count within the limit (the previous one decays)
    EXPECT_NO_THROW(open());
}

TEST(ShmDamage, ASlidingWindowWhoseHeadOrRingBreaksItsInvariantsIsRefused) {
    Two t("swdamage");
    t.a->sliding_window("sw", 4, kSec, 4, kNoQueue);
    auto* words = t.a->segment().at<AtomicPair>(slot_of(*t.a, "sw").offset); // the head, then 4 ring slots
    const auto open = [&] { t.b->sliding_window("sw", 4, kSec, 4, kNoQueue); };
    const auto clean = [&] {
        overwrite(words[0], head_word(6, 1, 2));
        for (int i = 1; i <= 4; ++i) {
            overwrite(words[i], Pair{-5, 0});
        }
        overwrite(words[1 + 5 % 4], Pair{5, 2}); // segment 5 took 2
    };
    clean();
    EXPECT_NO_THROW(open());
    overwrite(words[0], head_word(6, 3, 3)); // 6 taken in a window of 4
    expect_refused(t, "sw", open);
    overwrite(words[0], head_word(-3, 1, 0)); // before its first segment
    expect_refused(t, "sw", open);
    overwrite(words[0], head_word(kEndOfTime, 0, 0)); // past the end of time
    expect_refused(t, "sw", open);
    clean();
    overwrite(words[1 + 5 % 4], Pair{5, -1000}); // a segment that gave back more than was ever taken
    expect_refused(t, "sw", open, "-1000");
    clean();
    overwrite(words[1 + 5 % 4], Pair{5, 1000});
    expect_refused(t, "sw", open);
    clean();
    overwrite(words[1 + 9 % 4], Pair{9, 1}); // a segment after the head's
    expect_refused(t, "sw", open);
    clean();
    overwrite(words[1 + 3 % 4], Pair{2, 1}); // segment 2 in segment 3's slot
    expect_refused(t, "sw", open);
}

TEST(ShmDamage, ASlidingWindowsRetryAfterIsEnoughWhenItsRingSaysMoreThanItsHead) {
    // (found by fuzz_shm_segment) A ring slot saying more for a segment than the head's sum of the
    // older segments counted for it: a state a refund racing an archive leaves too, so not refused.
    // retry_after counted the ring's 2 coming back, where the take only ever counted 1 for it.
    Two t("swretry");
    auto sw = t.a->sliding_window("sw", 4, kSec, 4, kNoQueue);
    auto* words = t.a->segment().at<AtomicPair>(slot_of(*t.a, "sw").offset); // the head, then the ring
    ASSERT_TRUE(sw->acquire(1).acquired);                                    // segment 0
    t.clock->advance(kSec / 4);
    ASSERT_TRUE(sw->acquire(1).acquired); // segment 1: segment 0's 1 archived, and in the head's sum
    overwrite(words[1], Pair{0, 2});
    EXPECT_NO_THROW(t.b->sliding_window("sw", 4, kSec, 4, kNoQueue));
    ASSERT_TRUE(sw->acquire(2).acquired);
    const Outcome refused = sw->acquire(2);
    ASSERT_FALSE(refused.acquired);
    ASSERT_GT(refused.retry_after, 0);
    t.clock->advance(refused.retry_after);
    EXPECT_TRUE(sw->acquire(2).acquired);
}

TEST(ShmDamage, ADamagedHintIsNeverAFirstGuess) {
    // (found by fuzz_shm_segment: a take's first guess, a state word's hint read without a
    // compare-and-swap, is no value the checks looked at; a token bucket's period of -2**63 + 1
    // overflowed in tokens_at before the compare-and-swap corrected it)
    Two t("hintdamage");
    const TokenBucketRule rule(5, 5, kSec);
    t.a->token_bucket("tb", rule, kNoQueue);
    t.a->sliding_window("sw", 4, kSec, 4, kNoQueue);
    AtomicPair& tb = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "tb").offset);
    AtomicPair& sw = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "sw").offset);
    damage_hint(tb, Pair{std::numeric_limits<std::int64_t>::min() + 1, 5});
    damage_hint(sw, head_word(std::numeric_limits<std::int64_t>::min(), 0, 0));
    ASSERT_FALSE(tb.hint() == tb.load());
    t.b->token_bucket("tb", rule, kNoQueue);
    t.b->sliding_window("sw", 4, kSec, 4, kNoQueue);
    EXPECT_EQ(tb.hint(), tb.load()); // set to the value checked as it opened
    EXPECT_EQ(sw.hint(), sw.load());
}

TEST(ShmDamage, ANamedSlotAnchoredOutsideTimeOrMisplacedIsRefused) {
    Two t("slotdamage");
    const TokenBucketRule rule(5, 5, kSec);
    t.a->token_bucket("tb", rule, kNoQueue);
    NamedSlot& slot = slot_of(*t.a, "tb");
    const auto open = [&] { t.b->token_bucket("tb", rule, kNoQueue); };
    const Nanos anchor = slot.anchor;
    slot.anchor = std::numeric_limits<Nanos>::min(); // every period index from it overflows
    expect_refused(t, "tb", open);
    slot.anchor = anchor;
    slot.offset += 8; // inside the segment, but no state word is there (and a 16-byte CAS there faults)
    expect_refused(t, "tb", open);
    slot.offset -= 8;
    EXPECT_NO_THROW(open());
}

TEST(ShmDamage, ANewNameIsNeverPlacedOverAnotherNamesData) {
    // (found by fuzz_shm_segment: a new concurrency limiter's ledger was written over the names
    // before it, which were then refused as corrupted)
    Two t("arenadamage");
    const TokenBucketRule rule(5, 5, kSec);
    t.a->token_bucket("tb", rule, kNoQueue);
    const AtomicPair& word = *t.a->segment().at<AtomicPair>(slot_of(*t.a, "tb").offset);
    const Pair before = word.load();
    t.a->segment().header().arena_used = 0; // the arena said unused: the next name would go over "tb"
    try {
        t.b->concurrency("c", 2, 3600 * kSec, kNoQueue);
        ADD_FAILURE() << "a new name was placed";
    } catch (const std::invalid_argument& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("'" + t.name + "'"), std::string::npos) << message;
        EXPECT_NE(message.find("corrupted"), std::string::npos) << message;
    }
    EXPECT_EQ(word.load(), before);
    EXPECT_NO_THROW(t.b->token_bucket("tb", rule, kNoQueue));
}

TEST(ShmDamage, AConcurrencyLedgerThatDoesNotAddUpIsRefused) {
    Two t("sumdamage");
    auto lim = t.a->concurrency("c", 2, 3600 * kSec, kNoQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    const ConcurrencyView v = ConcurrencyView::over(t.a->segment().at<char>(slot_of(*t.a, "c").offset), 2);
    const auto open = [&] { t.b->concurrency("c", 2, 3600 * kSec, kNoQueue); };
    EXPECT_NO_THROW(open());
    // Another holder said to hold the permit that is available: once it is found dead and its
    // permits given back, 3 would be available of 2.
    overwrite(v.entry(9), Pair{1, 0});
    expect_refused(t, "c", open);
    overwrite(v.entry(9), Pair{0, 0});
    EXPECT_NO_THROW(open());
    // An entry that says it has seen changes the state has not made yet: the next ones would not be
    // applied to it.
    overwrite(v.entry(9), Pair{0, 1000});
    expect_refused(t, "c", open);
    overwrite(v.entry(9), Pair{0, 0});
    lim->give_back(1, held.tag);
    EXPECT_EQ(lim->available_permits(), 2);
}

TEST(ShmDamage, AHolderSlotInAnImpossibleStateIsRefusedAsTheSegmentOpens) {
    const std::string name = unique_name("holderdamage");
    const Segment::Options opts{64, 0600, ClockKind::Manual};
    auto seg = Segment::open(name, opts);
    HolderSlot& slot = seg->header().holders[7];
    const auto expect_refused_open = [&] {
        try {
            Segment::open(name, opts);
            ADD_FAILURE() << "a damaged holder table was opened";
        } catch (const std::invalid_argument& e) {
            const std::string message = e.what();
            EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
            EXPECT_NE(message.find("holder 7"), std::string::npos) << message;
        }
    };
    overwrite(slot.word, Pair{static_cast<std::int64_t>(::getpid()), -7}); // uses below the freeing marker
    expect_refused_open();
    overwrite(slot.word, Pair{static_cast<std::int64_t>(::getpid()), kEndOfTime}); // one more overflows
    expect_refused_open();
    overwrite(slot.word, Pair{static_cast<std::int64_t>((3ULL << 32) | 0), 2}); // free, yet in use
    expect_refused_open();
    overwrite(slot.word, Pair{static_cast<std::int64_t>(0x7fffff00), 1}); // no such pid on Linux
    expect_refused_open();
    overwrite(slot.word, Pair{static_cast<std::int64_t>(::getpid()), -1}); // being freed: fine
    EXPECT_NO_THROW(Segment::open(name, opts));
    Segment::unlink(name);
}

TEST(ShmDamage, TheSegmentLiesBetweenGuardPages) {
    // An access just outside the mapping faults rather than landing in whatever is mapped next to it.
    Two t("guards");
    Segment& seg = t.a->segment();
    for (char* at : {seg.base() + seg.size(), seg.base() - 1, seg.base() + seg.size() + 4096 * 16 - 1}) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            *reinterpret_cast<volatile char*>(at) = 1;
            ::_exit(0);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        // Under a sanitizer the fault is caught and reported, and the child exits with its error
        // code instead (the write never lands either way); never a child that wrote and went on.
        const bool faulted = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
        const bool reported = WIFEXITED(status) && WEXITSTATUS(status) != 0;
        EXPECT_TRUE(faulted || reported) << "status " << status;
    }
}

// ---- a per-key record's damage is repaired to the safe side as it is used (issue 36, item 2) ----

namespace {
/// The record of `key` in the table "keys", found by its key's bytes (at offset 32 of the record's
/// 64-byte head; its state words follow the head).
char* record_of(Store& s, const std::string& key) {
    const NamedSlot& slot = slot_of(s, "keys");
    char* data = s.segment().at<char>(slot.offset);
    const std::string_view bytes(data, slot.bytes);
    const auto at = bytes.find(key);
    if (at == std::string_view::npos || bytes.find(key, at + 1) != std::string_view::npos || at < 32) {
        throw std::logic_error("no single record of that key");
    }
    return data + at - 32;
}
AtomicPair& record_word(Store& s, const std::string& key, std::size_t i = 0) {
    return reinterpret_cast<AtomicPair*>(record_of(s, key) + 64)[i];
}
/// A concurrency record's holder entry i: {tag, count}.
std::atomic<std::int64_t>* record_entry(Store& s, const std::string& key, std::size_t i) {
    return reinterpret_cast<std::atomic<std::int64_t>*>(record_of(s, key) + 64 + 16 * i);
}
int granted(Limiter& l, int tries) {
    int n = 0;
    for (int i = 0; i < tries; ++i) {
        n += l.acquire(1).acquired ? 1 : 0;
    }
    return n;
}
} // namespace

TEST(ShmKeyDamage, AConcurrencyCountBelowZeroCountsAsTheWholeLimit) {
    Two t("kcneg");
    auto keys = table(*t.a, params_of_concurrency(2, 3600 * kSec), 8, kSec);
    auto k = keys->limiter_for("damaged-key");
    const Outcome held = k->acquire(1);
    ASSERT_TRUE(held.acquired);
    record_entry(*t.a, "damaged-key", 0)[1].store(-5); // our own entry's count
    EXPECT_EQ(granted(*k, 10), 0); // (the old code took every one: a count of -5 + n read as nothing held)
    EXPECT_EQ(k->available_permits(), 0);
    // Its holder gives back what it really held: its holder slot is freed, and the entry goes with it.
    k->give_back(1, held.tag);
    EXPECT_EQ(k->available_permits(), 2);
}

TEST(ShmKeyDamage, ConcurrencyCountsThatWouldOverflowNeverGrantBeyondTheLimit) {
    Two t("kcover");
    auto keys = table(*t.a, params_of_concurrency(4, 3600 * kSec), 8, kSec);
    auto k = keys->limiter_for("damaged-key");
    const Outcome held = k->acquire(1);
    ASSERT_TRUE(held.acquired);
    // Two entries of live holders (holder slots i + 19, said to be this process's): their counts
    // added overflowed, and the old code read the sum as room for 5 more.
    for (std::size_t i : {2U, 3U}) {
        overwrite(t.a->segment().header().holders[i + 19].word, Pair{static_cast<std::int64_t>(::getpid()), 1});
        std::atomic<std::int64_t>* e = record_entry(*t.a, "damaged-key", i);
        e[0].store(static_cast<std::int64_t>(i + 20)); // holder i + 19, generation 0
        e[1].store(std::numeric_limits<std::int64_t>::max());
    }
    EXPECT_EQ(granted(*k, 10), 0); // each counts as the whole limit
    EXPECT_EQ(k->available_permits(), 0);
    k->give_back(1, held.tag);
}

TEST(ShmKeyDamage, ATokenBucketKeyWithMoreTokensThanItsLimitIsExhausted) {
    Two t("ktb");
    auto keys = table(*t.a, params_of(TokenBucketRule(5, 2, kSec)), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    ASSERT_TRUE(k->acquire(1).acquired);
    overwrite(record_word(*t.a, "damaged-key"), Pair{0, 1000});
    EXPECT_EQ(granted(*k, 20), 0); // repaired as though its whole limit were just taken
    t.clock->advance(kSec);
    EXPECT_EQ(granted(*k, 20), 2); // then it refills at its rate
}

TEST(ShmKeyDamage, AFixedWindowKeyCountBelowZeroIsExhausted) {
    Two t("kfw");
    auto keys = table(*t.a, params_of(FixedWindowRule(3, kSec)), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    ASSERT_TRUE(k->acquire(1).acquired);
    overwrite(record_word(*t.a, "damaged-key"), Pair{0, -1000});
    EXPECT_EQ(granted(*k, 20), 0);
    t.clock->advance(kSec);
    EXPECT_EQ(granted(*k, 20), 3);
}

TEST(ShmKeyDamage, AKeyAnchoredOutsideTimeIsExhausted) {
    Two t("kanchor");
    auto keys = table(*t.a, params_of(FixedWindowRule(3, kSec)), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    t.clock->advance(kSec / 2);
    ASSERT_TRUE(k->acquire(1).acquired);
    // Its anchor (at offset 16 of the record): every window index from it overflowed.
    reinterpret_cast<Nanos*>(record_of(*t.a, "damaged-key") + 16)[0] = std::numeric_limits<Nanos>::min();
    EXPECT_EQ(granted(*k, 20), 0);
    t.clock->advance(kSec);
    EXPECT_EQ(granted(*k, 20), 3);
}

TEST(ShmKeyDamage, ASlidingWindowKeyHeadPastTheEndOfTimeIsExhausted) {
    Two t("kswhead");
    auto keys = table(*t.a, params_of_sliding(4, kSec, 4), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    ASSERT_TRUE(k->acquire(1).acquired);
    overwrite(record_word(*t.a, "damaged-key"), head_word(kEndOfTime - 1, 0, 0));
    EXPECT_EQ(granted(*k, 20), 0); // (the old code granted 4 at the end of time, then never again)
    t.clock->advance(kSec);
    EXPECT_EQ(granted(*k, 20), 4);
}

TEST(ShmKeyDamage, ASlidingWindowKeyRingCountBelowZeroNeverGrantsBeyondTheLimit) {
    Two t("kswring");
    auto keys = table(*t.a, params_of_sliding(4, kSec, 4), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    const Nanos segment = kSec / 4;
    ASSERT_EQ(granted(*k, 2), 2); // segment 0
    t.clock->advance(segment);
    ASSERT_EQ(granted(*k, 1), 1); // segment 1: segment 0's 2 go to the ring
    overwrite(record_word(*t.a, "damaged-key", 1), Pair{0, -100});
    t.clock->advance(segment);
    // Segments 0 to 3 make one window: 3 were taken in it, one more is all it has (the old code read
    // segment 0 as -100 taken: 103 more).
    EXPECT_FALSE(k->acquire(2).acquired);
    EXPECT_LE(granted(*k, 20), 1);
}

TEST(ShmKeyDamage, ADamagedHintIsNeverAFirstGuess) {
    Two t("khint");
    auto keys = table(*t.a, params_of(TokenBucketRule(5, 2, kSec)), 8, 3600 * kSec);
    auto k = keys->limiter_for("damaged-key");
    ASSERT_TRUE(k->acquire(1).acquired);
    AtomicPair& word = record_word(*t.a, "damaged-key");
    damage_hint(word, Pair{std::numeric_limits<std::int64_t>::min() + 1, 5});
    EXPECT_EQ(k->available_permits(), 4);
    EXPECT_EQ(word.hint(), word.load()); // set to the value checked as the record was found
}

TEST(ShmKeyDamage, ATableCountBelowZeroReadsAsNoKeys) {
    Two t("kcount");
    auto keys = table(*t.a, params_of(FixedWindowRule(3, kSec)), 8, 3600 * kSec);
    ASSERT_TRUE(keys->limiter_for("a")->acquire(1).acquired);
    t.a->segment().at<std::atomic<std::int64_t>>(slot_of(*t.a, "keys").offset)->store(-5); // the table's count
    EXPECT_GE(keys->size(), 0);
}
#endif // __linux__
