#include "permits/keyed.hpp"

#include "permits/key_hash.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace permits {

namespace {
// Records never move: they are allocated 64 at a time (3.75 KiB), so a shard wastes at most 63 unused
// records, where doubling chunks wasted up to half (10k keys: 162 -> 122 bytes a key, measured).
constexpr std::uint32_t kChunkBits = 6;
constexpr std::uint32_t kChunk = 1U << kChunkBits;

/// The chunk holding record i, and where in it.
inline std::pair<std::uint32_t, std::uint32_t> chunk_of(std::uint32_t i) {
    return {i >> kChunkBits, i & (kChunk - 1)};
}
constexpr std::uint8_t kLive = 1;
constexpr std::uint8_t kPromoted = 2;

/// `p` read as two 8-byte loads. A rule writes its out-parameter (take's and give_back's next
/// state) with two 8-byte stores; copied whole, the compiler loads it with one 16-byte load,
/// which cannot be forwarded from those stores and waits for them to reach the cache
/// (benchmarks/bench_per_key.py; the figures: benchmarks/RESULTS.md).
inline Pair gpr_pair(const Pair& p) noexcept {
    std::int64_t a = p.a;
    std::int64_t b = p.b;
    asm("" : "+r"(a), "+r"(b)); // keeps them in general registers: no 16-byte load
    return {a, b};
}
} // namespace

// A key's bytes in 16 bytes: up to 14 inline (most keys: "user-42" is 8 bytes encoded), longer
// ones on the heap. Byte 14 is the inline length (0xff: on the heap), byte 15 the record's flags.
class KeyedLimiter::KeyBytes {
public:
    void assign(std::string_view key) {
        release();
        if (key.size() <= kInline) {
            std::memcpy(b_, key.data(), key.size());
            b_[14] = static_cast<unsigned char>(key.size());
            return;
        }
        char* heap = new char[key.size()];
        std::memcpy(heap, key.data(), key.size());
        const auto len = static_cast<std::uint32_t>(key.size());
        std::memcpy(b_, &heap, sizeof heap);
        std::memcpy(b_ + 8, &len, sizeof len);
        b_[14] = 0xff;
    }
    void release() noexcept {
        if (b_[14] == 0xff) {
            char* heap = nullptr;
            std::memcpy(&heap, b_, sizeof heap);
            delete[] heap;
        }
        b_[14] = 0;
    }
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
        using detail::load32;
        using detail::load64;
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

namespace {
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
} // namespace

// 60 bytes at 4-byte alignment: no stored hash (the index computes a key's again when it moves
// it) and no padding to a cache line took engine state per key at 100k keys from 65.0 to 59.9 bytes
// (measured). A promoted record's state holds the pointer to its full limiter instead.
struct KeyedLimiter::Record {
    Loose<Pair> state;            // the rule's state word
    Loose<Nanos> anchor;          // when the state's timeline starts
    Loose<Nanos> look_at{kNever}; // when eviction looks at it next (kNever: no look pending)
    std::uint32_t successful = 0;
    std::uint32_t failed = 0;
    std::uint32_t heap_pos = kNone; // its place in the shard's look heap (kNone: not there)
    KeyBytes key;

    bool live() const noexcept { return (key.flags() & kLive) != 0; }
    bool promoted() const noexcept { return (key.flags() & kPromoted) != 0; }
    std::shared_ptr<Limiter>* full() const noexcept { return std::bit_cast<std::shared_ptr<Limiter>*>(Pair(state).a); }
    void set_full(std::shared_ptr<Limiter>* f) noexcept { state = Pair{std::bit_cast<std::int64_t>(f), 0}; }
    /// A promoted record's full limiter.
    const std::shared_ptr<Limiter>& limiter() const noexcept { return *full(); }
};

struct KeyedLimiter::Shard {
    std::mutex mu; // guards everything below; held for a lookup and one non-blocking decision
    std::vector<std::unique_ptr<Record[]>> chunks;
    std::uint32_t used = 0;          // records handed out so far (live or free)
    std::uint32_t free_head = kNone; // free records, linked through state.a
    std::uint32_t live = 0;
    // Open addressing, linear probing, 4 bytes a slot: 8 bits of the hash (a tag that rules out
    // most other keys without reading their record) and the record's index + 1; 0 is empty.
    std::vector<std::uint32_t> slots;
    // Records with a pending look, a min-heap on their look_at: O(evicted) eviction, no scan of
    // all keys; 4 bytes a key instead of a {when, index} entry per look (16 bytes, and more for
    // looks superseded by earlier ones).
    std::vector<std::uint32_t> looks;

    static constexpr std::uint32_t kMaxRecords = (1U << 24) - 2; // an index + 1 fits in 24 bits

    Record& at(std::uint32_t i) {
        const auto [c, k] = chunk_of(i);
        return chunks[c][k];
    }
    const Record& at(std::uint32_t i) const {
        const auto [c, k] = chunk_of(i);
        return chunks[c][k];
    }

    bool full() const noexcept { return free_head == kNone && used >= kMaxRecords; }
    std::uint32_t allocate() {
        if (free_head != kNone) {
            const std::uint32_t i = free_head;
            free_head = static_cast<std::uint32_t>(Pair(at(i).state).a);
            return i;
        }
        if (chunk_of(used).second == 0) { // the first record of a chunk not allocated yet
            chunks.push_back(std::make_unique<Record[]>(kChunk));
        }
        return used++;
    }
    void free(std::uint32_t i) noexcept {
        Record& r = at(i);
        if (r.promoted()) {
            delete r.full();
        }
        r.key.release();
        r.key.set_flags(0);
        r.look_at = kNever;
        r.heap_pos = kNone;
        r.state = {static_cast<std::int64_t>(free_head), 0};
        free_head = i;
    }
    /// Back to nothing allocated: the memory of a burst of keys goes back once they are gone.
    void reset() noexcept {
        std::vector<std::unique_ptr<Record[]>>().swap(chunks);
        std::vector<std::uint32_t>().swap(slots);
        std::vector<std::uint32_t>().swap(looks);
        used = 0;
        free_head = kNone;
    }

    // The index.
    static std::uint32_t tag_of(std::uint64_t hash) { return static_cast<std::uint32_t>(hash >> 8) & 0xffU; }
    static std::uint32_t slot_value(std::uint64_t hash, std::uint32_t i) { return tag_of(hash) << 24 | (i + 1); }
    static std::uint32_t index_of(std::uint32_t v) { return (v & 0xffffffU) - 1; }
    // Any capacity (not only powers of two): the index grows by half when 85% full, so it runs
    // 57-85% full where doubling at 80% ran 40-80% (1M keys: 8.4 -> 6.0 bytes a key).
    static std::size_t scale(std::uint32_t high, std::size_t capacity) {
        return static_cast<std::size_t>((static_cast<std::uint64_t>(high) * capacity) >> 32);
    }
    std::size_t next(std::size_t p) const { return p + 1 == slots.size() ? 0 : p + 1; }
    static std::uint32_t high_of(std::uint64_t hash) { return static_cast<std::uint32_t>(hash >> 32); }
    /// Where record i's key probes from (its hash is not stored: 4 bytes a key).
    std::size_t home_of(std::uint32_t i) const { return scale(high_of(hash_key(at(i).key.view())), slots.size()); }
    std::size_t home(std::uint32_t v) const { return home_of(index_of(v)); }
    /// Indexes record i, whose key has this hash.
    void insert(std::uint32_t i, std::uint64_t hash) {
        if ((static_cast<std::size_t>(live) + 1) * 20 > slots.size() * 17) {
            rehash(std::max<std::size_t>(16, slots.size() + slots.size() / 2));
        }
        place(slot_value(hash, i), scale(high_of(hash), slots.size()));
    }
    void place(std::uint32_t v, std::size_t p) {
        while (slots[p] != 0) {
            p = next(p);
        }
        slots[p] = v;
    }
    /// Takes record `index` out of the index (its hash still set).
    void erase(std::uint32_t index) {
        std::size_t i = home_of(index);
        while (index_of(slots[i]) != index) {
            i = next(i);
        }
        // Backward shift: later entries of the probe run move up, so no tombstones are needed.
        for (std::size_t j = next(i); slots[j] != 0; j = next(j)) {
            const std::size_t k = home(slots[j]);
            const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                slots[i] = slots[j];
                i = j;
            }
        }
        slots[i] = 0;
    }
    void rehash(std::size_t capacity) {
        std::vector<std::uint32_t> old;
        old.swap(slots);
        slots.assign(capacity, 0);
        for (const std::uint32_t v : old) {
            if (v != 0) {
                place(v, home(v));
            }
        }
    }

    // The look heap, ordered by the records' look_at.
    bool earlier(std::uint32_t a, std::uint32_t b) const { return at(a).look_at < at(b).look_at; }
    void put(std::size_t pos, std::uint32_t i) {
        looks[pos] = i;
        at(i).heap_pos = static_cast<std::uint32_t>(pos);
    }
    void sift_up(std::size_t pos) {
        const std::uint32_t i = looks[pos];
        while (pos > 0 && earlier(i, looks[(pos - 1) / 2])) {
            put(pos, looks[(pos - 1) / 2]);
            pos = (pos - 1) / 2;
        }
        put(pos, i);
    }
    void sift_down(std::size_t pos) {
        const std::uint32_t i = looks[pos];
        const std::size_t n = looks.size();
        for (std::size_t child = 2 * pos + 1; child < n; child = 2 * pos + 1) {
            if (child + 1 < n && earlier(looks[child + 1], looks[child])) {
                ++child;
            }
            if (!earlier(looks[child], i)) {
                break;
            }
            put(pos, looks[child]);
            pos = child;
        }
        put(pos, i);
    }
    /// The record's look_at has just become earlier (or it had none).
    void look_sooner(std::uint32_t i) {
        if (at(i).heap_pos == kNone) {
            looks.push_back(i);
            at(i).heap_pos = static_cast<std::uint32_t>(looks.size() - 1);
        }
        sift_up(at(i).heap_pos);
    }
    /// Takes the record out of the heap; its look_at becomes kNever.
    void unlook(std::uint32_t i) {
        Record& r = at(i);
        const std::size_t pos = r.heap_pos;
        r.heap_pos = kNone;
        r.look_at = kNever;
        const std::uint32_t last = looks.back();
        looks.pop_back();
        if (pos < looks.size()) {
            put(pos, last);
            sift_down(pos);
            sift_up(at(last).heap_pos);
        }
    }
    Nanos next_look() const { return looks.empty() ? kNever : Nanos(at(looks.front()).look_at); }
};

struct KeyedLimiter::Located {
    Shard& shard;
    std::unique_lock<std::mutex> lock;
    std::uint32_t index = kNone;
    bool found() const noexcept { return index != kNone; }
};

KeyedLimiter::KeyedLimiter(std::shared_ptr<Clock> clock, KeyedTemplate tmpl, Nanos idle_timeout,
                           std::int64_t max_partitions)
    : clock_(std::move(clock)), tmpl_(std::move(tmpl)), releases_(tmpl_.rule && tmpl_.rule->releases_permits()),
      idle_timeout_(idle_timeout), max_partitions_(max_partitions),
      shards_(std::make_unique<std::array<Shard, kShards>>()) {
    static_assert(sizeof(Record) == 60 && alignof(Record) == 4, "a record is 60 bytes");
    if (idle_timeout < 0) {
        throw std::invalid_argument("idle_timeout must not be negative");
    }
    if (max_partitions < 0) {
        throw std::invalid_argument("max_partitions must be >= 1");
    }
    if (!tmpl_.promote) {
        throw std::invalid_argument("a keyed limiter needs a way to build a key's limiter");
    }
    detail::ForkRegistry::add(this);
}

KeyedLimiter::~KeyedLimiter() {
    detail::ForkRegistry::remove(this);
    clock_->scheduler().cancel(this);
    for (auto& shard : *shards_) {
        for (std::uint32_t i = 0; i < shard.used; ++i) {
            if (shard.at(i).live()) {
                shard.free(i);
            }
        }
    }
}

std::uint32_t KeyedLimiter::find_locked(const Shard& shard, std::string_view key, std::uint64_t hash) {
    if (shard.slots.empty()) {
        return kNone;
    }
    const std::uint32_t tag = Shard::tag_of(hash);
    for (std::size_t p = Shard::scale(Shard::high_of(hash), shard.slots.size());; p = shard.next(p)) {
        const std::uint32_t v = shard.slots[p];
        if (v == 0) {
            return kNone;
        }
        if (v >> 24 == tag) {
            const std::uint32_t i = Shard::index_of(v);
            const Record& r = shard.at(i);
            if (r.key.equals(key)) {
                return i;
            }
        }
    }
}

std::uint32_t KeyedLimiter::find_or_create_locked(Shard& shard, std::string_view key, std::uint64_t hash) {
    if (const std::uint32_t found = find_locked(shard, key, hash); found != kNone) {
        return found;
    }
    if (closed_.load()) {
        throw ClosedError(); // close() may have emptied this shard since the caller looked
    }
    const Nanos now = clock_->now();
    // Reserve the new partition's place first: shards insert concurrently, the bound is global.
    if (!reserve_place() && !(free_a_place_locked(shard, now) && reserve_place())) {
        return kNone;
    }
    if (shard.full() && !free_a_place_locked(shard, now)) {
        size_.fetch_sub(1); // 16.7 million keys in one shard (a billion in all): treated as the bound
        return kNone;
    }
    const std::uint32_t i = shard.allocate();
    Record& r = shard.at(i);
    try {
        r.key.assign(key);
        if (tmpl_.rule) {
            r.state = tmpl_.rule->initial(now);
            r.key.set_flags(kLive);
        } else {
            r.set_full(new std::shared_ptr<Limiter>(tmpl_.promote(now, Pair{})));
            r.key.set_flags(kLive | kPromoted);
        }
        r.anchor = now;
        r.successful = 0;
        r.failed = 0;
        r.look_at = kNever;
        r.heap_pos = kNone;
        shard.insert(i, hash);
        if (shard.looks.size() == shard.looks.capacity()) { // its look goes in without failing
            // By an eighth: copying 4-byte entries is cheap, slack is 4 bytes a key (by half: 1 B on average).
            shard.looks.reserve(std::max<std::size_t>(16, shard.looks.capacity() + shard.looks.capacity() / 8));
        }
    } catch (...) {
        shard.free(i);
        size_.fetch_sub(1);
        throw;
    }
    ++shard.live;
    look_at_locked(shard, i, sat_add(now, sat_add(idle_timeout_, 1)));
    return i;
}

bool KeyedLimiter::reserve_place() noexcept {
    std::int64_t size = size_.load();
    do {
        if (max_partitions_ > 0 && size >= max_partitions_) {
            return false;
        }
    } while (!size_.compare_exchange_weak(size, size + 1));
    return true;
}

Nanos KeyedLimiter::full_at_locked(Record& r, bool& poll) const {
    poll = false;
    if (!r.promoted()) {
        return tmpl_.rule->full_at(r.state, r.anchor); // kNever: held; its release comes through give_back
    }
    const Limiter& full = *r.limiter();
    // Its queue and the leases it granted change it without telling us: look again later.
    const Nanos at = full.queued_requests() > 0 ? kNever : full.full_at();
    poll = at == kNever;
    return at;
}

bool KeyedLimiter::free_a_place_locked(Shard& shard, Nanos now) {
    // A fully idle partition, however briefly idle, gives its place. At most 32 are examined,
    // this shard's first; other shards only if their lock is free right now (try_lock: a new key
    // never waits on, nor deadlocks with, another shard).
    int looked = 0;
    auto search = [&](Shard& s) {
        for (std::uint32_t i = 0; i < s.used && looked < 32; ++i) {
            Record& r = s.at(i);
            if (!r.live()) {
                continue;
            }
            ++looked;
            bool poll = false;
            if (full_at_locked(r, poll) <= now) {
                drop_locked(s, i);
                return true;
            }
        }
        return false;
    };
    if (search(shard)) {
        return true;
    }
    const auto first = static_cast<std::size_t>(&shard - shards_->data());
    for (std::size_t k = 1; k < kShards && looked < 32; ++k) {
        Shard& other = (*shards_)[(first + k) % kShards];
        std::unique_lock<std::mutex> lock(other.mu, std::try_to_lock);
        if (lock.owns_lock() && search(other)) {
            return true;
        }
    }
    return false;
}

void KeyedLimiter::drop_locked(Shard& shard, std::uint32_t i) {
    // Idle: nothing is held and nothing waits, so dropping it loses no state worth keeping.
    Record& r = shard.at(i);
    std::int64_t successful = r.successful;
    std::int64_t failed = r.failed;
    if (r.promoted()) {
        const Statistics s = r.limiter()->statistics();
        successful += s.total_successful_leases;
        failed += s.total_failed_leases;
    }
    dropped_successful_.fetch_add(successful);
    dropped_failed_.fetch_add(failed);
    if (r.heap_pos != kNone) {
        shard.unlook(i);
    }
    shard.erase(i);
    shard.free(i);
    --shard.live;
    size_.fetch_sub(1);
    if (shard.live == 0) {
        shard.reset();
    } else if (shard.slots.size() > 64 && static_cast<std::size_t>(shard.live) * 8 < shard.slots.size()) {
        shard.rehash(shard.slots.size() / 2);
    }
}

void KeyedLimiter::look_at_locked(Shard& shard, std::uint32_t i, Nanos when) {
    Record& r = shard.at(i);
    if (when >= r.look_at) {
        return; // an earlier look will see it and set the next one
    }
    r.look_at = when;
    shard.look_sooner(i);
    schedule(when);
}

void KeyedLimiter::schedule(Nanos when) {
    Nanos at = scheduled_at_.load();
    while (when < at) {
        if (scheduled_at_.compare_exchange_weak(at, when)) {
            clock_->scheduler().schedule(weak_from_this(), when);
            return;
        }
    }
}

void KeyedLimiter::look_locked(Shard& shard, std::uint32_t i, Nanos now, std::int64_t& evicted) {
    Record& r = shard.at(i);
    if (r.promoted() && r.limiter()->queued_requests() > 0) {
        // Its queue changes when its own timer runs: look right after that (same time, later in
        // the timer heap), so the key is evicted on time once its queue is served.
        const Nanos next = r.limiter()->next_timer();
        look_at_locked(shard, i, next == kNever ? sat_add(now, sat_add(idle_timeout_, 1)) : std::max(next, now));
        return;
    }
    bool poll = false;
    const Nanos at = full_at_locked(r, poll);
    if (at != kNever && at <= now && now - at > idle_timeout_) {
        drop_locked(shard, i);
        ++evicted;
        return;
    }
    if (at != kNever) {
        look_at_locked(shard, i,
                       sat_add(at, sat_add(idle_timeout_, 1))); // exactly when it will have been idle long enough
    } else if (poll) {
        look_at_locked(shard, i, sat_add(now, sat_add(idle_timeout_, 1)));
    }
}

std::int64_t KeyedLimiter::evict_due(Nanos now) {
    std::int64_t evicted = 0;
    std::vector<std::uint32_t> due;
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        // The looks due now, taken first: a look may set another one for now (a full limiter whose
        // timer is due), which is the next timer run's, after that limiter's own.
        due.clear();
        while (shard.next_look() <= now) {
            const std::uint32_t i = shard.looks.front();
            shard.unlook(i);
            due.push_back(i);
        }
        for (const std::uint32_t i : due) {
            // Only looks at these records run meanwhile: each may drop its own, and the last one
            // dropped lets the shard's memory go.
            if (i < shard.used && shard.at(i).live()) {
                look_locked(shard, i, now, evicted);
            }
        }
    }
#if defined(__GLIBC__)
    if (evicted >= 4096) {
        ::malloc_trim(0); // many blocks freed at once: hand the memory back to the system
    }
#endif
    return evicted;
}

bool KeyedLimiter::fork_try_lock() noexcept {
    for (std::size_t i = 0; i < kShards; ++i) {
        if (!(*shards_)[i].mu.try_lock()) {
            while (i > 0) {
                (*shards_)[--i].mu.unlock();
            }
            return false;
        }
    }
    return true;
}

void KeyedLimiter::fork_unlock() noexcept {
    for (auto& shard : *shards_) {
        shard.mu.unlock();
    }
}

void KeyedLimiter::fork_reset_child(bool timers_cleared, TimerHeap& engine) {
    if (!timers_cleared || closed_.load()) {
        return; // a manual clock's timers are still there
    }
    Nanos next = kNever;
    for (auto& shard : *shards_) {
        next = std::min(next, shard.next_look());
    }
    scheduled_at_.store(next);
    if (next != kNever) {
        engine.push(next, weak_from_this(), this);
    }
}

void KeyedLimiter::on_timer(Nanos now) {
    scheduled_at_.store(kNever);
    if (closed_.load()) {
        return;
    }
    evict_due(now);
    Nanos next = kNever;
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        next = std::min(next, shard.next_look());
    }
    if (next != kNever) {
        schedule(next);
    }
}

std::shared_ptr<Limiter>& KeyedLimiter::promote_locked(Record& r) {
    if (!r.promoted()) {
        auto full = tmpl_.promote(r.anchor, r.state);
        r.set_full(new std::shared_ptr<Limiter>(std::move(full)));
        r.key.set_flags(kLive | kPromoted);
    }
    return *r.full();
}

bool KeyedLimiter::grant_locked(Record& r, std::int64_t n, Nanos now, std::int64_t& tag) {
    const Rule& rule = *tmpl_.rule;
    detail::check_permit_count(n, rule.max_permits());
    // A record has no queue: nothing waits ahead, a request is decided on the state alone.
    Pair next{};
    if (n == 0 ? rule.available(r.state, r.anchor, now) <= 0 : !rule.take(r.state, r.anchor, n, now, next, tag)) {
        return false;
    }
    if (n > 0) {
        r.state = gpr_pair(next);
    }
    ++r.successful;
    return true;
}

i128 KeyedLimiter::retry_after(const Record& r, std::int64_t n, Nanos now) const {
    const Rule& rule = *tmpl_.rule;
    const Nanos wait = rule.time_until(r.state, r.anchor, std::max<std::int64_t>(n, 1), now);
    if (wait != kNever) {
        return wait;
    }
    // Never by time (concurrency), or beyond the int64 range: ask a projection, exact in 128 bits.
    auto projection = rule.project(r.state, r.anchor);
    return projection ? std::max<i128>(0, projection->grant(n, now, false) - now) : -1;
}

bool KeyedLimiter::promoted_locked(Record& r) {
    if (!r.promoted() && (r.successful >= count_limit_ || r.failed >= count_limit_)) {
        promote_locked(r); // its own counts are 64-bit; statistics add the record's
    }
    return r.promoted();
}

KeyedLimiter::Located KeyedLimiter::locate(std::string_view key, bool create) {
    if (create && closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_key(key);
    Shard& shard = (*shards_)[hash % kShards];
    Located at{shard, std::unique_lock<std::mutex>(shard.mu)};
    at.index = create ? find_or_create_locked(shard, key, hash) : find_locked(shard, key, hash);
    return at;
}

KeyedLimiter::Result KeyedLimiter::acquire(std::string_view key, std::int64_t n) {
    auto at = locate(key, true);
    if (!at.found()) {
        return {Outcome::failed(n, Reason::PartitionLimit), false};
    }
    Record& r = at.shard.at(at.index);
    if (promoted_locked(r)) {
        return {r.limiter()->acquire(n), true};
    }
    const Nanos now = clock_->now();
    if (std::int64_t tag = 0; grant_locked(r, n, now, tag)) {
        return {Outcome::granted(n, tag), false};
    }
    ++r.failed;
    return {Outcome::failed(n, Reason::LimitReached, retry_after(r, n, now)), false};
}

std::optional<KeyedLimiter::Result> KeyedLimiter::try_now(std::string_view key, std::int64_t n) {
    auto at = locate(key, true);
    if (!at.found()) {
        return Result{Outcome::failed(n, Reason::PartitionLimit), false};
    }
    Record& r = at.shard.at(at.index);
    if (promoted_locked(r)) {
        auto o = r.limiter()->try_now(n);
        return o ? std::optional<Result>(Result{*o, true}) : std::nullopt;
    }
    std::int64_t tag = 0;
    return grant_locked(r, n, clock_->now(), tag) ? std::optional<Result>(Result{Outcome::granted(n, tag), false})
                                                  : std::nullopt;
}

KeyedLimiter::Queued KeyedLimiter::enqueue(std::string_view key, std::int64_t n, Nanos timeout,
                                           std::shared_ptr<Notifier> notifier, std::uint64_t id) {
    auto at = locate(key, true);
    if (!at.found()) {
        return {{Outcome::failed(n, Reason::PartitionLimit), nullptr}, nullptr};
    }
    Record& r = at.shard.at(at.index);
    if (!promoted_locked(r)) {
        const Nanos now = clock_->now();
        if (std::int64_t tag = 0; grant_locked(r, n, now, tag)) {
            return {{Outcome::granted(n, tag), nullptr}, nullptr};
        }
        // The queue is empty: a request fits iff it is within the queue limit (Limiter::enqueue).
        if (n > tmpl_.queue.queue_limit) {
            ++r.failed;
            return {{Outcome::failed(n, Reason::QueueFull, retry_after(r, n, now)), nullptr}, nullptr};
        }
        if (timeout == 0) {
            return {{Outcome::failed(n, Reason::Timeout), nullptr}, nullptr};
        }
    }
    // It has to queue: from now on the key is a full limiter with its own queue.
    auto& full = promote_locked(r);
    return {full->enqueue(n, timeout, std::move(notifier), id), full};
}

void KeyedLimiter::give_back(std::string_view key, std::int64_t n, std::int64_t tag) {
    if (n <= 0 || closed_.load()) {
        return;
    }
    auto at = locate(key, false);
    if (!at.found()) {
        return; // evicted: it was full, nothing to give back to
    }
    Record& r = at.shard.at(at.index);
    if (r.promoted()) {
        r.limiter()->give_back(n, tag);
    } else {
        Pair next{};
        if (!tmpl_.rule->give_back(r.state, r.anchor, n, tag, clock_->now(), next)) {
            return;
        }
        r.state = gpr_pair(next);
    }
    // Idle sooner than the pending look expects (a release, a refund): look at it then.
    bool poll = false;
    const Nanos when = full_at_locked(r, poll);
    if (when != kNever) {
        look_at_locked(at.shard, at.index, sat_add(when, sat_add(idle_timeout_, 1)));
    }
}

void KeyedLimiter::recheck(std::string_view key) {
    if (closed_.load()) {
        return;
    }
    auto at = locate(key, false);
    if (at.found()) {
        bool poll = false;
        const Nanos when = full_at_locked(at.shard.at(at.index), poll);
        if (when != kNever) {
            look_at_locked(at.shard, at.index, sat_add(when, sat_add(idle_timeout_, 1)));
        }
    }
}

std::optional<Statistics> KeyedLimiter::statistics(std::string_view key) {
    auto at = locate(key, true);
    if (!at.found()) {
        return std::nullopt;
    }
    Record& r = at.shard.at(at.index);
    if (r.promoted()) {
        Statistics s = r.limiter()->statistics();
        s.total_successful_leases += r.successful;
        s.total_failed_leases += r.failed;
        return s;
    }
    return Statistics{tmpl_.rule->available(r.state, r.anchor, clock_->now()), 0, r.successful, r.failed};
}

KeyedLimiter::Memory KeyedLimiter::memory() {
    Memory m{sizeof(KeyedLimiter) + sizeof(*shards_), 0};
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        m.bytes += shard.chunks.capacity() * sizeof(void*) + shard.chunks.size() * kChunk * sizeof(Record) +
                   shard.slots.capacity() * sizeof(std::uint32_t) + shard.looks.capacity() * sizeof(std::uint32_t);
        for (std::uint32_t i = 0; i < shard.used; ++i) {
            const Record& r = shard.at(i);
            if (r.live()) {
                m.key_bytes += r.key.view().size();
                m.bytes += r.key.heap_bytes();
            }
        }
    }
    return m;
}

Statistics KeyedLimiter::totals() {
    if (closed_.load()) {
        throw ClosedError();
    }
    Statistics total{0, 0, dropped_successful_.load(), dropped_failed_.load()};
    const Nanos now = clock_->now();
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        for (std::uint32_t i = 0; i < shard.used; ++i) {
            const Record& r = shard.at(i);
            if (!r.live()) {
                continue;
            }
            total.total_successful_leases += r.successful;
            total.total_failed_leases += r.failed;
            if (r.promoted()) {
                const Statistics s = r.limiter()->statistics();
                total.current_available_permits += s.current_available_permits;
                total.current_queued_count += s.current_queued_count;
                total.total_successful_leases += s.total_successful_leases;
                total.total_failed_leases += s.total_failed_leases;
            } else {
                total.current_available_permits += tmpl_.rule->available(r.state, r.anchor, now);
            }
        }
    }
    return total;
}

void KeyedLimiter::check_invariants() {
    auto require = [](bool ok, const char* what) {
        if (!ok) {
            throw std::logic_error(std::string("keyed table: ") + what);
        }
    };
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        std::uint32_t live = 0;
        for (std::uint32_t i = 0; i < shard.used; ++i) {
            const Record& r = shard.at(i);
            if (!r.live()) {
                require(r.heap_pos == kNone, "a free record has a look");
                continue;
            }
            ++live;
            const std::uint64_t hash = hash_key(r.key.view());
            require(find_locked(shard, r.key.view(), hash) == i, "a key is not found at its record");
            require((r.look_at == kNever) == (r.heap_pos == kNone), "a record's look and heap place disagree");
            require(r.heap_pos == kNone || (r.heap_pos < shard.looks.size() && shard.looks[r.heap_pos] == i),
                    "a record's heap place does not hold it");
        }
        require(live == shard.live, "the live count is off");
        require(static_cast<std::size_t>(std::count_if(shard.slots.begin(), shard.slots.end(),
                                                       [](std::uint32_t v) { return v != 0; })) == live,
                "the index holds other than the live records");
        for (std::size_t k = 1; k < shard.looks.size(); ++k) {
            require(!shard.earlier(shard.looks[k], shard.looks[(k - 1) / 2]), "the look heap is out of order");
        }
    }
}

void KeyedLimiter::close() {
    if (closed_.exchange(true)) {
        return;
    }
    for (auto& shard : *shards_) {
        std::vector<std::shared_ptr<Limiter>> full;
        {
            std::lock_guard<std::mutex> lock(shard.mu);
            for (std::uint32_t i = 0; i < shard.used; ++i) {
                Record& r = shard.at(i);
                if (r.live()) {
                    if (r.promoted()) {
                        full.push_back(r.limiter());
                    }
                    shard.free(i);
                }
            }
            shard.live = 0;
            shard.reset();
        }
        for (auto& limiter : full) {
            limiter->close(); // queued requests complete with reason "closed"
        }
    }
    size_.store(0);
    clock_->scheduler().cancel(this); // nothing left to evict: its timers would only pin it
}

} // namespace permits
