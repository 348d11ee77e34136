// Two 64-bit words changed together by one compare-and-swap (cmpxchg16b on x86-64):
// a limiter's whole state, so that every operation on it is lock-free.
#pragma once

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
    explicit AtomicPair(Pair p) : v_(pack(p)) {}
    AtomicPair(const AtomicPair&) = delete;
    AtomicPair& operator=(const AtomicPair&) = delete;

    /// An atomic snapshot (a compare-and-swap that changes nothing: a torn read could
    /// otherwise let a rejection be decided on a state that never existed).
    Pair load() const noexcept {
        auto* p = const_cast<u128*>(&v_);
        return unpack(__sync_val_compare_and_swap(p, 0, 0));
    }

    /// On failure `expected` is updated to the current value.
    bool compare_exchange(Pair& expected, Pair desired) noexcept {
        const u128 want = pack(expected);
        const u128 seen = __sync_val_compare_and_swap(&v_, want, pack(desired));
        if (seen == want) {
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
};

} // namespace permits
