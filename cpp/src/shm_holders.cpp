// A segment's table of holders: the slot a process holds while it holds concurrency permits
// (pinned by each take, freed when its uses drop to zero), and the reclaim of a dead holder's slot
// (its permits given back first).
#include "permits/shm_segment.hpp"

#if defined(__linux__)

#include <atomic>
#include <cstdint>
#include <limits>

namespace permits::shm {

// The claimer of a holder slot with none free drains a dead holder's permits first (shm_limiters.cpp).
void drain_holder(Segment& segment, std::uint32_t index, std::uint64_t reserved);

namespace {
/// ProcessId::self(), read from /proc once per process (a slot is claimed anew after each time a
/// process's permits all came back: not a file read each time). Renewed in a forked child, whose
/// pid differs; threads racing to fill it write the same values.
ProcessId self_cached() {
    static std::atomic<std::uint64_t> pid{0};
    static std::atomic<std::uint64_t> start_time{0};
    static std::atomic<std::uint64_t> pid_ns{0};
    const std::uint64_t now = current_pid();
    if (pid.load() != now) {
        const ProcessId me = ProcessId::self();
        start_time.store(me.start_time);
        pid_ns.store(me.pid_ns);
        pid.store(me.pid);
        return me;
    }
    return ProcessId{now, start_time.load(), pid_ns.load()};
}
} // namespace

bool Segment::pin(std::int64_t n, Nanos reclaim_ttl, Holding& out) {
    const std::uint64_t pid = current_pid();
    const std::uint64_t claimed = claimed_.load();
    if ((claimed >> 32) == pid) {
        const auto index = static_cast<std::uint32_t>((claimed & 0xffffffffULL) - 1);
        AtomicPair& word = header_->holders[index].word;
        Pair s = word.load();
        while (pid_of(static_cast<std::uint64_t>(s.a)) == pid) {
            if (s.b < 0) {
                // Another thread of ours is freeing it: finish that (never wait on it), then claim anew.
                finish_release(index, s);
                break;
            }
            if (word.compare_exchange(s, Pair{s.a, s.b + n})) {
                out = {index, static_cast<std::uint32_t>(generation_of(static_cast<std::uint64_t>(s.a)))};
                return true;
            }
        }
        // Freed, or judged dead and reclaimed (a stalled process in another pid namespace): claim anew.
    }
    const ProcessId me = self_cached();
    const auto claim = [&](bool exact) {
        for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
            HolderSlot& slot = header_->holders[i];
            // A hint (no write) passes over the slots in use, but may be stale: a pass over the slots
            // as they are follows one that found none. The compare-and-swap decides.
            Pair s = exact ? slot.word.load() : slot.word.hint();
            while (pid_of(static_cast<std::uint64_t>(s.a)) == 0) {
                const std::uint64_t gen = generation_of(static_cast<std::uint64_t>(s.a));
                // Claimed with its first uses: no one frees it before this take is done. Its fields
                // were cleared before it was freed (zeros read as "alive, not yet known").
                if (slot.word.compare_exchange(s, Pair{static_cast<std::int64_t>((gen << 32) | pid), n})) {
                    slot.heartbeat.store(monotonic_now());
                    slot.pid_ns.store(me.pid_ns);
                    slot.start_time.store(me.start_time);
                    claimed_.store((pid << 32) | (i + 1));
                    out = {i, static_cast<std::uint32_t>(gen)};
                    return true;
                }
            }
        }
        return false;
    };
    if (claim(false) || claim(true)) {
        return true;
    }
    // None free: the dead holders' permits come back, and their slots with them.
    for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
        reclaim_holder(i, reclaim_ttl);
    }
    if (claim(true)) {
        return true;
    }
    return false; // kMaxHolders live processes hold permits at this moment
}

void Segment::unpin(Holding h, std::int64_t n) noexcept {
    if (h.index >= kMaxHolders || n <= 0) {
        return;
    }
    AtomicPair& word = header_->holders[h.index].word;
    const auto mine = static_cast<std::int64_t>((static_cast<std::uint64_t>(h.generation) << 32) | current_pid());
    Pair s = word.load();
    while (s.a == mine && s.b > 0) {
        const std::int64_t left = std::max<std::int64_t>(s.b - n, 0);
        // At zero: marked as being freed (-1) in the same step, so no take pins it meanwhile.
        if (word.compare_exchange(s, Pair{mine, left == 0 ? -1 : left})) {
            if (left == 0) {
                finish_release(h.index, Pair{mine, -1});
            }
            return;
        }
    }
}

void Segment::finish_release(std::uint32_t index, Pair releasing) noexcept {
    HolderSlot& slot = header_->holders[index];
    // Cleared before it is free, so a new claimer is never judged by the last one's start time.
    slot.start_time.store(0);
    slot.heartbeat.store(0);
    const std::uint64_t gen = generation_of(static_cast<std::uint64_t>(releasing.a));
    slot.word.compare_exchange(releasing, Pair{static_cast<std::int64_t>((gen + 1) << 32), 0});
}

bool Segment::holds(Holding h) const noexcept {
    return h.index < kMaxHolders &&
           header_->holders[h.index].tag() == ((static_cast<std::uint64_t>(h.generation) << 32) | current_pid());
}

bool Segment::current(Holding& out) const noexcept {
    const std::uint64_t pid = current_pid();
    const std::uint64_t claimed = claimed_.load();
    if ((claimed >> 32) != pid) {
        return false;
    }
    const auto index = static_cast<std::uint32_t>((claimed & 0xffffffffULL) - 1);
    const Pair s = header_->holders[index].word.load();
    if (pid_of(static_cast<std::uint64_t>(s.a)) != pid || s.b < 0) {
        return false;
    }
    out = {index, static_cast<std::uint32_t>(generation_of(static_cast<std::uint64_t>(s.a)))};
    return true;
}

bool Segment::slot_available() const noexcept {
    Holding h;
    if (current(h)) {
        return true;
    }
    // The slots as they are, not their hints (a stale hint would have a queued request retried in vain).
    for (const auto& slot : header_->holders) {
        if (pid_of(slot.tag()) == 0) {
            return true;
        }
    }
    return false;
}

bool Segment::reclaim_holder(std::uint32_t index, Nanos ttl) {
    HolderSlot& slot = header_->holders[index];
    Pair s = slot.word.load();
    const auto tag = static_cast<std::uint64_t>(s.a);
    if (pid_of(tag) == 0 || !holder_dead(slot, ttl, monotonic_now())) {
        return false;
    }
    // Reserved first: no one claims it while it is drained (a reclaimer that died here leaves it
    // reserved: the next one takes it over; two alive at once both drain, each only while the slot is
    // still reserved, so the later never drains the slot's next holder).
    const std::uint64_t reserved = (generation_of(tag) << 32) | kReclaimingPid;
    if (!slot.word.compare_exchange(s, Pair{static_cast<std::int64_t>(reserved), 0})) {
        return false;
    }
    drain_holder(*this, index, reserved); // the named limiters' ledgers; per-key entries go stale with the generation
    free_holder(index, reserved);
    notify();
    return true;
}

std::uint32_t Segment::holder_generation(std::uint32_t index) const noexcept {
    return static_cast<std::uint32_t>(generation_of(header_->holders[index].tag()));
}

void Segment::free_holder(std::uint32_t index, std::uint64_t seen_tag) noexcept {
    HolderSlot& slot = header_->holders[index];
    slot.start_time.store(0);
    slot.heartbeat.store(0);
    Pair s = slot.word.load();
    while (static_cast<std::uint64_t>(s.a) == seen_tag) {
        if (slot.word.compare_exchange(s, Pair{static_cast<std::int64_t>((generation_of(seen_tag) + 1) << 32), 0})) {
            return;
        }
    }
}

void Segment::heartbeat() noexcept {
    const std::uint64_t pid = current_pid();
    const std::uint64_t claimed = claimed_.load();
    if ((claimed >> 32) == pid) {
        HolderSlot& slot = header_->holders[(claimed & 0xffffffffULL) - 1];
        if (pid_of(slot.tag()) == pid) {
            slot.heartbeat.store(monotonic_now());
        }
    }
}

} // namespace permits::shm

#endif // __linux__
