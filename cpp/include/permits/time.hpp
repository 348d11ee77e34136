// Integer nanoseconds: the only unit of time inside the engine.
#pragma once

#include <cstdint>
#include <limits>

namespace permits {

using Nanos = std::int64_t;

// 128-bit intermediates keep products like periods * tokens exact (GCC/Clang extension).
__extension__ using i128 = __int128;
__extension__ using u128 = unsigned __int128;

/// "Never": a deadline or wait time that no clock reaches.
inline constexpr Nanos kNever = std::numeric_limits<Nanos>::max();

/// The latest time a ManualClock may reach (2**63 - 2**60 ns, about 255 years), well short of
/// kNever, so that a time is never mistaken for "never"; every sum of a time and a duration in the
/// engine saturates or is computed in 128 bits.
inline constexpr Nanos kMaxTime = (Nanos{1} << 62) + (Nanos{1} << 61) + (Nanos{1} << 60);

/// The largest permit count, limit or queue limit (as .NET's int permit counts).
inline constexpr std::int64_t kMaxPermits = 2147483647;

/// a + b, saturating at kNever (times here are never negative).
inline Nanos sat_add(Nanos a, Nanos b) noexcept {
    Nanos r = 0;
    if (__builtin_add_overflow(a, b, &r)) {
        return kNever;
    }
    return r;
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
