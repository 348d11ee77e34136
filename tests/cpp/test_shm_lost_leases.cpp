// Leases the segment forgot while their process lived (Linux): a holder paused past lease_ttl is
// judged dead and its slot reclaimed, its permits given back for others. On resuming, each lease
// it still holds is taken back when the limit allows it, and is lost (told, and releasing nothing)
// when it does not. Here the reclaim is what another process would do to a holder whose heartbeat
// stopped in another pid namespace.
#if defined(__linux__)

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "permits/shm_key_table.hpp"
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
const QueueOptions kNoQueue{0, QueueOrder::OldestFirst};

/// What another process does to this one when its heartbeat stopped in another pid namespace:
/// its slot reclaimed, its permits given back in every named limiter, its per-key entries stale.
void judged_dead(Store& s) {
    Segment& seg = s.segment();
    Holding h;
    ASSERT_TRUE(seg.current(h));
    HolderSlot& slot = seg.header().holders[h.index];
    // (retried: the watcher may renew the heartbeat between the two stores)
    for (int i = 0; i < 100; ++i) {
        slot.pid_ns.store(1);
        slot.heartbeat.store(monotonic_now() - 10 * kSec);
        if (seg.reclaim_holder(h.index, kSec)) {
            return;
        }
    }
    FAIL() << "the holder was never reclaimed";
}

std::shared_ptr<KeyTable> table(Store& s, std::int64_t limit, Nanos lease_ttl) {
    KeyTable::Template tmpl{params_of_concurrency(limit, lease_ttl), kNoQueue, lease_ttl};
    return KeyTable::open(s.shared_from_this(), "keys", tmpl, 8, kSec);
}

} // namespace

TEST(ShmLostLeases, ALeaseTheSegmentForgotIsTakenBackWhenTheLimitAllows) {
    Two t("back");
    auto lim = t.a->concurrency("c", 2, kHour, kNoQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    judged_dead(*t.a);
    EXPECT_EQ(lim->available_permits(), 2); // forgotten: the segment gave its permit to others
    EXPECT_FALSE(lim->lost(held.tag));      // looked at: taken back
    EXPECT_EQ(lim->available_permits(), 1);
    EXPECT_EQ(lim->lost_leases(), 0);
    auto other = t.b->concurrency("c", 2, kHour, kNoQueue);
    EXPECT_TRUE(other->acquire(1).acquired);
    EXPECT_FALSE(other->acquire(1).acquired); // never more than the limit
    lim->give_back(1, held.tag);              // given back where it is held now
    EXPECT_EQ(lim->available_permits(), 1);
}

TEST(ShmLostLeases, ALeaseWhosePermitWentToAnotherIsLostToldAndReleasesNothing) {
    Two t("lost");
    auto lim = t.a->concurrency("c", 1, kHour, kNoQueue);
    auto shared = std::dynamic_pointer_cast<SharedLimiter>(lim);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    judged_dead(*t.a);
    const std::uint32_t seen = t.a->lost_seq(); // (the watcher's first heartbeat may find it lost too)
    auto other = t.b->concurrency("c", 1, kHour, kNoQueue);
    const Outcome theirs = other->acquire(1); // the permit the segment forgot, granted again
    ASSERT_TRUE(theirs.acquired);
    EXPECT_TRUE(lim->lost(held.tag));
    EXPECT_TRUE(lim->lost(held.tag)); // from then on
    EXPECT_EQ(shared->lost_leases(), 1);
    EXPECT_NE(t.a->lost_seq(), seen);                  // told
    EXPECT_TRUE(shared->give_back_lease(1, held.tag)); // lost: gives nothing back
    EXPECT_EQ(lim->available_permits(), 0);            // the other holder's permit stays taken
    other->give_back(1, theirs.tag);
    EXPECT_EQ(lim->available_permits(), 1);
    EXPECT_TRUE(lim->acquire(1).acquired); // and this process takes permits again as before
}

TEST(ShmLostLeases, ReleasingAForgottenLeaseTakesItBackFirstOrGivesNothing) {
    Two t("release");
    auto lim = t.a->concurrency("c", 2, kHour, kNoQueue);
    auto shared = std::dynamic_pointer_cast<SharedLimiter>(lim);
    const Outcome one = lim->acquire(1);
    const Outcome two = lim->acquire(1);
    ASSERT_TRUE(one.acquired && two.acquired);
    judged_dead(*t.a);
    auto other = t.b->concurrency("c", 2, kHour, kNoQueue);
    const Outcome theirs = other->acquire(1);
    ASSERT_TRUE(theirs.acquired);
    // Two leases held under one holding, one permit left: they cannot both be taken back, and are
    // lost together (never one of them held in the segment's stead of the other).
    EXPECT_TRUE(shared->give_back_lease(1, one.tag));
    EXPECT_TRUE(lim->lost(two.tag));
    EXPECT_EQ(shared->lost_leases(), 2);
    EXPECT_EQ(lim->available_permits(), 1);
    EXPECT_TRUE(shared->give_back_lease(1, two.tag));
    EXPECT_EQ(lim->available_permits(), 1);
}

TEST(ShmLostLeases, TheHeartbeatTakesForgottenLeasesBackUnasked) {
    Two t("beat");
    const Nanos ttl = 30 * 1000000; // heartbeats every 10 ms
    auto lim = t.a->concurrency("c", 1, ttl, kNoQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    judged_dead(*t.a);
    // Nothing of this process is called: its watcher's next heartbeat takes the permit back.
    for (int i = 0; i < 500 && lim->available_permits() != 0; ++i) {
        ::usleep(2000);
    }
    EXPECT_EQ(lim->available_permits(), 0);
    EXPECT_FALSE(t.b->concurrency("c", 1, ttl, kNoQueue)->acquire(1).acquired);
    EXPECT_FALSE(lim->lost(held.tag));
    lim->give_back(1, held.tag);
    EXPECT_EQ(lim->available_permits(), 1);
}

TEST(ShmLostLeases, AForgottenKeyLeaseIsTakenBackOrLost) {
    Two t("keys");
    auto ka = table(*t.a, 1, kHour);
    auto kb = table(*t.b, 1, kHour);
    auto mine = ka->limiter_for("k");
    auto shared = std::dynamic_pointer_cast<SharedLimiter>(mine);
    const Outcome held = mine->acquire(1);
    ASSERT_TRUE(held.acquired);
    judged_dead(*t.a);
    EXPECT_FALSE(mine->lost(held.tag)); // taken back: the key's permit was free
    EXPECT_FALSE(kb->limiter_for("k")->acquire(1).acquired);
    mine->give_back(1, held.tag);
    EXPECT_EQ(kb->limiter_for("k")->available_permits(), 1);

    const Outcome again = mine->acquire(1);
    ASSERT_TRUE(again.acquired);
    judged_dead(*t.a);
    auto theirs_limiter = kb->limiter_for("k");
    const Outcome theirs = theirs_limiter->acquire(1);
    ASSERT_TRUE(theirs.acquired);
    EXPECT_TRUE(mine->lost(again.tag));
    EXPECT_EQ(ka->lost_leases(), 1);
    EXPECT_TRUE(shared->give_back_lease(1, again.tag));
    EXPECT_EQ(theirs_limiter->available_permits(), 0);
    theirs_limiter->give_back(1, theirs.tag);
    EXPECT_EQ(theirs_limiter->available_permits(), 1);
}

// The ledger of a named limiter counts by holder slot, not by generation: a release (or a take) by
// a holding reclaimed between its check and its change would land on the slot's next holder, here
// another thread of the same process (that holder's permits freed under it, its slot kept for good).
// The change itself refuses a holding that is no longer the slot's.
TEST(ShmLostLeases, AReclaimedHoldingNeverChangesTheLedgerOfItsSlotsNextHolder) {
    Two t("ledger");
    const Nanos ttl = kHour;
    auto lim = t.a->concurrency("c", 3, ttl, kNoQueue);
    const Outcome old_lease = lim->acquire(1);
    ASSERT_TRUE(old_lease.acquired);
    Segment& seg = t.a->segment();
    Holding old_holding;
    ASSERT_TRUE(seg.current(old_holding));
    judged_dead(*t.a);
    const Outcome next = lim->acquire(1); // the next holding of this process
    ASSERT_TRUE(next.acquired);
    Holding now_holding;
    ASSERT_TRUE(seg.current(now_holding));
    ASSERT_EQ(now_holding.index, old_holding.index); // (the reclaimed slot, the first free, again)
    ASSERT_NE(now_holding.generation, old_holding.generation);
    const NamedSlot& slot =
        seg.named("c", params_of_concurrency(3, ttl), ConcurrencyView::bytes(), 0, [](char*, Nanos) {});
    const ConcurrencyView view = ConcurrencyView::over(seg.at<char>(slot.offset), 3);
    EXPECT_EQ(view.give_back_as(seg, old_holding, 1, 0), 0);
    EXPECT_FALSE(view.take_as(seg, old_holding, 1));
    EXPECT_EQ(view.held_by(now_holding.index), 1);
    EXPECT_EQ(view.available(), 2);
    EXPECT_EQ(view.give_back_as(seg, now_holding, 1, 0), 1); // the holding the slot is: as before
    EXPECT_EQ(view.available(), 3);
    EXPECT_TRUE(view.take_as(seg, now_holding, 1));
    EXPECT_EQ(view.available(), 2);
    lim->give_back(1, next.tag);
    EXPECT_EQ(view.available(), 3);
    Holding none;
    EXPECT_FALSE(seg.current(none)); // nothing held: no slot kept
}

// Two reclaimers of one dead holder: the second takes the first's reservation over (the first may
// have died there). Should the first have drained and freed the slot meanwhile, and a new holder
// taken it, the second's drain must not give back the new holder's permits.
TEST(ShmLostLeases, ALateDrainOfAReclaimedSlotLeavesItsNextHolderAlone) {
    Two t("drain");
    const Nanos ttl = kHour;
    auto lim = t.a->concurrency("c", 3, ttl, kNoQueue);
    ASSERT_TRUE(lim->acquire(1).acquired);
    Segment& seg = t.a->segment();
    Holding old_holding;
    ASSERT_TRUE(seg.current(old_holding));
    judged_dead(*t.a);
    const Outcome next = lim->acquire(2); // the slot's next holder
    ASSERT_TRUE(next.acquired);
    Holding now_holding;
    ASSERT_TRUE(seg.current(now_holding));
    ASSERT_EQ(now_holding.index, old_holding.index);
    const std::uint64_t old_reservation = (static_cast<std::uint64_t>(old_holding.generation) << 32) | 0xffffffffULL;
    const NamedSlot& slot =
        seg.named("c", params_of_concurrency(3, ttl), ConcurrencyView::bytes(), 0, [](char*, Nanos) {});
    const ConcurrencyView view = ConcurrencyView::over(seg.at<char>(slot.offset), 3);
    EXPECT_EQ(view.drain(old_holding.index, seg.header().holders[old_holding.index], old_reservation, 0), 0);
    EXPECT_EQ(view.held_by(now_holding.index), 2);
    EXPECT_EQ(view.available(), 1);
    lim->give_back(2, next.tag);
    EXPECT_EQ(view.available(), 3);
}

TEST(ShmLostLeases, AForkedChildNeverTakesBackItsParentsLeases) {
    Two t("fork");
    auto lim = t.a->concurrency("c", 2, kHour, kNoQueue);
    const Outcome held = lim->acquire(1);
    ASSERT_TRUE(held.acquired);
    judged_dead(*t.a);
    const pid_t pid = ::fork();
    if (pid == 0) {
        // The parent's lease, copied: not the child's to take back (which would hold a slot under
        // the child's pid), nor to release.
        bool ok = !lim->lost(held.tag);
        lim->give_back(1, held.tag);
        for (const auto& slot : t.a->segment().header().holders) {
            ok = ok && (slot.tag() & 0xffffffffULL) != static_cast<std::uint64_t>(::getpid());
        }
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_FALSE(lim->lost(held.tag)); // the parent's own: taken back
    EXPECT_EQ(lim->available_permits(), 1);
}

#endif // __linux__
