// int128.hpp: the portable 128-bit integers (MSVC's i128/u128) against GCC/Clang's __int128 as the
// oracle, over edge values and random pairs, for every operator the engine uses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "permits/int128.hpp"

using permits::Int128;
using permits::UInt128;

// Constant expressions, as the engine's constants need (u128{100} << kShift in clock.cpp).
static_assert((UInt128{100} << 32U) == UInt128::from_halves(0, std::uint64_t{100} << 32));
static_assert(((UInt128{1} << 100U) >> 100U) == 1);
static_assert(Int128{-7} / 2 == -3 && Int128{-7} % 2 == -1);
static_assert(UInt128::from_halves(1, 0) / 3 == UInt128{0x5555555555555555ULL});
static_assert(Int128{-1} < 0 && UInt128{-1} > 0 && static_cast<std::int64_t>(Int128{-5}) == -5);

namespace {

std::string hex(std::uint64_t hi, std::uint64_t lo) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx_%016llx", static_cast<unsigned long long>(hi),
                  static_cast<unsigned long long>(lo));
    return buf;
}

// Without the oracle: values worked out by hand, so that the types are checked on every compiler.
TEST(Int128, KnownValues) {
    const Int128 two64 = Int128{1} << 64U;
    EXPECT_EQ(two64.high(), 1U);
    EXPECT_EQ(two64.low(), 0U);
    EXPECT_EQ((two64 - 1).low(), ~std::uint64_t{0});
    EXPECT_EQ((two64 - 1).high(), 0U);
    const Int128 min = Int128::from_halves(std::uint64_t{1} << 63, 0);
    EXPECT_LT(min, Int128{std::numeric_limits<std::int64_t>::min()});
    EXPECT_EQ(-min, min); // wraps, as two's complement
    EXPECT_EQ(min >> 127U, -1);
    EXPECT_EQ(Int128{std::numeric_limits<std::int64_t>::max()} * 4 / 4, std::numeric_limits<std::int64_t>::max());
    EXPECT_EQ(static_cast<std::int64_t>(Int128{std::numeric_limits<std::int64_t>::min()} * 3 / -3),
              std::numeric_limits<std::int64_t>::min());
    EXPECT_EQ(UInt128{std::numeric_limits<std::uint64_t>::max()} * std::numeric_limits<std::uint64_t>::max(),
              UInt128::from_halves(0xfffffffffffffffeULL, 1));
    EXPECT_EQ(static_cast<double>(-(Int128{1} << 100U)), -0x1p100);
    EXPECT_EQ(static_cast<double>(UInt128::from_halves(~std::uint64_t{0}, ~std::uint64_t{0})), 0x1p128);
    EXPECT_FALSE(static_cast<bool>(Int128{}));
    EXPECT_TRUE(static_cast<bool>(two64)); // not its low half
    // Mixed with built-in integers, as in the engine's expressions.
    const std::int64_t n = -3;
    EXPECT_EQ(n - Int128{5}, -8);
    EXPECT_EQ(Int128{5} * n, -15);
    EXPECT_TRUE(0 < Int128{1} && Int128{1} >= 1 && Int128{2} != 1);
}

#if defined(__SIZEOF_INT128__)

__extension__ using S = __int128;
__extension__ using U = unsigned __int128;

U native(UInt128 v) {
    return (static_cast<U>(v.high()) << 64) | v.low();
}
Int128 portable(S v) {
    return Int128::from_halves(static_cast<std::uint64_t>(static_cast<U>(v) >> 64), static_cast<std::uint64_t>(v));
}
UInt128 portable(U v) {
    return UInt128::from_halves(static_cast<std::uint64_t>(v >> 64), static_cast<std::uint64_t>(v));
}

::testing::AssertionResult same(UInt128 got, U want, const char* what, S a, S b) {
    if (native(got) == want) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << what << " of " << hex(static_cast<std::uint64_t>(static_cast<U>(a) >> 64), static_cast<std::uint64_t>(a))
           << " and " << hex(static_cast<std::uint64_t>(static_cast<U>(b) >> 64), static_cast<std::uint64_t>(b))
           << ": got " << hex(got.high(), got.low()) << ", want "
           << hex(static_cast<std::uint64_t>(want >> 64), static_cast<std::uint64_t>(want));
}
::testing::AssertionResult same(Int128 got, S want, const char* what, S a, S b) {
    return same(UInt128{got}, static_cast<U>(want), what, a, b);
}

constexpr S kMin = static_cast<S>(static_cast<U>(1) << 127);
constexpr S kMax = static_cast<S>((static_cast<U>(1) << 127) - 1);

std::vector<S> edge_values() {
    const S two63 = static_cast<S>(1) << 63;
    const S two64 = static_cast<S>(1) << 64;
    std::vector<S> v = {0,
                        1,
                        -1,
                        2,
                        -2,
                        3,
                        7,
                        -7,
                        1000000007,
                        std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max(),
                        std::numeric_limits<std::uint64_t>::max(),
                        two63,
                        -two63 - 1,
                        two64 - 1,
                        two64,
                        two64 + 1,
                        -two64,
                        -two64 - 1,
                        -two64 + 1,
                        two64 * 3 + 5,
                        kMax,
                        kMax - 1,
                        kMin,
                        kMin + 1,
                        static_cast<S>(1) << 100,
                        -(static_cast<S>(1) << 100)};
    return v;
}

// Random values of every size: full 128-bit, 64-bit (signed and unsigned), small; so that division
// takes both its 64-bit and its long path, with quotients of every length.
std::vector<S> random_values(std::size_t count) {
    std::mt19937_64 rng(20261126);
    std::vector<S> v;
    v.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t hi = rng();
        const std::uint64_t lo = rng();
        const U full = (static_cast<U>(hi) << 64) | lo;
        switch (i % 5) {
        case 0: v.push_back(static_cast<S>(full)); break;
        case 1: v.push_back(static_cast<S>(full >> (rng() % 128))); break;       // any bit length
        case 2: v.push_back(static_cast<std::int64_t>(lo)); break;               // sign-extended 64
        case 3: v.push_back(static_cast<S>(lo >> (rng() % 64))); break;          // small, positive
        default: v.push_back(-static_cast<S>(full >> (1 + rng() % 127))); break; // negative
        }
    }
    return v;
}

void check_pair(S a, S b) {
    const Int128 x = portable(a);
    const Int128 y = portable(b);
    const U ua = static_cast<U>(a);
    const U ub = static_cast<U>(b);
    const UInt128 ux = portable(ua);
    const UInt128 uy = portable(ub);
    // Signed +, -, * wrap: the oracle computes them unsigned (signed overflow is undefined).
    EXPECT_TRUE(same(x + y, static_cast<S>(ua + ub), "+", a, b));
    EXPECT_TRUE(same(x - y, static_cast<S>(ua - ub), "-", a, b));
    EXPECT_TRUE(same(x * y, static_cast<S>(ua * ub), "*", a, b));
    EXPECT_TRUE(same(ux + uy, ua + ub, "u+", a, b));
    EXPECT_TRUE(same(ux - uy, ua - ub, "u-", a, b));
    EXPECT_TRUE(same(ux * uy, ua * ub, "u*", a, b));
    EXPECT_TRUE(same(x & y, a & b, "&", a, b));
    EXPECT_TRUE(same(x | y, a | b, "|", a, b));
    EXPECT_TRUE(same(x ^ y, a ^ b, "^", a, b));
    EXPECT_TRUE(same(ux & uy, ua & ub, "u&", a, b));
    EXPECT_TRUE(same(ux | uy, ua | ub, "u|", a, b));
    if (b != 0 && !(a == kMin && b == -1)) {
        EXPECT_TRUE(same(x / y, a / b, "/", a, b));
        EXPECT_TRUE(same(x % y, a % b, "%", a, b));
        Int128 q = x;
        q /= y;
        EXPECT_TRUE(same(q, a / b, "/=", a, b));
        Int128 r = x;
        r %= y;
        EXPECT_TRUE(same(r, a % b, "%=", a, b));
    }
    if (b != 0) {
        EXPECT_TRUE(same(ux / uy, ua / ub, "u/", a, b));
        EXPECT_TRUE(same(ux % uy, ua % ub, "u%", a, b));
    }
    EXPECT_EQ(x == y, a == b);
    EXPECT_EQ(x != y, a != b);
    EXPECT_EQ(x < y, a < b) << hex(x.high(), x.low()) << " < " << hex(y.high(), y.low());
    EXPECT_EQ(x <= y, a <= b);
    EXPECT_EQ(x > y, a > b);
    EXPECT_EQ(x >= y, a >= b);
    EXPECT_EQ(ux < uy, ua < ub);
    EXPECT_EQ(ux <= uy, ua <= ub);
    EXPECT_EQ(ux > uy, ua > ub);
    EXPECT_EQ(ux >= uy, ua >= ub);
    EXPECT_EQ(ux == uy, ua == ub);
    Int128 c = x;
    c += y;
    EXPECT_TRUE(same(c, static_cast<S>(ua + ub), "+=", a, b));
    c -= y;
    EXPECT_TRUE(same(c, a, "-=", a, b));
    c *= y;
    EXPECT_TRUE(same(c, static_cast<S>(ua * ub), "*=", a, b));
    // With a built-in 64-bit operand converted implicitly, as in `i128 * std::int64_t`.
    const auto n = static_cast<std::int64_t>(b);
    EXPECT_TRUE(same(x * n, static_cast<S>(ua * static_cast<U>(static_cast<S>(n))), "*int64", a, b));
    EXPECT_TRUE(same(n - x, static_cast<S>(static_cast<U>(static_cast<S>(n)) - ua), "int64-", a, b));
    EXPECT_EQ(x < n, a < n);
}

void check_one(S a) {
    const Int128 x = portable(a);
    const U ua = static_cast<U>(a);
    const UInt128 ux = portable(ua);
    EXPECT_TRUE(same(-x, static_cast<S>(-ua), "unary -", a, 0));
    EXPECT_TRUE(same(~x, ~a, "~", a, 0));
    EXPECT_TRUE(same(-ux, -ua, "unary u-", a, 0));
    Int128 inc = x;
    ++inc;
    EXPECT_TRUE(same(inc, static_cast<S>(ua + 1), "++", a, 0));
    Int128 dec = x;
    dec--;
    EXPECT_TRUE(same(dec, static_cast<S>(ua - 1), "--", a, 0));
    for (unsigned s = 0; s < 128; ++s) {
        EXPECT_TRUE(same(x << s, static_cast<S>(ua << s), "<<", a, s));
        EXPECT_TRUE(same(x >> s, a >> s, ">>", a, s)); // arithmetic
        EXPECT_TRUE(same(ux << s, ua << s, "u<<", a, s));
        EXPECT_TRUE(same(ux >> s, ua >> s, "u>>", a, s)); // logical
        Int128 y = x;
        y >>= s;
        y <<= s;
        EXPECT_TRUE(same(y, static_cast<S>(static_cast<U>(a >> s) << s), ">>= <<=", a, s));
    }
    // Narrowing, signed and unsigned, modulo 2**N as the built-in conversions.
    EXPECT_EQ(static_cast<std::int64_t>(x), static_cast<std::int64_t>(a));
    EXPECT_EQ(static_cast<std::uint64_t>(x), static_cast<std::uint64_t>(a));
    EXPECT_EQ(static_cast<std::int32_t>(x), static_cast<std::int32_t>(a));
    EXPECT_EQ(static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(a));
    EXPECT_EQ(static_cast<std::int8_t>(x), static_cast<std::int8_t>(a));
    EXPECT_EQ(static_cast<std::int64_t>(ux), static_cast<std::int64_t>(ua));
    EXPECT_EQ(static_cast<std::uint64_t>(ux), static_cast<std::uint64_t>(ua));
    EXPECT_EQ(static_cast<bool>(x), static_cast<bool>(a));
    EXPECT_EQ(static_cast<bool>(ux), static_cast<bool>(ua));
    EXPECT_EQ(static_cast<double>(x), static_cast<double>(a)) << hex(x.high(), x.low());
    EXPECT_EQ(static_cast<double>(ux), static_cast<double>(ua)) << hex(x.high(), x.low());
    // Between the two types, bit for bit.
    EXPECT_TRUE(same(Int128{ux}, a, "Int128(UInt128)", a, 0));
    EXPECT_TRUE(same(UInt128{x}, ua, "UInt128(Int128)", a, 0));
}

TEST(Int128, EdgeValuesAgainstInt128) {
    const std::vector<S> v = edge_values();
    for (const S a : v) {
        check_one(a);
        for (const S b : v) {
            check_pair(a, b);
        }
    }
}

TEST(Int128, RandomPairsAgainstInt128) {
    const std::vector<S> v = random_values(4000);
    const std::vector<S> edges = edge_values();
    for (std::size_t i = 0; i < v.size(); ++i) {
        check_pair(v[i], v[(i * 7 + 1) % v.size()]);
        check_pair(v[i], edges[i % edges.size()]);
        check_pair(edges[i % edges.size()], v[i]);
        if (i % 8 == 0) {
            check_one(v[i]);
        }
    }
}

// Doubles that must round (more than 53 significant bits, ties included), as the built-in does.
TEST(Int128, ConversionToDoubleRoundsOnce) {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 4000; ++i) {
        const U base = (static_cast<U>(rng()) << 64) | rng();
        const unsigned shift = static_cast<unsigned>(rng() % 70);
        U v = base >> shift;
        const int top = 127 - static_cast<int>(shift);
        if (i % 3 == 0 && (v >> top) != 0 && top > 64) {
            // Exactly half way between two doubles (ties to even), or just past half way by a bit
            // that only the conversion's sticky bit keeps (it is below the top 64 bits).
            const auto round = static_cast<unsigned>(top - 53);
            v = ((v >> round) << round) | (static_cast<U>(1) << round);
            if (i % 2 == 0) {
                v |= 1;
            }
        }
        EXPECT_EQ(static_cast<double>(portable(v)), static_cast<double>(v));
        EXPECT_EQ(static_cast<double>(portable(static_cast<S>(v))), static_cast<double>(static_cast<S>(v)));
    }
}

TEST(Int128, ConstructionFromBuiltInIntegers) {
    EXPECT_TRUE(same(Int128{static_cast<std::int8_t>(-1)}, -1, "int8", 0, 0));
    EXPECT_TRUE(same(Int128{std::numeric_limits<std::int64_t>::min()}, std::numeric_limits<std::int64_t>::min(),
                     "int64 min", 0, 0));
    EXPECT_TRUE(same(Int128{std::numeric_limits<std::uint64_t>::max()}, std::numeric_limits<std::uint64_t>::max(),
                     "uint64 max", 0, 0));
    EXPECT_TRUE(same(Int128{std::numeric_limits<std::uint32_t>::max()}, std::numeric_limits<std::uint32_t>::max(),
                     "uint32 max", 0, 0));
    EXPECT_TRUE(same(UInt128{-1}, static_cast<U>(-1), "u from -1", 0, 0));
    EXPECT_TRUE(same(UInt128{std::numeric_limits<std::int64_t>::min()},
                     static_cast<U>(std::numeric_limits<std::int64_t>::min()), "u from int64 min", 0, 0));
}

#endif // __SIZEOF_INT128__

} // namespace
