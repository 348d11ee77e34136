// Integer nanoseconds: the only unit of time inside the engine.
#pragma once

#include <cstdint>
#include <limits>

#include "permits/int128.hpp"
#include "permits/msvc_intrinsics.hpp" // _umul128, __shiftright128

namespace permits {

using Nanos = std::int64_t;

// 128-bit intermediates keep products like periods * tokens exact: GCC/Clang's __int128 (MinGW
// has it too), else (MSVC) the portable two-halves types of int128.hpp. PERMITS_PORTABLE_INT128
// (the CMake option) picks those everywhere, to test them with the whole engine.
#if defined(__SIZEOF_INT128__) && !defined(PERMITS_PORTABLE_INT128)
__extension__ using i128 = __int128;
__extension__ using u128 = unsigned __int128;
#else
using i128 = Int128;
using u128 = UInt128;
#endif

/// (a * b) >> shift (shift < 64) from four 32 x 32-bit products: where there is no 128-bit type
/// (tested everywhere, used only there).
inline std::uint64_t mul_shift_portable(std::uint64_t a, std::uint64_t b, unsigned shift) noexcept {
    const int128_detail::Halves p = int128_detail::mul64(a, b);
    return shift == 0 ? p.lo : (p.lo >> shift) | (p.hi << (64 - shift));
}

/// (a * b) >> shift (shift < 64), the product taken in 128 bits; the result must fit in 64 bits.
inline std::uint64_t mul_shift(std::uint64_t a, std::uint64_t b, unsigned shift) noexcept {
#if defined(PERMITS_HAS_MSVC_INTRINSICS) && defined(PERMITS_X64)
    unsigned long long hi = 0;
    const unsigned long long lo = _umul128(a, b, &hi);
    return shift == 0 ? lo : __shiftright128(lo, hi, static_cast<unsigned char>(shift));
#elif defined(__SIZEOF_INT128__)
    __extension__ using U128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<U128>(a) * b) >> shift);
#else
    return mul_shift_portable(a, b, shift);
#endif
}

/// "Never": a deadline or wait time that no clock reaches.
inline constexpr Nanos kNever = std::numeric_limits<Nanos>::max();

/// The latest time a ManualClock may reach (2**63 - 2**60 ns, about 255 years), well short of
/// kNever, so that a time is never mistaken for "never"; every sum of a time and a duration in the
/// engine saturates or is computed in 128 bits.
inline constexpr Nanos kMaxTime = (Nanos{1} << 62) + (Nanos{1} << 61) + (Nanos{1} << 60);

/// The largest permit count, limit or queue limit (as .NET's int permit counts).
inline constexpr std::int64_t kMaxPermits = 2147483647;

/// A time-based grant's tag: the start of period `index` (of `unit` ns) of the timeline anchored at
/// `anchor` (rule.hpp, Rule::take). Plain 64-bit arithmetic (a take's fast path): exact for every
/// period a clock reaches, and the same function compares a refund's tag.
inline std::int64_t period_tag(Nanos anchor, std::int64_t index, Nanos unit) noexcept {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(anchor) +
                                     static_cast<std::uint64_t>(index) * static_cast<std::uint64_t>(unit));
}

/// a + b, saturating at kNever (times here are never negative).
inline Nanos sat_add(Nanos a, Nanos b) noexcept {
#if defined(__GNUC__) || defined(__clang__)
    Nanos r = 0;
    if (__builtin_add_overflow(a, b, &r)) {
        return kNever;
    }
    return r;
#else
    // Both are non-negative here: only an overflow past kNever is possible.
    return a > kNever - b ? kNever : a + b;
#endif
}

/// Saturating conversion of a 128-bit intermediate to Nanos.
inline Nanos sat_nanos(i128 v) noexcept {
    if (v > static_cast<i128>(kNever)) {
        return kNever;
    }
    if (v < 0) {
        return 0;
    }
    return static_cast<Nanos>(v);
}

/// Ceiling division of non-negative integers.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
    return a / b + (a % b != 0 ? 1 : 0);
}

} // namespace permits
