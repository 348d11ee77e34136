// The per-key table's hash of a key's bytes: fast for the short keys rate limits see ("user-42",
// an IP address) and seeded per process, so that keys chosen by a client (a header, an address)
// cannot be picked to collide and slow every lookup down (hash flooding).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "permits/msvc_intrinsics.hpp"
#include "permits/time.hpp"

namespace permits {

namespace detail {

/// The process's seed, drawn once from std::random_device.
std::uint64_t key_hash_seed() noexcept;

inline std::uint64_t load64(const char* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline std::uint64_t load32(const char* p) noexcept {
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

/// The 128-bit product of a and b, folded to 64 bits: every output bit depends on every input bit.
inline std::uint64_t fold_multiply(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(PERMITS_HAS_MSVC_INTRINSICS) && defined(PERMITS_X64)
    // One mul instruction, where u128 would be the portable type's four 32-bit products.
    unsigned long long hi = 0;
    const unsigned long long lo = _umul128(a, b, &hi);
    return lo ^ hi;
#else
    const u128 p = static_cast<u128>(a) * b;
    return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
#endif
}

constexpr std::uint64_t kOdd0 = 0x9e3779b97f4a7c15ULL; // odd constants with mixed bits
constexpr std::uint64_t kOdd1 = 0xd6e8feb86659fd93ULL;

} // namespace detail

/// A 64-bit hash of `key`, the same for equal keys within a process, with its seed. Keys of up to
/// 16 bytes are read as two (overlapping) words; longer ones 16 bytes at a time. In place of
/// std::hash (libstdc++'s murmur, whose seed is a public constant, so colliding keys can be
/// computed offline), with the inline key comparison in key_table.hpp: a little faster in cache, and no
/// different at 100k-1M keys (benchmarks/bench_per_key.py).
inline std::uint64_t hash_key(std::string_view key, std::uint64_t seed) noexcept {
    using namespace detail;
    const char* p = key.data();
    const std::size_t n = key.size();
    // A secret of its own for each length: keys that read as the same words ("aaaa" and "aaaaa")
    // still differ, in a way that depends on the seed (xoring in the length would not). Each
    // multiplication takes a key word xored with the secret, never with a known constant: a word
    // equal to that constant would zero the product and make keys collide whatever the seed.
    std::uint64_t s = fold_multiply(seed ^ n ^ kOdd0, kOdd1);
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    if (n > 16) {
        for (std::size_t i = 0; n - i > 16; i += 16) {
            s = fold_multiply(load64(p + i) ^ s, load64(p + i + 8) ^ s ^ kOdd1);
        }
        a = load64(p + n - 16); // the last 16 bytes (partly read already: no shorter tail to handle)
        b = load64(p + n - 8);
    } else if (n >= 8) {
        a = load64(p);
        b = load64(p + n - 8);
    } else if (n >= 4) {
        a = load32(p);
        b = load32(p + n - 4);
    } else if (n > 0) {
        const auto byte = [&](std::size_t k) { return static_cast<std::uint64_t>(static_cast<unsigned char>(p[k])); };
        a = byte(0) << 16 | byte(n / 2) << 8 | byte(n - 1);
    }
    return fold_multiply(fold_multiply(a ^ s, b ^ s ^ kOdd1) ^ kOdd0, s ^ kOdd0);
}

inline std::uint64_t hash_key(std::string_view key) noexcept {
    static const std::uint64_t seed = detail::key_hash_seed();
    return hash_key(key, seed);
}

} // namespace permits
