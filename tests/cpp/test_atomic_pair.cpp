// AtomicPair: two 64-bit words read and changed together by one 128-bit compare-and-swap.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "permits/atomic_pair.hpp"

using namespace permits;

namespace {
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
} // namespace

TEST(AtomicPair, DefaultIsZero) {
    AtomicPair p;
    EXPECT_EQ(p.load(), (Pair{0, 0}));
}

TEST(AtomicPair, HoldsItsInitialValue) {
    AtomicPair p(Pair{3, -4});
    const Pair v = p.load();
    EXPECT_EQ(v.a, 3);
    EXPECT_EQ(v.b, -4);
}

TEST(AtomicPair, ExtremeValuesRoundTrip) {
    for (const Pair v : {Pair{kMin, kMax}, Pair{kMax, kMin}, Pair{-1, -1}, Pair{-1, 0}, Pair{0, -1}, Pair{kMin, kMin},
                         Pair{kMax, kMax}, Pair{1, 0}, Pair{0, 1}}) {
        AtomicPair p(v);
        EXPECT_EQ(p.load(), v) << v.a << ", " << v.b;
        Pair expected = v;
        EXPECT_TRUE(p.compare_exchange(expected, Pair{v.b, v.a}));
        EXPECT_EQ(p.load(), (Pair{v.b, v.a}));
    }
}

TEST(AtomicPair, CompareExchangeSucceedsOnMatch) {
    AtomicPair p(Pair{1, 2});
    Pair expected{1, 2};
    EXPECT_TRUE(p.compare_exchange(expected, Pair{5, 6}));
    EXPECT_EQ(expected, (Pair{1, 2})); // untouched on success
    EXPECT_EQ(p.load(), (Pair{5, 6}));
}

TEST(AtomicPair, CompareExchangeFailsAndReportsTheCurrentValue) {
    AtomicPair p(Pair{1, 2});
    Pair expected{1, 3}; // only the second word differs
    EXPECT_FALSE(p.compare_exchange(expected, Pair{9, 9}));
    EXPECT_EQ(expected, (Pair{1, 2}));
    EXPECT_EQ(p.load(), (Pair{1, 2}));

    expected = Pair{2, 2}; // only the first word differs
    EXPECT_FALSE(p.compare_exchange(expected, Pair{9, 9}));
    EXPECT_EQ(expected, (Pair{1, 2}));

    // The refreshed `expected` makes the retry succeed.
    EXPECT_TRUE(p.compare_exchange(expected, Pair{9, 9}));
    EXPECT_EQ(p.load(), (Pair{9, 9}));
}

TEST(AtomicPair, LoadOfZeroDoesNotDisturbIt) {
    // load() is a compare-and-swap of 0 with 0: a zero pair stays zero, others stay as they are.
    AtomicPair zero;
    EXPECT_EQ(zero.load(), (Pair{0, 0}));
    EXPECT_EQ(zero.load(), (Pair{0, 0}));
    AtomicPair other(Pair{0, 7});
    EXPECT_EQ(other.load(), (Pair{0, 7}));
    EXPECT_EQ(other.load(), (Pair{0, 7}));
}

TEST(AtomicPair, IsSixteenByteAligned) {
    AtomicPair ps[3];
    for (auto& p : ps) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&p) % 16, 0u);
    }
    EXPECT_EQ(alignof(AtomicPair), 16u);
}

TEST(AtomicPair, ConcurrentUpdatesAreNeverLostOrTorn) {
    // Each update moves both words together (a up, b down): a torn or lost update breaks a + b == 0.
    AtomicPair p;
    constexpr int kThreads = 2;
    constexpr int kIncrements = 20000;
    std::vector<std::thread> threads;
    bool torn = false;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&p] {
            for (int i = 0; i < kIncrements; ++i) {
                Pair cur = p.load();
                while (!p.compare_exchange(cur, Pair{cur.a + 1, cur.b - 1})) {
                }
            }
        });
    }
    threads.emplace_back([&p, &torn] {
        for (int i = 0; i < kIncrements; ++i) {
            const Pair v = p.load();
            if (v.a + v.b != 0) {
                torn = true;
            }
        }
    });
    for (auto& th : threads) {
        th.join();
    }
    EXPECT_FALSE(torn);
    EXPECT_EQ(p.load(), (Pair{kThreads * kIncrements, -kThreads * kIncrements}));
}

TEST(AtomicPair, LockFreeWhereTheCpuHasA16ByteCompareAndSwap) {
#if defined(PERMITS_FORCE_ATOMIC_FALLBACK)
    EXPECT_FALSE(kAtomicPairLockFree); // the spinlock-protected pair, tested on purpose
#elif defined(__x86_64__) || defined(__aarch64__) || defined(_M_X64) || defined(_M_ARM64)
    EXPECT_TRUE(kAtomicPairLockFree); // else a build flag (-mcx16) went missing
#endif
}

TEST(AtomicPair, TheMsvcIntrinsicWhereAskedFor) {
    // scripts/portability's Windows build asks for MSVC's intrinsics (PERMITS_MSVC_INTRINSICS): this
    // says that build runs the _InterlockedCompareExchange128 path, not GCC's builtins.
#if defined(PERMITS_FORCE_ATOMIC_FALLBACK)
    EXPECT_STREQ(kAtomicPairKind, "spinlock");
#elif defined(PERMITS_MSVC_INTRINSICS) || (defined(_MSC_VER) && !defined(__clang__))
    EXPECT_STREQ(kAtomicPairKind, "msvc");
#elif defined(__x86_64__) || defined(__aarch64__)
    EXPECT_STREQ(kAtomicPairKind, "sync");
#endif
}
