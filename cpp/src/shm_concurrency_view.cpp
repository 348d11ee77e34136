// A named concurrency limiter's data in a segment and the one protocol that changes it
// (ConcurrencyView, shm_limiters.hpp): its state word, its ledger of holders, and a change of its limit.
#include "permits/shm_limiters.hpp"

#if defined(__linux__)

#include <algorithm>
#include <atomic>
#include <new>
#include <stdexcept>
#include <string>

namespace permits::shm {

namespace {

std::int64_t seq_of(Pair s) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(s.a) >> 16);
}
std::uint32_t pending_of(Pair s) {
    return static_cast<std::uint32_t>(static_cast<std::uint64_t>(s.a) & 0xffffU);
}
std::int64_t available_of(Pair s) {
    // (signed: below zero while more are held than a lowered limit; a limit is at most 2^31 - 1)
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(s.b) >> 32));
}
std::int64_t delta_of(Pair s) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(s.b) & 0xffffffffULL));
}
Pair make_state(std::int64_t seq, std::uint32_t pending, std::int64_t available, std::int64_t delta) {
    const auto high = static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(available)));
    return {static_cast<std::int64_t>((static_cast<std::uint64_t>(seq) << 16) | pending),
            static_cast<std::int64_t>((high << 32) | static_cast<std::uint32_t>(static_cast<std::int32_t>(delta)))};
}
/// The pending "holder" of a change of the limit (ConcurrencyView): beyond every ledger entry.
constexpr std::uint32_t kLimitChange = 0xffffU;
static_assert(kMaxHolders < kLimitChange);

} // namespace

// ---- the concurrency protocol ----

std::uint64_t ConcurrencyView::bytes() noexcept {
    return sizeof(AtomicPair) + 16 + kMaxHolders * sizeof(AtomicPair);
}

ConcurrencyView ConcurrencyView::over(char* data, std::int64_t limit, NamedSlot* named_slot) noexcept {
    ConcurrencyView v;
    v.state = reinterpret_cast<AtomicPair*>(data);
    v.full_since = reinterpret_cast<std::atomic<Nanos>*>(data + sizeof(AtomicPair));
    v.ledger = data + sizeof(AtomicPair) + 16;
    v.limit = limit;
    v.named_slot = named_slot;
    return v;
}

bool ConcurrencyView::never_changed() const noexcept {
    // Generation 0: the slot's amounts are those it was made with (`limit`), which never change: no
    // read of the banks on a take or a release of a limit never reconfigured.
    return named_slot == nullptr || named_slot->generation.load(std::memory_order_acquire) == 0;
}

std::int64_t ConcurrencyView::limit_now() const noexcept {
    if (never_changed()) {
        return limit;
    }
    std::int64_t a[2] = {};
    live_amounts(*named_slot, a);
    return a[0];
}

std::int64_t ConcurrencyView::highest() const noexcept {
    return never_changed() ? limit : std::max(highest_of(banks_of(*named_slot)), limit_now());
}

void ConcurrencyView::change_limit(std::uint32_t was, std::int64_t permit_limit) const noexcept {
    const std::int64_t before = limit_now(); // (generation `was`: nothing moves it but this change)
    Pair s = settled();
    for (;;) {
        const Pair next = make_state(seq_of(s) + 1, kLimitChange, available_of(s) + (permit_limit - before),
                                     static_cast<std::int32_t>(was));
        if (state->compare_exchange(s, next)) {
            settle(next);
            return;
        }
        if (pending_of(s) != 0) {
            s = settled();
        }
    }
}

void ConcurrencyView::init(Nanos anchor) const {
    new (state) AtomicPair(make_state(1, 0, limit, 0));
    new (full_since) std::atomic<Nanos>(anchor);
    for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
        new (&entry(i)) AtomicPair();
    }
}

void ConcurrencyView::check(const std::string& where) const {
    const Pair s = state->load();
    const std::uint32_t pending = pending_of(s);
    // (each holder may hold up to the highest limit it had: a lower one keeps what is held)
    const std::int64_t most = highest();
    std::string what;
    if (pending > kMaxHolders && pending != kLimitChange) {
        what = "its state names holder " + std::to_string(pending - 1) + ", beyond its ledger of " +
               std::to_string(kMaxHolders);
    } else if (pending != kLimitChange && (delta_of(s) > most || delta_of(s) < -most)) {
        what = "its state's pending change of " + std::to_string(delta_of(s)) + " permits exceeds its limit of " +
               std::to_string(most);
    }
    // The ledger, with a change left pending applied first (as any take would). Each entry within the
    // limit; and on a snapshot no change went through (every change bumps the state's seq), the
    // permits held and those available add up to the limit, and no entry has applied a change the
    // state has not made yet. While other processes keep changing it, that part is left unchecked
    // rather than judged on a torn view.
    for (int attempt = 0; attempt < 16 && what.empty(); ++attempt) {
        const Pair before = settled();
        // (a change of the limit is settled with the state: on a quiet snapshot it holds for `before`)
        const std::int64_t limit_then = limit_now();
        std::int64_t held = 0;
        std::uint32_t beyond = kMaxHolders; // the first entry outside 0..most
        std::int64_t beyond_held = 0;
        std::uint32_t ahead = kMaxHolders; // the first entry ahead of the state
        std::int64_t ahead_seq = 0;
        for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
            const Pair e = entry(i).load();
            if ((e.a < 0 || e.a > most) && beyond == kMaxHolders) {
                beyond = i;
                beyond_held = e.a;
            }
            held += std::clamp<std::int64_t>(e.a, 0, most); // (no overflow, whatever an entry says)
            if (e.b > seq_of(before) && ahead == kMaxHolders) {
                ahead = i;
                ahead_seq = e.b;
            }
        }
        const bool quiet = state->load() == before;
        if (beyond != kMaxHolders) {
            what = "its ledger says holder " + std::to_string(beyond) + " holds " + std::to_string(beyond_held) +
                   " permits, beyond its limit of " + std::to_string(most);
        } else if (!quiet) {
            continue;
        } else if (available_of(before) > limit_then) {
            what = "its state says " + std::to_string(available_of(before)) +
                   " permits available, more than its limit of " + std::to_string(limit_then);
        } else if (available_of(before) + held != limit_then) {
            what = "its ledger says " + std::to_string(held) + " permits held and its state " +
                   std::to_string(available_of(before)) + " available, not its limit of " + std::to_string(limit_then);
        } else if (ahead != kMaxHolders) {
            what = "its ledger's entry for holder " + std::to_string(ahead) + " has applied change " +
                   std::to_string(ahead_seq) + ", which its state has not made yet (at " +
                   std::to_string(seq_of(before)) + ")";
        }
        break;
    }
    if (!what.empty()) {
        throw std::invalid_argument(where + " is corrupted: " + what + " (unlink the segment)");
    }
}

// `s` must be a value the state word held (a load's, or a failed compare-and-swap's), never a hint.
void ConcurrencyView::settle(Pair s) const noexcept {
    const std::uint32_t pending = pending_of(s);
    if (pending == 0) {
        return;
    }
    const std::int64_t seq = seq_of(s);
    if (pending == kLimitChange) {
        // The limit's bank was written before the swap: its generation moves on (once: a settler
        // late to it finds it moved, by this change or a later one, and moves nothing).
        // A change whose bank holds no limit is damage (a state word no writer made): cleared, the
        // generation left as it is.
        if (named_slot != nullptr) {
            auto was = static_cast<std::uint32_t>(delta_of(s));
            const std::uint32_t next = next_generation(was);
            const std::int64_t limit_next = bank_limit(banks_of(*named_slot), next);
            if (limit_next >= 1 && limit_next <= kMaxPermits) {
                named_slot->generation.compare_exchange_strong(was, next, std::memory_order_acq_rel);
            }
        }
    } else if (pending <= kMaxHolders) { // (a damaged word's index is never followed out of the ledger)
        AtomicPair& e = entry(pending - 1);
        Pair seen = e.load();
        while (seen.b < seq) { // not applied yet (entries only move forward in seq)
            if (e.compare_exchange(seen, Pair{seen.a + delta_of(s), seq})) {
                break;
            }
        }
    }
    Pair expected = s;
    state->compare_exchange(expected, make_state(seq, 0, available_of(s), 0));
}

Pair ConcurrencyView::settled() const noexcept {
    for (;;) {
        const Pair s = state->load();
        if (pending_of(s) == 0) {
            return s;
        }
        settle(s);
    }
}

namespace {
/// The tag of holder slot h.index while it is this process's holding h.
std::uint64_t tag_of(Holding h) {
    return (static_cast<std::uint64_t>(h.generation) << 32) | current_pid();
}
} // namespace

bool ConcurrencyView::take(std::uint32_t holder, std::int64_t n) const noexcept {
    return take_if(holder, n, nullptr, 0);
}

bool ConcurrencyView::take_as(const Segment& segment, Holding h, std::int64_t n) const noexcept {
    return h.index < kMaxHolders && take_if(h.index, n, &segment.header().holders[h.index], tag_of(h));
}

std::int64_t ConcurrencyView::give_back(std::uint32_t holder, std::int64_t n, Nanos now) const noexcept {
    return give_back_if(holder, n, now, nullptr, 0);
}

std::int64_t ConcurrencyView::give_back_as(const Segment& segment, Holding h, std::int64_t n,
                                           Nanos now) const noexcept {
    return h.index < kMaxHolders ? give_back_if(h.index, n, now, &segment.header().holders[h.index], tag_of(h)) : 0;
}

std::int64_t ConcurrencyView::drain(std::uint32_t holder, const HolderSlot& slot, std::uint64_t reserved,
                                    Nanos now) const noexcept {
    return give_back_if(holder, highest(), now, &slot, reserved);
}

// The holding is checked after the state `s` was read and before the compare-and-swap made on it: a
// reclaim reserves the slot before it drains the ledger (a change of the state), so a swap that
// succeeds on a state read after the drain sees the slot reserved or freed, and one made before the
// drain is drained with the rest. (A hint read is acquire, and written release after its swap.)
bool ConcurrencyView::take_if(std::uint32_t holder, std::int64_t n, const HolderSlot* slot,
                              std::uint64_t tag) const noexcept {
    Pair s = state->hint();
    for (;;) {
        if (pending_of(s) != 0) {
            // Only a value the word really held may be settled: a hint can be torn (its two halves
            // from two writes), and would apply one change's delta under another's seq.
            s = settled();
        }
        const std::int64_t available = available_of(s);
        // (more than the limit: a damaged word, never granted from; the limit read after the state, a
        // change of it since moves the state on, and the swap below fails)
        if (available < n || available > limit_now()) {
            if (!state->confirm(s)) {
                continue;
            }
            return false;
        }
        if (slot != nullptr && slot->tag() != tag) {
            return false;
        }
        const Pair next = make_state(seq_of(s) + 1, holder + 1, available - n, n);
        if (state->compare_exchange(s, next)) {
            settle(next);
            return true;
        }
    }
}

std::int64_t ConcurrencyView::give_back_if(std::uint32_t holder, std::int64_t n, Nanos now, const HolderSlot* slot,
                                           std::uint64_t tag) const noexcept {
    Pair s = settled();
    for (;;) {
        // With nothing pending, every change up to this state is in the ledger; a change after it
        // fails the compare-and-swap below.
        const std::int64_t give = std::min(n, entry(holder).load().a);
        if (give <= 0 || (slot != nullptr && slot->tag() != tag)) {
            return 0; // reclaimed meanwhile: nothing of it is held any more
        }
        const std::int64_t limit_then = limit_now();
        const std::int64_t available = std::min(limit_then, available_of(s) + give);
        const Pair next = make_state(seq_of(s) + 1, holder + 1, available, -give);
        if (state->compare_exchange(s, next)) {
            settle(next);
            if (available >= limit_then) {
                full_since->store(now); // idle from the release that brought all back
            }
            return give;
        }
        if (pending_of(s) != 0) {
            s = settled();
        }
    }
}

std::int64_t ConcurrencyView::available() const noexcept {
    return available_of(state->load());
}

std::int64_t ConcurrencyView::held_by(std::uint32_t holder) const noexcept {
    return entry(holder).load().a;
}

void ConcurrencyView::peek(std::int64_t& available, std::int64_t* held) const noexcept {
    for (int attempt = 0; attempt < 16; ++attempt) {
        const Pair s = state->load();
        const std::uint32_t pending = pending_of(s);
        for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
            const Pair e = entry(i).load();
            // (a change the entry has not applied yet is in the state already: counted here as settle would)
            held[i] = e.a + (pending == i + 1 && e.b < seq_of(s) ? delta_of(s) : 0);
        }
        available = available_of(s);
        if (state->load() == s) {
            return;
        }
    }
}

void drain_holder(Segment& segment, std::uint32_t index, std::uint64_t reserved) {
    for (auto& slot : segment.header().named) {
        if (slot.ready.load() != 1) {
            continue;
        }
        // Only a slot whose data lies inside the segment, as it was made (a damaged one is left alone).
        if (slot.kind == Kind::Concurrency && slot.count == 2 && slot.values[0] > 0 &&
            slot.offset >= segment.header().arena_offset && slot.bytes == ConcurrencyView::bytes() &&
            slot.offset <= segment.size() - slot.bytes) {
            // (the caller, reclaim_holder, wakes the waiters once)
            ConcurrencyView::over(segment.at<char>(slot.offset), slot.values[0], &slot)
                .drain(index, segment.header().holders[index], reserved, monotonic_now());
        }
    }
}

} // namespace permits::shm

#endif // __linux__
