// The layout of a shared per-key table in its segment (KeyTable), which every file of the table
// reads: its head (the geometry, the keys' amounts as reconfigured), a robust lock per shard, then
// each shard's records. Internal to the engine.
#pragma once

#if defined(__linux__)

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

namespace permits::shm {

namespace table_layout {

inline constexpr Nanos kMs = 1000000;
inline constexpr Nanos kReclaimEvery = 50 * kMs;
inline constexpr std::uint64_t kTableHead = 64;
inline constexpr std::uint64_t kLockBytes = 64;
inline constexpr std::uint64_t kRecordHead = 64; // a record's bookkeeping and key; its state words follow

struct TableHead {
    std::atomic<std::int64_t> size;
    std::uint32_t shards;
    std::uint32_t slots;
    std::uint64_t record_bytes;
    // The keys' amounts as reconfigured (AmountBanks; zero in a table made by an earlier version,
    // whose generation is 0: as made): a bank for odd generations, one for even ones, the highest limit.
    std::int64_t odd[2];
    std::int64_t even[2];
    std::int64_t highest;
};
static_assert(sizeof(TableHead) <= kTableHead);
static_assert(sizeof(pthread_mutex_t) <= kLockBytes);

inline constexpr std::uint64_t kEntryBytes = 16;

inline std::uint32_t entries_of(const Params& p) {
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(p.values[0], 1, kKeyHolders));
}

inline std::uint64_t words_bytes(const Params& p) {
    switch (p.kind) {
    case Kind::SlidingWindow:
        return (static_cast<std::uint64_t>(SlidingWindowShape::slots(p.values[2])) + 1) * sizeof(AtomicPair);
    case Kind::Concurrency: return entries_of(p) * kEntryBytes;
    default: return sizeof(AtomicPair);
    }
}

inline void geometry(std::int64_t max_partitions, std::uint32_t& shards, std::uint32_t& slots) {
    shards = static_cast<std::uint32_t>(std::clamp<std::int64_t>(max_partitions / 32, 1, 64));
    // Slack, so that keys spread unevenly over the shards rarely fill one before the table is full.
    slots = static_cast<std::uint32_t>((max_partitions * 5 / 4 + shards - 1) / shards + 8);
}

inline TableHead& head_of(char* data) { // NOLINT(readability-non-const-parameter): the head is written through it
    return *reinterpret_cast<TableHead*>(data);
}

// NOLINTNEXTLINE(readability-non-const-parameter): the lock is changed through it
inline pthread_mutex_t* lock_of(char* data, std::uint32_t shard) {
    return reinterpret_cast<pthread_mutex_t*>(data + kTableHead + shard * kLockBytes);
}

inline std::uint64_t entry_tag(std::uint32_t holder, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(generation) << 32) | (holder + 1);
}

/// The rule of a rule-driven kind with the keys' parameters `v` (amounts first).
inline std::unique_ptr<Rule> rule_of(Kind kind, const std::int64_t* v) {
    switch (kind) {
    case Kind::TokenBucket: return std::make_unique<TokenBucketRule>(v[0], v[1], v[2]);
    case Kind::FixedWindow: return std::make_unique<FixedWindowRule>(v[0], v[1]);
    case Kind::SlidingWindowCounter: return std::make_unique<SlidingWindowCounterRule>(v[0], v[1]);
    default: return nullptr;
    }
}

/// The same, for any kind: std::invalid_argument unless `v` are parameters a key of `kind` could
/// have, as a limiter of the kind checks them; nullptr (checked) for the kinds no rule drives.
inline std::unique_ptr<Rule> checked_rule_of(Kind kind, const std::int64_t* v) {
    switch (kind) {
    case Kind::SlidingWindow: SlidingWindowState::check(v[0], v[1], v[2]); return nullptr;
    case Kind::Concurrency: (void)ConcurrencyRule(v[0]); return nullptr;
    case Kind::TokenBucket:
    case Kind::FixedWindow:
    case Kind::SlidingWindowCounter: return rule_of(kind, v);
    default: throw std::invalid_argument("a per-key table's keys need a limiter kind");
    }
}

/// The keys' parameters `v` (amounts first) with amounts `a` in place of those reconfigure changes.
inline void put_amounts(Kind kind, std::int64_t* v, const std::int64_t (&a)[2]) noexcept {
    const std::uint32_t changeable = amounts_of(kind);
    for (std::size_t i = 0; i < 2; ++i) {
        if (((changeable >> i) & 1U) != 0) {
            v[i] = a[i];
        }
    }
}

} // namespace table_layout

struct KeyTable::HolderEntry {
    std::atomic<std::uint64_t> tag;  // generation << 32 | holder + 1; 0: free
    std::atomic<std::int64_t> count; // permits held
};

struct KeyTable::Record {
    std::atomic<std::uint32_t> used; // 0 empty, 1 live, 2 dropped (a tombstone: probes go on past it)
    std::uint32_t key_len;
    std::uint64_t hash;
    Nanos anchor;
    std::atomic<Nanos> touched; // concurrency: when all its permits last came back
    char key[kKeyBytes];

    char* words() noexcept { return reinterpret_cast<char*>(this) + table_layout::kRecordHead; }
    AtomicPair& word() noexcept { return *reinterpret_cast<AtomicPair*>(words()); }
    HolderEntry& entry(std::size_t i) noexcept { return reinterpret_cast<HolderEntry*>(words())[i]; }
};

} // namespace permits::shm

#endif // __linux__
