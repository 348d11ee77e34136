// Two 64-bit words changed together by one compare-and-swap: a limiter's whole state, so that
// every operation on it is lock-free where the CPU has a 16-byte compare-and-swap.
//
// The 16-byte compare-and-swap is chosen at compile time, never tested for at run time (the hot
// path has no branch for it):
//   - GCC/Clang where __GCC_HAVE_SYNC_COMPARE_AND_SWAP_16 says the __sync builtins do it without a
//     lock: x86-64 with -mcx16 (cmpxchg16b, also MinGW), aarch64 (CASP with LSE, else LDXP/STXP).
//     Not std::atomic<Pair>: GCC routes 16-byte atomics through libatomic and reports them not
//     always lock-free even where they are.
//   - MSVC on x64 and arm64: _InterlockedCompareExchange128 (msvc_intrinsics.hpp: also where
//     PERMITS_MSVC_INTRINSICS asks for it, to test this path off MSVC).
//   - elsewhere, or with PERMITS_FORCE_ATOMIC_FALLBACK defined (CMake option of that name, to test
//     it): the pair behind a spinlock. Correct, but a thread preempted holding it stalls the others.
#pragma once

#include <atomic>
#include <cstdint>

#include "permits/msvc_intrinsics.hpp"

#if !defined(PERMITS_FORCE_ATOMIC_FALLBACK) && defined(PERMITS_HAS_MSVC_INTRINSICS) &&                                 \
    (defined(PERMITS_X64) || defined(PERMITS_ARM64))
#define PERMITS_ATOMIC_PAIR_MSVC 1
#elif !defined(PERMITS_FORCE_ATOMIC_FALLBACK) && defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16) &&                       \
    defined(__SIZEOF_INT128__)
#define PERMITS_ATOMIC_PAIR_SYNC 1
#else
#define PERMITS_ATOMIC_PAIR_LOCKED 1
#include <thread>
#endif

namespace permits {

struct Pair {
    std::int64_t a = 0;
    std::int64_t b = 0;
    bool operator==(const Pair&) const = default;
};

/// Which 16-byte compare-and-swap this build has: "sync" (GCC/Clang builtins), "msvc"
/// (_InterlockedCompareExchange128) or "spinlock".
inline constexpr const char* kAtomicPairKind =
#if defined(PERMITS_ATOMIC_PAIR_MSVC)
    "msvc";
#elif defined(PERMITS_ATOMIC_PAIR_SYNC)
    "sync";
#else
    "spinlock";
#endif

/// Whether AtomicPair is lock-free in this build.
inline constexpr bool kAtomicPairLockFree =
#if defined(PERMITS_ATOMIC_PAIR_LOCKED)
    false;
#else
    true;
#endif

class AtomicPair {
public:
    AtomicPair() = default;
    explicit AtomicPair(Pair p) : v_(pack(p)), hint_a_(p.a), hint_b_(p.b) {}
    AtomicPair(const AtomicPair&) = delete;
    AtomicPair& operator=(const AtomicPair&) = delete;

    /// An atomic snapshot (a compare-and-swap that changes nothing: a torn read could
    /// otherwise let a rejection be decided on a state that never existed).
    Pair load() const noexcept {
        Raw seen = Raw{};
        cas(seen, Raw{});
        return unpack(seen);
    }

    /// The value last written, read with two plain loads: a guess to start a compare-and-swap
    /// loop with (one cmpxchg16b instead of two when uncontended; benchmarks/cpp/bench_engine.cpp).
    /// It may be stale or mixed from two writes; compare_exchange() and confirm() correct it.
    Pair hint() const noexcept {
        // (acquire, written release: a swap made on a hint follows the swap that wrote it, and what
        // preceded that one; a plain load and store on x86-64)
        return {hint_a_.load(std::memory_order_acquire), hint_b_.load(std::memory_order_acquire)};
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

    /// Sets the hint to the current value (a compare-and-swap that changes nothing), and returns that
    /// value: a hint kept in memory other processes share may be damaged, a value no check has seen.
    Pair rehint() noexcept {
        Pair seen = load();
        while (!compare_exchange(seen, seen)) {
        }
        return seen;
    }

    /// On failure `expected` is updated to the current value.
    bool compare_exchange(Pair& expected, Pair desired) noexcept {
        Raw seen = pack(expected);
        if (cas(seen, pack(desired))) {
            hint_a_.store(desired.a, std::memory_order_release);
            hint_b_.store(desired.b, std::memory_order_release);
            return true;
        }
        expected = unpack(seen);
        return false;
    }

private:
#if defined(PERMITS_ATOMIC_PAIR_SYNC)
    __extension__ using Raw = unsigned __int128;
    static Raw pack(Pair p) noexcept {
        return (static_cast<Raw>(static_cast<std::uint64_t>(p.a)) << 64) | static_cast<std::uint64_t>(p.b);
    }
    static Pair unpack(Raw v) noexcept {
        return {static_cast<std::int64_t>(static_cast<std::uint64_t>(v >> 64)),
                static_cast<std::int64_t>(static_cast<std::uint64_t>(v))};
    }
    /// One 16-byte compare-and-swap (full barrier); `seen` becomes the value found. const, as a
    /// load is one too: the memory is written only with the value it already holds.
    bool cas(Raw& seen, Raw desired) const noexcept {
        const Raw want = seen;
        seen = __sync_val_compare_and_swap(&v_, want, desired);
        return seen == want;
    }
    alignas(16) mutable Raw v_ = 0;
#elif defined(PERMITS_ATOMIC_PAIR_MSVC)
    struct alignas(16) Raw {
        std::int64_t lo = 0; // b: _InterlockedCompareExchange128 takes the high word apart
        std::int64_t hi = 0; // a
    };
    static Raw pack(Pair p) noexcept {
        return {p.b, p.a};
    }
    static Pair unpack(Raw v) noexcept {
        return {v.hi, v.lo};
    }
    bool cas(Raw& seen, Raw desired) const noexcept {
        // On failure the intrinsic writes the value found into `seen`.
        return _InterlockedCompareExchange128(&v_.lo, desired.hi, desired.lo, &seen.lo) != 0;
    }
    mutable Raw v_;
#else
    using Raw = Pair;
    static Raw pack(Pair p) noexcept {
        return p;
    }
    static Pair unpack(Raw v) noexcept {
        return v;
    }
    bool cas(Raw& seen, Raw desired) const noexcept {
        while (lock_.test_and_set(std::memory_order_acquire)) {
            std::this_thread::yield(); // the holder may be preempted: let it run
        }
        const Raw now = v_;
        const bool match = now == seen;
        if (match) {
            v_ = desired;
        }
        lock_.clear(std::memory_order_release);
        seen = now;
        return match;
    }
    alignas(16) mutable Raw v_;     // aligned as the others: the limiters' layout does not change
    mutable std::atomic_flag lock_; // clear: value-initialized since C++20
#endif
    std::atomic<std::int64_t> hint_a_{0};
    std::atomic<std::int64_t> hint_b_{0};
};

} // namespace permits
