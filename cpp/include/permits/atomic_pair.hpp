// Two 64-bit words changed together by one compare-and-swap (cmpxchg16b on x86-64):
// a limiter's whole state, so that every operation on it is lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "permits/time.hpp"

namespace permits {

struct Pair {
    std::int64_t a = 0;
    std::int64_t b = 0;
    bool operator==(const Pair&) const = default;
};

class AtomicPair {
public:
    AtomicPair() = default;
    explicit AtomicPair(Pair p) : v_(pack(p)), hint_a_(p.a), hint_b_(p.b) {}
    AtomicPair(const AtomicPair&) = delete;
    AtomicPair& operator=(const AtomicPair&) = delete;

    /// An atomic snapshot (a compare-and-swap that changes nothing: a torn read could
    /// otherwise let a rejection be decided on a state that never existed).
    Pair load() const noexcept {
        auto* p = const_cast<u128*>(&v_);
        return unpack(__sync_val_compare_and_swap(p, 0, 0));
    }

    /// The value last written, read with two plain loads: a guess to start a compare-and-swap
    /// loop with (one cmpxchg16b instead of two when uncontended; benchmarks/cpp/bench_engine.cpp).
    /// It may be stale or mixed from two writes; compare_exchange() and confirm() correct it.
    Pair hint() const noexcept {
        return {hint_a_.load(std::memory_order_relaxed), hint_b_.load(std::memory_order_relaxed)};
    }

    /// True if `seen` is the current value; else false with `seen` updated to it. A decision
    /// that changes nothing (a rejection) confirms the state it was made on.
    bool confirm(Pair& seen) const noexcept {
        const Pair now = load();
        if (now == seen) {
            return true;
        }
        seen = now;
        return false;
    }

    /// On failure `expected` is updated to the current value.
    bool compare_exchange(Pair& expected, Pair desired) noexcept {
        const u128 want = pack(expected);
        const u128 seen = __sync_val_compare_and_swap(&v_, want, pack(desired));
        if (seen == want) {
            hint_a_.store(desired.a, std::memory_order_relaxed);
            hint_b_.store(desired.b, std::memory_order_relaxed);
            return true;
        }
        expected = unpack(seen);
        return false;
    }

private:
    static u128 pack(Pair p) noexcept {
        return (static_cast<u128>(static_cast<std::uint64_t>(p.a)) << 64) | static_cast<std::uint64_t>(p.b);
    }
    static Pair unpack(u128 v) noexcept {
        return {static_cast<std::int64_t>(static_cast<std::uint64_t>(v >> 64)),
                static_cast<std::int64_t>(static_cast<std::uint64_t>(v))};
    }
    alignas(16) u128 v_ = 0;
    std::atomic<std::int64_t> hint_a_{0};
    std::atomic<std::int64_t> hint_b_{0};
};

} // namespace permits
