// Portable 128-bit integers: two 64-bit halves, two's complement, for compilers without __int128
// (MSVC). time.hpp makes permits::i128 / u128 these types there, or everywhere with the CMake option
// PERMITS_PORTABLE_INT128 (how they are tested with GCC and Clang). Only what the engine uses:
// construction from any built-in integer (implicit, so `i128 * std::int64_t` works), explicit
// conversion to built-in integers, bool and double, + - * / %, unary - and ~, << >>, & | ^,
// comparisons, compound assignments, ++ and --. Everything is computed on std::uint64_t, so there
// is no signed overflow; like the built-in types, shifts take counts 0..127 and x / 0 is an error
// (here: a division by zero in 64 bits).
#pragma once

#include <bit>
#include <cmath>
#include <compare>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace permits {

namespace int128_detail {

struct Halves {
    std::uint64_t hi;
    std::uint64_t lo;
};

/// The high half of a built-in integer widened to 128 bits: all ones if negative.
template <std::integral T> constexpr std::uint64_t sign_fill(T v) noexcept {
    if constexpr (std::is_signed_v<T>) {
        return v < 0 ? ~std::uint64_t{0} : 0;
    } else {
        return 0;
    }
}

constexpr Halves add(Halves a, Halves b) noexcept {
    const std::uint64_t lo = a.lo + b.lo;
    return {a.hi + b.hi + (lo < a.lo ? 1U : 0U), lo};
}

constexpr Halves negate(Halves a) noexcept {
    return add({~a.hi, ~a.lo}, {0, 1});
}

constexpr Halves sub(Halves a, Halves b) noexcept {
    return {a.hi - b.hi - (a.lo < b.lo ? 1U : 0U), a.lo - b.lo};
}

/// The full 128-bit product of two 64-bit values, from four 32 x 32-bit products.
constexpr Halves mul64(std::uint64_t a, std::uint64_t b) noexcept {
    const std::uint64_t a_lo = a & 0xffffffffU;
    const std::uint64_t a_hi = a >> 32;
    const std::uint64_t b_lo = b & 0xffffffffU;
    const std::uint64_t b_hi = b >> 32;
    const std::uint64_t ll = a_lo * b_lo;
    const std::uint64_t lh = a_lo * b_hi;
    const std::uint64_t hl = a_hi * b_lo;
    const std::uint64_t mid = (ll >> 32) + (lh & 0xffffffffU) + (hl & 0xffffffffU);
    return {(a_hi * b_hi) + (lh >> 32) + (hl >> 32) + (mid >> 32), (mid << 32) | (ll & 0xffffffffU)};
}

/// The low 128 bits of a * b (the same for signed and unsigned operands in two's complement).
constexpr Halves mul(Halves a, Halves b) noexcept {
    Halves p = mul64(a.lo, b.lo);
    p.hi += (a.lo * b.hi) + (a.hi * b.lo);
    return p;
}

constexpr Halves shl(Halves a, unsigned s) noexcept {
    if (s == 0) {
        return a;
    }
    if (s >= 64) {
        return {a.lo << (s - 64), 0};
    }
    return {(a.hi << s) | (a.lo >> (64 - s)), a.lo << s};
}

/// Logical (arith false) or arithmetic (arith true: the sign bit copied in) right shift.
constexpr Halves shr(Halves a, unsigned s, bool arith) noexcept {
    const std::uint64_t fill = arith && (a.hi >> 63) != 0 ? ~std::uint64_t{0} : 0;
    if (s == 0) {
        return a;
    }
    if (s >= 64) {
        const unsigned t = s - 64;
        return {fill, t == 0 ? a.hi : (a.hi >> t) | (fill << (64 - t))};
    }
    return {(a.hi >> s) | (fill << (64 - s)), (a.lo >> s) | (a.hi << (64 - s))};
}

constexpr bool less(Halves a, Halves b) noexcept {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
}

/// Unsigned quotient and remainder: 64-bit division when both fit (the common case here), else
/// shift-subtract long division from the dividend's top bit (speed matters little off GCC/Clang).
constexpr void divmod(Halves n, Halves d, Halves& q, Halves& r) noexcept {
    if (n.hi == 0 && d.hi == 0) {
        q = {0, n.lo / d.lo};
        r = {0, n.lo % d.lo};
        return;
    }
    q = {0, 0};
    r = {0, 0};
    if (less(n, d)) {
        r = n;
        return;
    }
    const int top = n.hi != 0 ? 127 - std::countl_zero(n.hi) : 63 - std::countl_zero(n.lo);
    for (int i = top; i >= 0; --i) {
        const auto bit = static_cast<unsigned>(i);
        r = shl(r, 1);
        r.lo |= (bit >= 64 ? n.hi >> (bit - 64) : n.lo >> bit) & 1U;
        if (!less(r, d)) {
            r = sub(r, d);
            if (bit >= 64) {
                q.hi |= std::uint64_t{1} << (bit - 64);
            } else {
                q.lo |= std::uint64_t{1} << bit;
            }
        }
    }
}

/// The nearest double (ties to even, as the built-in conversion) to the unsigned value `a`.
inline double to_double(Halves a) noexcept {
    if (a.hi == 0) {
        return static_cast<double>(a.lo);
    }
    // The top 64 bits, with a sticky bit for the rest so that the one rounding is still right.
    const auto k = static_cast<unsigned>(64 - std::countl_zero(a.hi));
    const Halves top = shr(a, k, false);
    const std::uint64_t below = k == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << k) - 1;
    const bool rest = (a.lo & below) != 0;
    return std::ldexp(static_cast<double>(top.lo | (rest ? 1U : 0U)), static_cast<int>(k));
}

} // namespace int128_detail

class Int128;

/// Unsigned 128-bit integer, arithmetic modulo 2**128.
class UInt128 {
public:
    constexpr UInt128() noexcept = default;
    template <std::integral T>
    constexpr UInt128(T v) noexcept // implicit, as a built-in integer converts
        : hi_(int128_detail::sign_fill(v)), lo_(static_cast<std::uint64_t>(v)) {}
    constexpr explicit UInt128(const Int128& v) noexcept;
    static constexpr UInt128 from_halves(std::uint64_t hi, std::uint64_t lo) noexcept {
        UInt128 r;
        r.hi_ = hi;
        r.lo_ = lo;
        return r;
    }

    constexpr std::uint64_t high() const noexcept { return hi_; }
    constexpr std::uint64_t low() const noexcept { return lo_; }

    template <std::integral T> constexpr explicit operator T() const noexcept {
        if constexpr (std::same_as<T, bool>) {
            return (hi_ | lo_) != 0;
        } else {
            return static_cast<T>(lo_); // modulo 2**N, as the built-in narrowing
        }
    }
    explicit operator double() const noexcept { return int128_detail::to_double(h()); }

    friend constexpr UInt128 operator+(UInt128 a, UInt128 b) noexcept { return of(add(a.h(), b.h())); }
    friend constexpr UInt128 operator-(UInt128 a, UInt128 b) noexcept { return of(sub(a.h(), b.h())); }
    friend constexpr UInt128 operator*(UInt128 a, UInt128 b) noexcept { return of(mul(a.h(), b.h())); }
    friend constexpr UInt128 operator/(UInt128 a, UInt128 b) noexcept {
        int128_detail::Halves q{};
        int128_detail::Halves r{};
        divmod(a.h(), b.h(), q, r);
        return of(q);
    }
    friend constexpr UInt128 operator%(UInt128 a, UInt128 b) noexcept {
        int128_detail::Halves q{};
        int128_detail::Halves r{};
        divmod(a.h(), b.h(), q, r);
        return of(r);
    }
    friend constexpr UInt128 operator&(UInt128 a, UInt128 b) noexcept {
        return from_halves(a.hi_ & b.hi_, a.lo_ & b.lo_);
    }
    friend constexpr UInt128 operator|(UInt128 a, UInt128 b) noexcept {
        return from_halves(a.hi_ | b.hi_, a.lo_ | b.lo_);
    }
    friend constexpr UInt128 operator^(UInt128 a, UInt128 b) noexcept {
        return from_halves(a.hi_ ^ b.hi_, a.lo_ ^ b.lo_);
    }
    friend constexpr UInt128 operator<<(UInt128 a, unsigned s) noexcept { return of(shl(a.h(), s)); }
    friend constexpr UInt128 operator>>(UInt128 a, unsigned s) noexcept { return of(shr(a.h(), s, false)); }
    constexpr UInt128 operator-() const noexcept { return of(negate(h())); }
    constexpr UInt128 operator~() const noexcept { return from_halves(~hi_, ~lo_); }
    constexpr UInt128 operator+() const noexcept { return *this; }

    friend constexpr bool operator==(UInt128 a, UInt128 b) noexcept { return a.hi_ == b.hi_ && a.lo_ == b.lo_; }
    friend constexpr std::strong_ordering operator<=>(UInt128 a, UInt128 b) noexcept {
        return a.hi_ != b.hi_ ? a.hi_ <=> b.hi_ : a.lo_ <=> b.lo_;
    }

    constexpr UInt128& operator+=(UInt128 b) noexcept { return *this = *this + b; }
    constexpr UInt128& operator-=(UInt128 b) noexcept { return *this = *this - b; }
    constexpr UInt128& operator*=(UInt128 b) noexcept { return *this = *this * b; }
    constexpr UInt128& operator/=(UInt128 b) noexcept { return *this = *this / b; }
    constexpr UInt128& operator%=(UInt128 b) noexcept { return *this = *this % b; }
    constexpr UInt128& operator&=(UInt128 b) noexcept { return *this = *this & b; }
    constexpr UInt128& operator|=(UInt128 b) noexcept { return *this = *this | b; }
    constexpr UInt128& operator^=(UInt128 b) noexcept { return *this = *this ^ b; }
    constexpr UInt128& operator<<=(unsigned s) noexcept { return *this = *this << s; }
    constexpr UInt128& operator>>=(unsigned s) noexcept { return *this = *this >> s; }
    constexpr UInt128& operator++() noexcept { return *this += 1; }
    constexpr UInt128& operator--() noexcept { return *this -= 1; }
    constexpr UInt128 operator++(int) noexcept {
        const UInt128 old = *this;
        ++*this;
        return old;
    }
    constexpr UInt128 operator--(int) noexcept {
        const UInt128 old = *this;
        --*this;
        return old;
    }

private:
    constexpr int128_detail::Halves h() const noexcept { return {hi_, lo_}; }
    static constexpr UInt128 of(int128_detail::Halves v) noexcept { return from_halves(v.hi, v.lo); }

    std::uint64_t hi_ = 0;
    std::uint64_t lo_ = 0;
};

/// Signed 128-bit integer, two's complement. Overflow wraps (the built-in type's is undefined).
class Int128 {
public:
    constexpr Int128() noexcept = default;
    template <std::integral T>
    constexpr Int128(T v) noexcept // implicit, as a built-in integer converts
        : hi_(int128_detail::sign_fill(v)), lo_(static_cast<std::uint64_t>(v)) {}
    constexpr explicit Int128(UInt128 v) noexcept : hi_(v.high()), lo_(v.low()) {}
    static constexpr Int128 from_halves(std::uint64_t hi, std::uint64_t lo) noexcept {
        Int128 r;
        r.hi_ = hi;
        r.lo_ = lo;
        return r;
    }

    constexpr std::uint64_t high() const noexcept { return hi_; }
    constexpr std::uint64_t low() const noexcept { return lo_; }

    template <std::integral T> constexpr explicit operator T() const noexcept {
        if constexpr (std::same_as<T, bool>) {
            return (hi_ | lo_) != 0;
        } else {
            return static_cast<T>(lo_); // modulo 2**N, as the built-in narrowing
        }
    }
    explicit operator double() const noexcept {
        return negative() ? -int128_detail::to_double(negate(h())) : int128_detail::to_double(h());
    }

    friend constexpr Int128 operator+(Int128 a, Int128 b) noexcept { return of(add(a.h(), b.h())); }
    friend constexpr Int128 operator-(Int128 a, Int128 b) noexcept { return of(sub(a.h(), b.h())); }
    friend constexpr Int128 operator*(Int128 a, Int128 b) noexcept { return of(mul(a.h(), b.h())); }
    /// Truncating towards zero, the remainder with the dividend's sign, as the built-in types.
    friend constexpr Int128 operator/(Int128 a, Int128 b) noexcept {
        int128_detail::Halves q{};
        int128_detail::Halves r{};
        divmod(a.magnitude(), b.magnitude(), q, r);
        return of(a.negative() != b.negative() ? negate(q) : q);
    }
    friend constexpr Int128 operator%(Int128 a, Int128 b) noexcept {
        int128_detail::Halves q{};
        int128_detail::Halves r{};
        divmod(a.magnitude(), b.magnitude(), q, r);
        return of(a.negative() ? negate(r) : r);
    }
    friend constexpr Int128 operator&(Int128 a, Int128 b) noexcept { return from_halves(a.hi_ & b.hi_, a.lo_ & b.lo_); }
    friend constexpr Int128 operator|(Int128 a, Int128 b) noexcept { return from_halves(a.hi_ | b.hi_, a.lo_ | b.lo_); }
    friend constexpr Int128 operator^(Int128 a, Int128 b) noexcept { return from_halves(a.hi_ ^ b.hi_, a.lo_ ^ b.lo_); }
    friend constexpr Int128 operator<<(Int128 a, unsigned s) noexcept { return of(shl(a.h(), s)); }
    friend constexpr Int128 operator>>(Int128 a, unsigned s) noexcept { return of(shr(a.h(), s, true)); }
    constexpr Int128 operator-() const noexcept { return of(negate(h())); }
    constexpr Int128 operator~() const noexcept { return from_halves(~hi_, ~lo_); }
    constexpr Int128 operator+() const noexcept { return *this; }

    friend constexpr bool operator==(Int128 a, Int128 b) noexcept { return a.hi_ == b.hi_ && a.lo_ == b.lo_; }
    friend constexpr std::strong_ordering operator<=>(Int128 a, Int128 b) noexcept {
        // The high halves compared as signed (flipping the sign bit orders them as unsigned).
        const std::uint64_t sign = std::uint64_t{1} << 63;
        return a.hi_ != b.hi_ ? (a.hi_ ^ sign) <=> (b.hi_ ^ sign) : a.lo_ <=> b.lo_;
    }

    constexpr Int128& operator+=(Int128 b) noexcept { return *this = *this + b; }
    constexpr Int128& operator-=(Int128 b) noexcept { return *this = *this - b; }
    constexpr Int128& operator*=(Int128 b) noexcept { return *this = *this * b; }
    constexpr Int128& operator/=(Int128 b) noexcept { return *this = *this / b; }
    constexpr Int128& operator%=(Int128 b) noexcept { return *this = *this % b; }
    constexpr Int128& operator&=(Int128 b) noexcept { return *this = *this & b; }
    constexpr Int128& operator|=(Int128 b) noexcept { return *this = *this | b; }
    constexpr Int128& operator^=(Int128 b) noexcept { return *this = *this ^ b; }
    constexpr Int128& operator<<=(unsigned s) noexcept { return *this = *this << s; }
    constexpr Int128& operator>>=(unsigned s) noexcept { return *this = *this >> s; }
    constexpr Int128& operator++() noexcept { return *this += 1; }
    constexpr Int128& operator--() noexcept { return *this -= 1; }
    constexpr Int128 operator++(int) noexcept {
        const Int128 old = *this;
        ++*this;
        return old;
    }
    constexpr Int128 operator--(int) noexcept {
        const Int128 old = *this;
        --*this;
        return old;
    }

private:
    constexpr int128_detail::Halves h() const noexcept { return {hi_, lo_}; }
    constexpr bool negative() const noexcept { return (hi_ >> 63) != 0; }
    /// |*this| as an unsigned value (2**127 for the most negative one).
    constexpr int128_detail::Halves magnitude() const noexcept { return negative() ? negate(h()) : h(); }
    static constexpr Int128 of(int128_detail::Halves v) noexcept { return from_halves(v.hi, v.lo); }

    std::uint64_t hi_ = 0;
    std::uint64_t lo_ = 0;
};

constexpr UInt128::UInt128(const Int128& v) noexcept : hi_(v.high()), lo_(v.low()) {}

} // namespace permits
