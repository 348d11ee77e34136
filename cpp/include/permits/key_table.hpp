// The per-key limiter's table, one per shard: each key's 60-byte record, allocated in chunks that
// never move; an open-addressing index from key bytes to record (4 bytes a slot); and a min-heap of
// the records' pending eviction checks (4 bytes an entry), so that eviction costs O(evicted), no scan;
// a kind whose state is more than a word keeps it in a block of its own per record (attach_block).
// A data structure only: what a record's state means, when a key is checked and whether it is
// dropped are the per-key limiter's (per_key.hpp). Not thread-safe: the limiter holds the shard's lock.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "permits/atomic_pair.hpp"
#include "permits/key_hash.hpp"
#include "permits/limiter.hpp"
#include "permits/time.hpp"

namespace permits::detail {

// A key's bytes in 16 bytes: up to 14 inline (most keys: "user-42" is 8 bytes encoded), longer
// ones on the heap. Byte 14 is the inline length (0xff: on the heap), byte 15 the record's flags.
// Owns no memory on its own: release() frees a long key's bytes (the table calls it).
class KeyBytes {
public:
    void assign(std::string_view key);
    void release() noexcept;
    std::string_view view() const noexcept {
        if (b_[14] != 0xff) {
            return {reinterpret_cast<const char*>(b_), b_[14]};
        }
        const char* heap = nullptr;
        std::uint32_t len = 0;
        std::memcpy(&heap, b_, sizeof heap);
        std::memcpy(&len, b_ + 8, sizeof len);
        return {heap, len};
    }
    /// Equal to `key`; an inline key is compared a few words at a time (no memcmp call).
    bool equals(std::string_view key) const noexcept {
        if (b_[14] == 0xff) {
            return view() == key;
        }
        const std::size_t n = key.size();
        if (n != b_[14]) {
            return false;
        }
        const char* a = reinterpret_cast<const char*>(b_);
        const char* b = key.data();
        if (n >= 8) { // two overlapping words cover 8..14 bytes
            return ((load64(a) ^ load64(b)) | (load64(a + n - 8) ^ load64(b + n - 8))) == 0;
        }
        if (n >= 4) {
            return ((load32(a) ^ load32(b)) | (load32(a + n - 4) ^ load32(b + n - 4))) == 0;
        }
        return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]); // all of 1..3 bytes
    }
    /// Bytes kept on the heap for a key too long to sit inline.
    std::size_t heap_bytes() const noexcept { return b_[14] == 0xff ? view().size() : 0; }
    std::uint8_t flags() const noexcept { return b_[15]; }
    void set_flags(std::uint8_t f) noexcept { b_[15] = f; }

private:
    static constexpr std::size_t kInline = 14;
    unsigned char b_[16] = {};
};

/// A T kept at 4-byte alignment, read and written whole (a plain unaligned load or store): lets a
/// record be 60 bytes instead of padding to 64.
template <class T> class Loose {
    static_assert(sizeof(T) % 4 == 0 && std::is_trivially_copyable_v<T>);

public:
    Loose() = default;
    Loose(T v) noexcept { *this = v; } // NOLINT(google-explicit-constructor): stands for a T
    operator T() const noexcept {      // NOLINT(google-explicit-constructor)
        T v;
        std::memcpy(&v, w_, sizeof v);
        return v;
    }
    Loose& operator=(T v) noexcept {
        std::memcpy(w_, &v, sizeof v);
        return *this;
    }

private:
    std::uint32_t w_[sizeof(T) / 4] = {};
};

/// No record index (a lookup that found none, an empty free list) and no place in the check heap.
/// Lookups return an index or this rather than a std::optional: an optional's flag byte, stored and
/// then read back with its 4-byte value in one 8-byte load, cannot be store-forwarded
/// (benchmarks/bench_per_key.py).
inline constexpr std::uint32_t kNoRecord = 0xffffffffU;

inline constexpr std::uint8_t kLive = 1;
inline constexpr std::uint8_t kPromoted = 2;
/// The record's state is out of line (KeyTable::attach_block): state.a points to it.
inline constexpr std::uint8_t kBlock = 4;

// 60 bytes at 4-byte alignment: no stored hash (the index computes a key's again when it moves
// it) and no padding to a cache line took engine state per key at 100k keys from 65.0 to 59.9 bytes
// (measured). A promoted record's state holds the pointer to its full limiter instead.
struct KeyRecord {
    Loose<Pair> state;             // the rule's state word
    Loose<Nanos> anchor;           // when the state's timeline starts
    Loose<Nanos> check_at{kNever}; // when eviction checks it next (kNever: no check pending)
    std::uint32_t successful = 0;
    std::uint32_t failed = 0;
    std::uint32_t heap_pos = kNoRecord; // its place in the table's check heap (kNoRecord: not there)
    KeyBytes key;

    bool live() const noexcept { return (key.flags() & kLive) != 0; }
    bool promoted() const noexcept { return (key.flags() & kPromoted) != 0; }
    bool has_block() const noexcept { return (key.flags() & kBlock) != 0; }
    /// The record's out-of-line state (has_block()).
    std::uint32_t* block() const noexcept { return std::bit_cast<std::uint32_t*>(Pair(state).a); }
    std::shared_ptr<Limiter>* full() const noexcept { return std::bit_cast<std::shared_ptr<Limiter>*>(Pair(state).a); }
    void set_full(std::shared_ptr<Limiter>* f) noexcept { state = Pair{std::bit_cast<std::int64_t>(f), 0}; }
    /// A promoted record's full limiter.
    const std::shared_ptr<Limiter>& limiter() const noexcept { return *full(); }
};
static_assert(sizeof(KeyRecord) == 60 && alignof(KeyRecord) == 4, "a record is 60 bytes");

class KeyTable {
public:
    // Records never move: they are allocated 64 at a time (3.75 KiB), so a table wastes at most 63
    // unused records, where doubling chunks wasted up to half (10k keys: 162 -> 122 bytes a key, measured).
    static constexpr std::uint32_t kChunkBits = 6;
    static constexpr std::uint32_t kChunk = 1U << kChunkBits;
    static constexpr std::uint32_t kMaxRecords = (1U << 24) - 2; // an index + 1 fits in 24 bits

    KeyTable() = default;
    ~KeyTable() { clear(); }
    KeyTable(const KeyTable&) = delete;
    KeyTable& operator=(const KeyTable&) = delete;

    KeyRecord& at(std::uint32_t i) { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
    const KeyRecord& at(std::uint32_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
    /// Records handed out so far, live or free: indexes below it can be read.
    std::uint32_t used() const noexcept { return used_; }
    std::uint32_t live_count() const noexcept { return live_; }
    /// Record i is one of the table's keys (i may be past used()).
    bool live(std::uint32_t i) const noexcept { return i < used_ && at(i).live(); }
    /// No record can be added: every index is taken.
    bool full() const noexcept { return free_head_ == kNoRecord && used_ >= kMaxRecords; }

    /// The record of `key`, whose hash is `hash` (hash_key(key)); kNoRecord when absent.
    std::uint32_t find(std::string_view key, std::uint64_t hash) const {
        if (slots_.empty()) {
            return kNoRecord;
        }
        const std::uint32_t tag = tag_of(hash);
        for (std::size_t p = scale(high_of(hash), slots_.size());; p = next(p)) {
            const std::uint32_t v = slots_[p];
            if (v == 0) {
                return kNoRecord;
            }
            if (v >> 24 == tag && at(index_of(v)).key.equals(key)) {
                return index_of(v);
            }
        }
    }
    /// A new live record for `key` (absent; `hash` is hash_key(key)), indexed, with a place kept
    /// for its check; its state and counts zero. Not when full().
    std::uint32_t add(std::string_view key, std::uint64_t hash);
    /// Takes record i out: its check, its index slot, its key and (promoted) its full limiter. The
    /// last one out lets the table's memory go.
    void remove(std::uint32_t i);
    /// Every record freed and the memory let go.
    void clear() noexcept;
    /// The length in 32-bit words of each record's out-of-line state (attach_block): for a kind
    /// whose state is more than a word (the sliding window's counts). Set before the first add().
    void set_block_words(std::size_t words) noexcept { block_words_ = words; }
    /// Record i's state out of line: the table's block words, uninitialized, owned by the record
    /// (kBlock) until it is removed or its owner frees it (a promotion: release_block()).
    std::uint32_t* attach_block(std::uint32_t i);
    /// Frees the record's out-of-line state (its state word is the caller's again).
    static void release_block(KeyRecord& r) noexcept;

    /// Record i is to be checked at `when`: true if that is sooner than its pending check (or it had
    /// none), false if an earlier check is already pending (which will see it and set the next).
    bool schedule_check(std::uint32_t i, Nanos when) {
        KeyRecord& r = at(i);
        if (when >= r.check_at) {
            return false;
        }
        r.check_at = when;
        check_sooner(i);
        return true;
    }
    /// Takes record i's pending check out of the heap; its check_at becomes kNever.
    void cancel_check(std::uint32_t i);
    /// When the earliest pending check is due; kNever: none.
    Nanos next_check() const { return checks_.empty() ? kNever : Nanos(at(checks_.front()).check_at); }
    /// The record whose check is earliest, if due at `now`, its check taken out; else kNoRecord.
    std::uint32_t pop_due_check(Nanos now);

    struct Memory {
        std::size_t bytes = 0;     ///< all of it
        std::size_t key_bytes = 0; ///< of which the keys' bytes (inline or on the heap)
    };
    /// What the table has allocated (records, index slots, check heap, out-of-line states, long keys' bytes).
    Memory memory() const;
    /// Throws std::logic_error naming what is inconsistent (index, records, check heap). O(keys).
    void check_invariants() const;

private:
    std::uint32_t allocate();
    /// Back on the free list (linked through state.a).
    void free(std::uint32_t i) noexcept;
    /// Back to nothing allocated: the memory of a burst of keys goes back once they are gone.
    void reset() noexcept;

    // The index.
    static std::uint32_t tag_of(std::uint64_t hash) { return static_cast<std::uint32_t>(hash >> 8) & 0xffU; }
    static std::uint32_t slot_value(std::uint64_t hash, std::uint32_t i) { return tag_of(hash) << 24 | (i + 1); }
    static std::uint32_t index_of(std::uint32_t v) { return (v & 0xffffffU) - 1; }
    // Any capacity (not only powers of two): the index grows by half when 85% full, so it runs
    // 57-85% full where doubling at 80% ran 40-80% (1M keys: 8.4 -> 6.0 bytes a key).
    static std::size_t scale(std::uint32_t high, std::size_t capacity) {
        return static_cast<std::size_t>((static_cast<std::uint64_t>(high) * capacity) >> 32);
    }
    std::size_t next(std::size_t p) const { return p + 1 == slots_.size() ? 0 : p + 1; }
    static std::uint32_t high_of(std::uint64_t hash) { return static_cast<std::uint32_t>(hash >> 32); }
    /// Where record i's key probes from (its hash is not stored: 4 bytes a key).
    std::size_t home_of(std::uint32_t i) const { return scale(high_of(hash_key(at(i).key.view())), slots_.size()); }
    std::size_t home(std::uint32_t v) const { return home_of(index_of(v)); }
    void place(std::uint32_t v, std::size_t p);
    void erase(std::uint32_t i);
    void rehash(std::size_t capacity);

    // The check heap, ordered by the records' check_at.
    bool earlier(std::uint32_t a, std::uint32_t b) const { return at(a).check_at < at(b).check_at; }
    void put(std::size_t pos, std::uint32_t i) {
        checks_[pos] = i;
        at(i).heap_pos = static_cast<std::uint32_t>(pos);
    }
    void sift_up(std::size_t pos);
    void sift_down(std::size_t pos);
    /// The record's check_at has just become earlier (or it had none).
    void check_sooner(std::uint32_t i);

    std::vector<std::unique_ptr<KeyRecord[]>> chunks_;
    std::uint32_t used_ = 0;              // records handed out so far (live or free)
    std::uint32_t free_head_ = kNoRecord; // free records, linked through state.a
    std::uint32_t live_ = 0;
    // Open addressing, linear probing, 4 bytes a slot: 8 bits of the hash (a tag that rules out
    // most other keys without reading their record) and the record's index + 1; 0 is empty.
    std::vector<std::uint32_t> slots_;
    // Records with a pending check, a min-heap on their check_at: O(evicted) eviction, no scan of
    // all keys; 4 bytes a key instead of a {when, index} entry per check (16 bytes, and more for
    // checks superseded by earlier ones).
    std::vector<std::uint32_t> checks_;
    std::size_t block_words_ = 0;
};

} // namespace permits::detail
