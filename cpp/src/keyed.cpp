#include "permits/keyed.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>
#include <utility>

namespace permits {

namespace {
constexpr std::uint32_t kNone = 0xffffffffU;
// Records never move: they are allocated in chunks of 32, 32, 64, 128, 256, 512, then 1024 at a
// time, so a shard with few keys holds little memory and a large one little slack.
constexpr std::uint32_t kFirstChunk = 32;
constexpr std::uint32_t kChunk = 1024;

/// The chunk holding record i, and where in it.
inline std::pair<std::uint32_t, std::uint32_t> chunk_of(std::uint32_t i) {
    if (i < kFirstChunk) {
        return {0, i};
    }
    if (i < kChunk) {
        const auto log = static_cast<std::uint32_t>(31 - __builtin_clz(i)); // 5..9
        return {log - 4, i - (1U << log)};
    }
    return {5 + (i >> 10), i & (kChunk - 1)};
}

/// Records in chunk c.
inline std::uint32_t chunk_size(std::uint32_t c) {
    return c == 0 ? kFirstChunk : c < 6 ? (1U << (c + 4)) : kChunk;
}
constexpr std::uint8_t kLive = 1;
constexpr std::uint8_t kPromoted = 2;
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
    std::uint8_t flags() const noexcept { return b_[15]; }
    void set_flags(std::uint8_t f) noexcept { b_[15] = f; }

private:
    static constexpr std::size_t kInline = 14;
    unsigned char b_[16] = {};
};

struct alignas(64) KeyedLimiter::Record {
    union {
        Pair state{};                   // the rule's state word
        std::shared_ptr<Limiter>* full; // promoted: the key's full limiter
    };
    Nanos anchor = 0;
    std::int64_t successful = 0;
    std::int64_t failed = 0;
    Nanos look_at = kNever; // the earliest pending look at this record (kNever: none)
    KeyBytes key;

    bool live() const noexcept { return (key.flags() & kLive) != 0; }
    bool promoted() const noexcept { return (key.flags() & kPromoted) != 0; }
};

struct KeyedLimiter::Shard {
    std::mutex mu; // guards everything below; held for a lookup and one non-blocking decision
    std::vector<std::unique_ptr<Record[]>> chunks;
    std::uint32_t used = 0;          // records handed out so far (live or free)
    std::uint32_t free_head = kNone; // free records, linked through state.a
    std::uint32_t live = 0;
    // Open addressing, linear probing: (hash >> 32) << 32 | (record + 1); 0 is empty.
    std::vector<std::uint64_t> slots;
    std::vector<Look> looks; // a min-heap on `when`: O(evicted) eviction, no scan of all keys

    Record& at(std::uint32_t i) {
        const auto [c, k] = chunk_of(i);
        return chunks[c][k];
    }
    const Record& at(std::uint32_t i) const {
        const auto [c, k] = chunk_of(i);
        return chunks[c][k];
    }

    std::uint32_t allocate() {
        if (free_head != kNone) {
            const std::uint32_t i = free_head;
            free_head = static_cast<std::uint32_t>(at(i).state.a);
            return i;
        }
        if (chunk_of(used).second == 0) { // the first record of a chunk not allocated yet
            chunks.push_back(std::make_unique<Record[]>(chunk_size(static_cast<std::uint32_t>(chunks.size()))));
        }
        return used++;
    }
    void free(std::uint32_t i) noexcept {
        Record& r = at(i);
        if (r.promoted()) {
            delete r.full;
        }
        r.key.release();
        r.key.set_flags(0);
        r.look_at = kNever;
        r.state = {static_cast<std::int64_t>(free_head), 0};
        free_head = i;
    }
    /// Back to nothing allocated: the memory of a burst of keys goes back once they are gone.
    void reset() noexcept {
        std::vector<std::unique_ptr<Record[]>>().swap(chunks);
        std::vector<std::uint64_t>().swap(slots);
        std::vector<Look>().swap(looks);
        used = 0;
        free_head = kNone;
    }

    static std::uint64_t slot_value(std::uint64_t hash, std::uint32_t i) {
        return (hash & 0xffffffff00000000ULL) | (static_cast<std::uint64_t>(i) + 1);
    }
    std::size_t home(std::uint64_t v) const { return static_cast<std::size_t>(v >> 32) & (slots.size() - 1); }
    void insert(std::uint64_t v) {
        if ((static_cast<std::size_t>(live) + 1) * 4 > slots.size() * 3) {
            rehash(std::max<std::size_t>(16, slots.size() * 2));
        }
        std::size_t p = home(v);
        while (slots[p] != 0) {
            p = (p + 1) & (slots.size() - 1);
        }
        slots[p] = v;
    }
    void erase(std::uint64_t v) {
        const std::size_t mask = slots.size() - 1;
        std::size_t i = home(v);
        while (slots[i] != v) {
            i = (i + 1) & mask;
        }
        // Backward shift: later entries of the probe run move up, so no tombstones are needed.
        for (std::size_t j = (i + 1) & mask; slots[j] != 0; j = (j + 1) & mask) {
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
        std::vector<std::uint64_t> old;
        old.swap(slots);
        slots.assign(capacity, 0);
        for (const std::uint64_t v : old) {
            if (v != 0) {
                std::size_t p = home(v);
                while (slots[p] != 0) {
                    p = (p + 1) & (capacity - 1);
                }
                slots[p] = v;
            }
        }
    }
};

namespace {
std::uint64_t hash_of(std::string_view key) {
    return std::hash<std::string_view>{}(key);
}
} // namespace

KeyedLimiter::KeyedLimiter(std::shared_ptr<Clock> clock, KeyedTemplate tmpl, Nanos idle_timeout,
                           std::int64_t max_partitions)
    : clock_(std::move(clock)), tmpl_(std::move(tmpl)), idle_timeout_(idle_timeout), max_partitions_(max_partitions),
      shards_(std::make_unique<std::array<Shard, kShards>>()) {
    static_assert(sizeof(Record) == 64, "one record per cache line");
    if (idle_timeout < 0) {
        throw std::invalid_argument("idle_timeout must not be negative");
    }
    if (max_partitions < 0) {
        throw std::invalid_argument("max_partitions must be >= 1");
    }
    if (!tmpl_.promote) {
        throw std::invalid_argument("a keyed limiter needs a way to build a key's limiter");
    }
}

KeyedLimiter::~KeyedLimiter() {
    for (auto& shard : *shards_) {
        for (std::uint32_t i = 0; i < shard.used; ++i) {
            if (shard.at(i).live()) {
                shard.free(i);
            }
        }
    }
}

std::optional<std::uint32_t> KeyedLimiter::find_locked(Shard& shard, std::string_view key, std::uint64_t hash) const {
    if (shard.slots.empty()) {
        return std::nullopt;
    }
    const std::uint64_t high = hash & 0xffffffff00000000ULL;
    const std::size_t mask = shard.slots.size() - 1;
    for (std::size_t p = static_cast<std::size_t>(hash >> 32) & mask;; p = (p + 1) & mask) {
        const std::uint64_t v = shard.slots[p];
        if (v == 0) {
            return std::nullopt;
        }
        if ((v & 0xffffffff00000000ULL) == high) {
            const auto i = static_cast<std::uint32_t>(v & 0xffffffffU) - 1;
            if (shard.at(i).key.view() == key) {
                return i;
            }
        }
    }
}

std::optional<std::uint32_t> KeyedLimiter::find_or_create_locked(Shard& shard, std::string_view key,
                                                                 std::uint64_t hash) {
    if (auto found = find_locked(shard, key, hash)) {
        return found;
    }
    if (closed_.load()) {
        throw ClosedError(); // close() may have emptied this shard since the caller looked
    }
    const Nanos now = clock_->now();
    // Reserve the new partition's place first: shards insert concurrently, the bound is global.
    if (!reserve_place() && !(free_a_place_locked(shard, now) && reserve_place())) {
        return std::nullopt;
    }
    const std::uint32_t i = shard.allocate();
    Record& r = shard.at(i);
    try {
        r.key.assign(key);
        if (tmpl_.rule) {
            r.state = tmpl_.rule->initial(now);
            r.key.set_flags(kLive);
        } else {
            r.full = new std::shared_ptr<Limiter>(tmpl_.promote(now, Pair{}));
            r.key.set_flags(kLive | kPromoted);
        }
    } catch (...) {
        shard.free(i);
        size_.fetch_sub(1);
        throw;
    }
    r.anchor = now;
    r.successful = 0;
    r.failed = 0;
    r.look_at = kNever;
    shard.insert(Shard::slot_value(hash, i));
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
    const Limiter& full = **r.full;
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
        const Statistics s = (*r.full)->statistics();
        successful += s.total_successful_leases;
        failed += s.total_failed_leases;
    }
    dropped_successful_.fetch_add(successful);
    dropped_failed_.fetch_add(failed);
    shard.erase(Shard::slot_value(hash_of(r.key.view()), i));
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
    shard.looks.push_back({when, i});
    std::push_heap(shard.looks.begin(), shard.looks.end(), std::greater<>{});
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
    r.look_at = kNever;
    if (r.promoted() && (*r.full)->queued_requests() > 0) {
        // Its queue changes when its own timer runs: look right after that (same time, later in
        // the timer heap), so the key is evicted on time once its queue is served.
        const Nanos next = (*r.full)->next_timer();
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
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        auto& looks = shard.looks;
        // The looks due now, taken first: a look may set another one for now (a full limiter whose
        // timer is due), which is the next timer run's, after that limiter's own.
        std::vector<Look> due;
        while (!looks.empty() && looks.front().when <= now) {
            std::pop_heap(looks.begin(), looks.end(), std::greater<>{});
            due.push_back(looks.back());
            looks.pop_back();
        }
        for (const Look& look : due) {
            if (look.index >= shard.used) {
                continue; // the shard emptied and let its memory go meanwhile
            }
            const Record& r = shard.at(look.index);
            if (r.live() && r.look_at == look.when) { // else superseded by an earlier look, or dropped
                look_locked(shard, look.index, now, evicted);
            }
        }
        // Looks superseded by earlier ones pile up only so far.
        if (looks.size() > 2 * static_cast<std::size_t>(shard.live) + 64) {
            std::erase_if(looks, [&](const Look& l) {
                const Record& r = shard.at(l.index);
                return !r.live() || r.look_at != l.when;
            });
            std::make_heap(looks.begin(), looks.end(), std::greater<>{});
        }
    }
#if defined(__GLIBC__)
    if (evicted >= 4096) {
        ::malloc_trim(0); // many blocks freed at once: hand the memory back to the system
    }
#endif
    return evicted;
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
        if (!shard.looks.empty()) {
            next = std::min(next, shard.looks.front().when);
        }
    }
    if (next != kNever) {
        schedule(next);
    }
}

std::shared_ptr<Limiter>& KeyedLimiter::promote_locked(Record& r) {
    if (!r.promoted()) {
        auto full = tmpl_.promote(r.anchor, r.state);
        r.full = new std::shared_ptr<Limiter>(std::move(full));
        r.key.set_flags(kLive | kPromoted);
    }
    return *r.full;
}

std::optional<Outcome> KeyedLimiter::grant_locked(Record& r, std::int64_t n, Nanos now) {
    const Rule& rule = *tmpl_.rule;
    detail::check_permit_count(n, rule.max_permits());
    std::int64_t tag = 0;
    // A record has no queue: nothing waits ahead, a request is decided on the state alone.
    if (n == 0 ? rule.available(r.state, r.anchor, now) <= 0 : !rule.take(r.state, r.anchor, n, now, r.state, tag)) {
        return std::nullopt;
    }
    ++r.successful;
    return Outcome::granted(n, tag);
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

KeyedLimiter::Result KeyedLimiter::acquire(std::string_view key, std::int64_t n) {
    if (closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto i = find_or_create_locked(shard, key, hash);
    if (!i) {
        return {Outcome::failed(n, Reason::PartitionLimit), nullptr};
    }
    Record& r = shard.at(*i);
    if (r.promoted()) {
        return {(*r.full)->acquire(n), *r.full};
    }
    const Nanos now = clock_->now();
    if (auto granted = grant_locked(r, n, now)) {
        return {*granted, nullptr};
    }
    ++r.failed;
    return {Outcome::failed(n, Reason::LimitReached, retry_after(r, n, now)), nullptr};
}

std::optional<KeyedLimiter::Result> KeyedLimiter::try_now(std::string_view key, std::int64_t n) {
    if (closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto i = find_or_create_locked(shard, key, hash);
    if (!i) {
        return Result{Outcome::failed(n, Reason::PartitionLimit), nullptr};
    }
    Record& r = shard.at(*i);
    if (r.promoted()) {
        auto o = (*r.full)->try_now(n);
        return o ? std::optional<Result>(Result{*o, *r.full}) : std::nullopt;
    }
    auto granted = grant_locked(r, n, clock_->now());
    return granted ? std::optional<Result>(Result{*granted, nullptr}) : std::nullopt;
}

KeyedLimiter::Queued KeyedLimiter::enqueue(std::string_view key, std::int64_t n, Nanos timeout,
                                           std::shared_ptr<Notifier> notifier, std::uint64_t id) {
    if (closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto i = find_or_create_locked(shard, key, hash);
    if (!i) {
        return {{Outcome::failed(n, Reason::PartitionLimit), nullptr}, nullptr};
    }
    Record& r = shard.at(*i);
    if (!r.promoted()) {
        const Nanos now = clock_->now();
        if (auto granted = grant_locked(r, n, now)) {
            return {{*granted, nullptr}, nullptr};
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
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto i = find_locked(shard, key, hash);
    if (!i) {
        return; // evicted: it was full, nothing to give back to
    }
    Record& r = shard.at(*i);
    if (r.promoted()) {
        (*r.full)->give_back(n, tag);
    } else if (!tmpl_.rule->put_back(r.state, r.anchor, n, tag, clock_->now(), r.state)) {
        return;
    }
    // Idle sooner than the pending look expects (a release, a refund): look at it then.
    bool poll = false;
    const Nanos at = full_at_locked(r, poll);
    if (at != kNever) {
        look_at_locked(shard, *i, sat_add(at, sat_add(idle_timeout_, 1)));
    }
}

void KeyedLimiter::recheck(std::string_view key) {
    if (closed_.load()) {
        return;
    }
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    if (const auto i = find_locked(shard, key, hash)) {
        bool poll = false;
        const Nanos at = full_at_locked(shard.at(*i), poll);
        if (at != kNever) {
            look_at_locked(shard, *i, sat_add(at, sat_add(idle_timeout_, 1)));
        }
    }
}

bool KeyedLimiter::releases_permits() const noexcept {
    return tmpl_.rule && tmpl_.rule->releases_permits();
}

std::optional<Statistics> KeyedLimiter::statistics(std::string_view key) {
    if (closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_of(key);
    Shard& shard = (*shards_)[hash % kShards];
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto i = find_or_create_locked(shard, key, hash);
    if (!i) {
        return std::nullopt;
    }
    Record& r = shard.at(*i);
    if (r.promoted()) {
        Statistics s = (*r.full)->statistics();
        s.total_successful_leases += r.successful;
        s.total_failed_leases += r.failed;
        return s;
    }
    return Statistics{tmpl_.rule->available(r.state, r.anchor, clock_->now()), 0, r.successful, r.failed};
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
                const Statistics s = (*r.full)->statistics();
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
                        full.push_back(*r.full);
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
}

} // namespace permits
