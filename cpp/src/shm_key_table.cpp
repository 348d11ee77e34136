#include "permits/shm_key_table.hpp"

#if defined(__linux__)

#include <algorithm>
#include <cstring>
#include <new>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/key_hash.hpp"
#include "permits/rule_limiter.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

namespace permits::shm {

namespace {

constexpr Nanos kMs = 1000000;
constexpr Nanos kReclaimEvery = 50 * kMs;
constexpr std::uint64_t kTableHead = 64;
constexpr std::uint64_t kLockBytes = 64;
constexpr std::uint64_t kRecordHead = 64; // a record's bookkeeping and key; its state words follow

struct TableHead {
    std::atomic<std::int64_t> size;
    std::uint32_t shards;
    std::uint32_t slots;
    std::uint64_t record_bytes;
};
static_assert(sizeof(TableHead) <= kTableHead);
static_assert(sizeof(pthread_mutex_t) <= kLockBytes);

constexpr std::uint64_t kEntryBytes = 16;

std::uint32_t entries_of(const Params& p) {
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(p.values[0], 1, kKeyHolders));
}

std::uint64_t words_bytes(const Params& p) {
    switch (p.kind) {
    case Kind::SlidingWindow:
        return (static_cast<std::uint64_t>(SlidingWindowShape::slots(p.values[2])) + 1) * sizeof(AtomicPair);
    case Kind::Concurrency: return entries_of(p) * kEntryBytes;
    default: return sizeof(AtomicPair);
    }
}

void geometry(std::int64_t max_partitions, std::uint32_t& shards, std::uint32_t& slots) {
    shards = static_cast<std::uint32_t>(std::clamp<std::int64_t>(max_partitions / 32, 1, 64));
    // Slack, so that keys spread unevenly over the shards rarely fill one before the table is full.
    slots = static_cast<std::uint32_t>((max_partitions * 5 / 4 + shards - 1) / shards + 8);
}

TableHead& head_of(char* data) { // NOLINT(readability-non-const-parameter): the head is written through it
    return *reinterpret_cast<TableHead*>(data);
}

// NOLINTNEXTLINE(readability-non-const-parameter): the lock is changed through it
pthread_mutex_t* lock_of(char* data, std::uint32_t shard) {
    return reinterpret_cast<pthread_mutex_t*>(data + kTableHead + shard * kLockBytes);
}

std::uint64_t entry_tag(std::uint32_t holder, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(generation) << 32) | (holder + 1);
}

} // namespace

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

    char* words() noexcept { return reinterpret_cast<char*>(this) + kRecordHead; }
    AtomicPair& word() noexcept { return *reinterpret_cast<AtomicPair*>(words()); }
    HolderEntry& entry(std::size_t i) noexcept { return reinterpret_cast<HolderEntry*>(words())[i]; }
};

// ---- a key's limiter in this process ----

namespace {
class KeyLimiter final : public SharedLimiter {
public:
    KeyLimiter(std::shared_ptr<KeyTable> table, KeyTable::Key key, std::int64_t max_permits)
        : SharedLimiter(table->store().clock(), max_permits, table->tmpl().queue, false), table_(std::move(table)),
          key_(std::move(key)) {}

    bool releases_permits() const noexcept override { return table_->releases_permits(); }
    Nanos full_at() const override { return table_->full_at(key_); }
    bool queued() const noexcept override { return queued_requests() > 0; }
    void poll() override {
        table_->reclaim(key_);
        recheck();
    }

protected:
    bool take_held(std::int64_t n, Nanos now, std::int64_t& tag) override {
        if (table_->take(key_, n, now, tag)) {
            if (table_->releases_permits()) {
                watch(table_->store(), table_->tmpl().lease_ttl / 3, false);
            }
            return true;
        }
        return false;
    }
    std::int64_t available_at(Nanos now) const override { return table_->available(key_, now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override { return table_->time_until(key_, needed, now); }
    void give_back_held(std::int64_t n, std::int64_t tag, Nanos now) override {
        if (table_->give_back(key_, n, tag, now)) {
            table_->store().segment().notify();
        }
    }
    bool still_held(std::int64_t tag, std::int64_t permits) override { return table_->still_held(key_, tag, permits); }
    void let_go(std::int64_t tag, std::int64_t permits) override {
        if (table_->let_go(key_, tag, permits, state_now())) {
            table_->store().segment().notify();
        }
    }
    void told_lost(std::int64_t leases) override { table_->note_lost(leases); }
    std::unique_ptr<Projection> project() const override { return table_->project(key_); }
    void on_queued() override {
        if (table_->releases_permits()) {
            watch(table_->store(), table_->tmpl().lease_ttl / 3, true);
        }
    }
    bool no_room() override { return table_->no_room(key_); }
    Reason refusal(std::int64_t n) override { return table_->refusal(key_, n); }

private:
    std::shared_ptr<KeyTable> table_;
    KeyTable::Key key_;
};
} // namespace

// ---- the table ----

std::uint64_t KeyTable::record_bytes(const Params& params) noexcept {
    static_assert(sizeof(Record) == kRecordHead);
    static_assert(sizeof(HolderEntry) == kEntryBytes);
    static_assert(kKeyBytes >= 25); // a long key's stand-in: a flag byte, two hashes, its length
    return round_up(kRecordHead + words_bytes(params), 16);
}

KeyTable::Census KeyTable::census(const Segment& segment, const NamedSlot& slot) {
    Census c;
    const std::int64_t* v = slot.values;
    Params keys{static_cast<Kind>(v[0]), 0, {v[1], v[2], v[3]}};
    // The keys' parameters as open() would check them (a damaged value never sizes anything here).
    try {
        switch (keys.kind) {
        case Kind::TokenBucket: (void)TokenBucketRule(v[1], v[2], v[3]); break;
        case Kind::FixedWindow: (void)FixedWindowRule(v[1], v[2]); break;
        case Kind::SlidingWindowCounter: (void)SlidingWindowCounterRule(v[1], v[2]); break;
        case Kind::SlidingWindow: SlidingWindowState::check(v[1], v[2], v[3]); break;
        case Kind::Concurrency: (void)ConcurrencyRule(v[1]); break;
        default: throw std::invalid_argument("its keys' kind, " + std::to_string(v[0]) + ", is no limiter's");
        }
        if (v[4] < 1 || v[4] > (1LL << 31)) {
            throw std::invalid_argument("its max_partitions, " + std::to_string(v[4]) + ", is out of range");
        }
    } catch (const std::invalid_argument& e) {
        c.damage = e.what();
        return c;
    }
    std::uint32_t shards = 0;
    std::uint32_t slots = 0;
    geometry(v[4], shards, slots);
    const std::uint64_t record = record_bytes(keys);
    const std::uint64_t bytes = kTableHead + shards * kLockBytes + static_cast<std::uint64_t>(shards) * slots * record;
    char* data = segment.at<char>(slot.offset);
    const TableHead& head = head_of(data);
    if (slot.bytes != bytes || head.shards != shards || head.slots != slots || head.record_bytes != record) {
        c.damage = "its geometry differs from what its parameters make";
        return c;
    }
    const std::int64_t records = static_cast<std::int64_t>(shards) * slots;
    c.keys = std::clamp<std::int64_t>(head.size.load(), 0, records);
    c.bytes_per_key = record;
    if (keys.kind != Kind::Concurrency) {
        return c;
    }
    c.held.assign(kMaxHolders, 0);
    const std::uint32_t entries = entries_of(keys);
    char* first = data + kTableHead + shards * kLockBytes;
    for (std::int64_t i = 0; i < records; ++i) {
        auto& r = *reinterpret_cast<Record*>(first + static_cast<std::uint64_t>(i) * record);
        if (r.used.load() != 1) {
            continue;
        }
        for (std::uint32_t e = 0; e < entries; ++e) {
            const std::int64_t count = r.entry(e).count.load();
            const std::uint64_t tag = r.entry(e).tag.load();
            const auto holder = static_cast<std::uint32_t>((tag & 0xffffffffULL) - 1);
            // (a freed holder's entries are stale: they hold nothing, as held_locked counts them)
            if (count == 0 || holder >= kMaxHolders ||
                segment.holder_generation(holder) != static_cast<std::uint32_t>(tag >> 32)) {
                continue;
            }
            c.held[holder] += count < 0 || count > v[1] ? v[1] : count; // (a damaged count: the whole limit)
        }
    }
    return c;
}

std::shared_ptr<KeyTable> KeyTable::open(const std::shared_ptr<Store>& store, std::string_view name,
                                         const Template& tmpl, std::int64_t max_partitions, Nanos idle_timeout) {
    detail::check_queue(tmpl.queue);
    if (max_partitions < 1 || max_partitions > (1LL << 31)) {
        throw std::invalid_argument("max_partitions must be between 1 and 2**31, got " +
                                    std::to_string(max_partitions));
    }
    if (idle_timeout < 0) {
        throw std::invalid_argument("idle_timeout must not be negative");
    }
    if (tmpl.params.kind == Kind::Concurrency && tmpl.lease_ttl < kMs) {
        throw std::invalid_argument("lease_ttl must be at least a millisecond");
    }
    std::uint32_t shards = 0;
    std::uint32_t slots = 0;
    geometry(max_partitions, shards, slots);
    const std::uint64_t record = record_bytes(tmpl.params);
    const std::uint64_t bytes = kTableHead + shards * kLockBytes + static_cast<std::uint64_t>(shards) * slots * record;
    // The table's parameters: its keys' kind and theirs (named as the kind names them), and its own.
    const char* names[6] = {"kind", "parameter", "parameter", "parameter", "max_partitions", "idle_timeout"};
    for (std::uint32_t i = 0; i < tmpl.params.count && i < 3 && tmpl.params.names != nullptr; ++i) {
        names[i + 1] = tmpl.params.names[i];
    }
    Params p{Kind::KeyTable,
             6,
             {static_cast<std::int64_t>(tmpl.params.kind), tmpl.params.values[0], tmpl.params.values[1],
              tmpl.params.values[2], max_partitions, idle_timeout},
             names};
    p.durations = ((tmpl.params.durations & 0x7U) << 1) | (1U << 5);
    NamedSlot& slot = store->segment().named(name, p, bytes, store->now(), [&](char* data, Nanos) {
        auto* head = new (data) TableHead();
        head->size.store(0);
        head->shards = shards;
        head->slots = slots;
        head->record_bytes = record;
        for (std::uint32_t s = 0; s < shards; ++s) {
            RobustLock::init(lock_of(data, s));
        }
    });
    char* data = store->segment().at<char>(slot.offset);
    const TableHead& head = head_of(data);
    if (head.shards != shards || head.slots != slots || head.record_bytes != record) {
        throw std::invalid_argument("per-key table '" + std::string(name) + "' is corrupted (its geometry differs)");
    }
    return std::make_shared<KeyTable>(store, data, tmpl, max_partitions, idle_timeout);
}

KeyTable::KeyTable(std::shared_ptr<Store> store, char* data, const Template& tmpl, std::int64_t max_partitions,
                   Nanos idle_timeout)
    : store_(std::move(store)), data_(data), tmpl_(tmpl), max_(max_partitions), idle_(idle_timeout),
      record_(record_bytes(tmpl.params)), entries_(entries_of(tmpl.params)) {
    // The geometry as this process computes it (open() checked the segment's against it): what
    // the segment says is never what bounds an index.
    geometry(max_partitions, shards_, slots_);
    const auto& v = tmpl_.params.values;
    switch (tmpl_.params.kind) {
    case Kind::TokenBucket: rule_ = std::make_shared<TokenBucketRule>(v[0], v[1], v[2]); break;
    case Kind::FixedWindow: rule_ = std::make_shared<FixedWindowRule>(v[0], v[1]); break;
    case Kind::SlidingWindowCounter: rule_ = std::make_shared<SlidingWindowCounterRule>(v[0], v[1]); break;
    case Kind::SlidingWindow: SlidingWindowState::check(v[0], v[1], v[2]); break;
    case Kind::Concurrency: (void)ConcurrencyRule(v[0]); break;
    default: throw std::invalid_argument("a per-key table's keys need a limiter kind");
    }
}

std::uint64_t KeyTable::bytes() const noexcept {
    return kTableHead + shards_ * kLockBytes + static_cast<std::uint64_t>(shards_) * slots_ * record_;
}

std::int64_t KeyTable::size() const noexcept {
    // (a count damaged in shared memory reads as one the table's slots could hold)
    return std::clamp<std::int64_t>(head_of(data_).size.load(), 0, static_cast<std::int64_t>(shards_) * slots_);
}

std::uint32_t KeyTable::shard_of(const Key& key) const noexcept {
    return static_cast<std::uint32_t>(key.hash % shards_);
}

SlidingWindowState KeyTable::window_of(Record& r) const noexcept {
    const auto& v = tmpl_.params.values;
    return SlidingWindowState::over(v[0], v[1], v[2], r.anchor, reinterpret_cast<AtomicPair*>(r.words()));
}

char* KeyTable::shard_records(std::uint32_t shard) const noexcept {
    return data_ + kTableHead + shards_ * kLockBytes + static_cast<std::uint64_t>(shard) * slots_ * record_;
}

KeyTable::Record& KeyTable::record_at(std::uint32_t shard, std::uint32_t slot) const noexcept {
    return *reinterpret_cast<Record*>(shard_records(shard) + slot * record_);
}

KeyTable::Key KeyTable::key_of(std::string_view key) const {
    const std::uint64_t seed = store_->segment().header().hash_seed;
    Key k;
    k.hash = hash_key(key, seed);
    if (key.size() <= kKeyBytes) {
        k.stored.assign(key);
    } else {
        // Two independent 64-bit hashes and the length stand for a long key.
        const std::uint64_t second = hash_key(key, seed ^ 0x9e3779b97f4a7c15ULL);
        const auto len = static_cast<std::uint64_t>(key.size());
        k.stored.resize(24);
        std::memcpy(k.stored.data(), &k.hash, 8);
        std::memcpy(k.stored.data() + 8, &second, 8);
        std::memcpy(k.stored.data() + 16, &len, 8);
        k.stored.insert(k.stored.begin(), '\xff'); // 25 bytes, flagged long by key_len
    }
    return k;
}

void KeyTable::init_record(Record& r, const Key& key, Nanos anchor) const {
    r.key_len = static_cast<std::uint32_t>(key.stored.size());
    r.hash = key.hash;
    r.anchor = anchor;
    r.touched.store(anchor);
    std::memcpy(r.key, key.stored.data(), key.stored.size());
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: {
        auto* w = reinterpret_cast<AtomicPair*>(r.words());
        const auto n = SlidingWindowShape::slots(tmpl_.params.values[2]) + 1;
        for (std::int64_t i = 0; i < n; ++i) {
            new (w + i) AtomicPair();
        }
        SlidingWindowState::init_storage(w, tmpl_.params.values[2]);
        break;
    }
    case Kind::Concurrency:
        for (std::size_t i = 0; i < entries_; ++i) {
            r.entry(i).tag.store(0);
            r.entry(i).count.store(0);
        }
        break;
    default: new (r.words()) AtomicPair(rule_->initial(anchor)); break;
    }
}

KeyTable::Record* KeyTable::find_locked(std::uint32_t shard, const Key& key, Nanos now, bool create) {
    const auto len = static_cast<std::uint32_t>(key.stored.size());
    Record* free = nullptr;
    const auto start = static_cast<std::uint32_t>((key.hash >> 8) % slots_);
    for (std::uint32_t i = 0; i < slots_; ++i) {
        Record& r = record_at(shard, (start + i) % slots_);
        const std::uint32_t used = r.used.load();
        if (used == 0) {
            if (free == nullptr) {
                free = &r;
            }
            break;
        }
        if (used != 1) {
            if (free == nullptr) {
                free = &r;
            }
            continue;
        }
        if (r.hash == key.hash && r.key_len == len && std::memcmp(r.key, key.stored.data(), len) == 0) {
            repair_locked(r, now);
            return &r;
        }
    }
    if (!create) {
        return nullptr;
    }
    if (free == nullptr || size() >= max_) {
        // Room from a key of this shard idle long enough.
        Record* idle = nullptr;
        for (std::uint32_t i = 0; i < slots_ && idle == nullptr; ++i) {
            Record& r = record_at(shard, i);
            if (r.used.load() == 1 && idle_locked(r, now)) {
                idle = &r;
            }
        }
        if (idle == nullptr) {
            return nullptr;
        }
        drop_locked(*idle);
        if (free == nullptr) {
            free = idle;
        }
    }
    // Written whole, then published by `used`, then counted: a process killed before the
    // publication leaves the slot free.
    init_record(*free, key, now);
    free->used.store(1);
    head_of(data_).size.fetch_add(1);
    return free;
}

void KeyTable::drop_locked(Record& r) noexcept {
    r.used.store(2);
    head_of(data_).size.fetch_sub(1);
}

void KeyTable::repair_locked(Record& r, Nanos now) const noexcept {
    if (tmpl_.params.kind == Kind::Concurrency) {
        return; // (its counts are read, and repaired, by held_locked)
    }
    bool damaged = r.anchor < 0 || r.anchor > kMaxTime;
    if (damaged) {
        r.anchor = now; // (its every index computed from it would overflow)
    }
    // (the state word's hint, a take's first guess, is set to the value checked when it differs)
    if (tmpl_.params.kind == Kind::SlidingWindow) {
        SlidingWindowState w = window_of(r);
        const Pair h = w.head->load();
        if (damaged || !w.head_sound(h)) {
            w.exhaust(now);
        } else if (!(w.head->hint() == h)) {
            w.head->rehint();
        }
        return;
    }
    AtomicPair& word = r.word();
    Pair s = word.load();
    if (damaged || rule_->damage(s, r.anchor) != nullptr) {
        while (!word.compare_exchange(s, rule_->exhausted(r.anchor, now))) {
        }
    } else if (!(word.hint() == s)) {
        word.rehint();
    }
}

std::int64_t KeyTable::held_locked(Record& r, Nanos mono_now, bool reclaim) const {
    Segment& seg = store_->segment();
    const std::int64_t limit = tmpl_.params.values[0];
    std::int64_t held = 0;
    for (std::size_t i = 0; i < entries_; ++i) {
        HolderEntry& e = r.entry(i);
        std::int64_t c = e.count.load();
        if (c == 0) {
            continue;
        }
        const std::uint64_t tag = e.tag.load();
        const auto holder = static_cast<std::uint32_t>((tag & 0xffffffffULL) - 1);
        const auto gen = static_cast<std::uint32_t>(tag >> 32);
        // A holder slot freed since (a new generation) held nothing more: cheap, checked always. Whether
        // a holder still running lives (/proc) only when asked to reclaim; a dead one's slot is reclaimed
        // whole (its named permits too), so that a holder whose slot is still its own always has its
        // entries (SharedLimiter's take-back relies on it).
        const bool stale = holder >= kMaxHolders || seg.holder_generation(holder) != gen;
        if (stale || (reclaim && holder_dead(seg.header().holders[holder], tmpl_.lease_ttl, mono_now) &&
                      (seg.reclaim_holder(holder, tmpl_.lease_ttl) || seg.holder_generation(holder) != gen))) {
            e.count.store(0);
            e.tag.store(0);
            continue;
        }
        if (c < 0 || c > limit) {
            // Damaged: what its holder really holds is unknown, so it counts as the whole limit until
            // that holder gives its permits back or is found dead (never a grant beyond the limit).
            c = limit;
            e.count.store(c);
        }
        held += c; // (at most kKeyHolders * kMaxPermits: no overflow)
    }
    return held;
}

bool KeyTable::idle_locked(Record& r, Nanos now) const {
    repair_locked(r, now); // (a damaged state is never judged idle on what it says)
    const Nanos limit = now - idle_;
    switch (tmpl_.params.kind) {
    case Kind::Concurrency: return held_locked(r, monotonic_now(), true) == 0 && r.touched.load() <= limit;
    case Kind::SlidingWindow: return window_of(r).full_at() <= limit;
    default: return rule_->full_at(r.word().load(), r.anchor) <= limit;
    }
}

bool KeyTable::take(const Key& key, std::int64_t n, Nanos now, std::int64_t& tag) {
    if (!releases_permits()) {
        return take_locked_kind(key, n, now, tag, Holding{});
    }
    // Pinned before the lock (it may reclaim dead holders), let go unless the take holds.
    Holding h;
    if (!store_->segment().pin(n, tmpl_.lease_ttl, h)) {
        return false;
    }
    if (take_locked_kind(key, n, now, tag, h)) {
        return true;
    }
    store_->segment().unpin(h, n);
    return false;
}

bool KeyTable::take_locked_kind(const Key& key, std::int64_t n, Nanos now, std::int64_t& tag, Holding h) {
    const std::uint32_t shard = shard_of(key);
    for (int attempt = 0; attempt < 2; ++attempt) {
        {
            RobustLock lock(lock_of(data_, shard));
            Record* r = find_locked(shard, key, now, true);
            if (r != nullptr) {
                switch (tmpl_.params.kind) {
                case Kind::SlidingWindow: {
                    auto st = window_of(*r);
                    return st.take(n, now, tag);
                }
                case Kind::Concurrency: {
                    const Nanos mono = monotonic_now();
                    Nanos last = last_reclaim_.load();
                    std::int64_t held = held_locked(*r, mono, false);
                    if (tmpl_.params.values[0] - held < n && mono - last >= kReclaimEvery &&
                        last_reclaim_.compare_exchange_strong(last, mono)) {
                        held = held_locked(*r, mono, true);
                    }
                    if (tmpl_.params.values[0] - held < n) {
                        return false;
                    }
                    HolderEntry* slot = entry_for_locked(*r, h, true);
                    if (slot == nullptr) {
                        return false; // kKeyHolders other processes hold this key's permits
                    }
                    slot->count.fetch_add(n);
                    tag = holder_tag(h.index, h.generation);
                    return true;
                }
                default: return detail::rule_take(*rule_, r->word(), r->anchor, n, now, tag);
                }
            }
        }
        if (attempt == 0) {
            evict_idle(); // the table is at its bound: idle keys of other shards make room
        }
    }
    return false;
}

KeyTable::HolderEntry* KeyTable::entry_for_locked(Record& r, Holding h, bool claim) const {
    const std::uint64_t mine = entry_tag(h.index, h.generation);
    for (std::size_t i = 0; i < entries_; ++i) {
        if (r.entry(i).tag.load() == mine) {
            return &r.entry(i);
        }
    }
    for (std::size_t i = 0; i < entries_; ++i) {
        if (r.entry(i).count.load() == 0) {
            if (claim) {
                r.entry(i).tag.store(mine);
            }
            return &r.entry(i);
        }
    }
    return nullptr;
}

bool KeyTable::reset(const Key& key, Nanos now) {
    if (releases_permits()) {
        return false;
    }
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, now, false);
    if (r == nullptr) {
        return false; // made full at its next request
    }
    // Every process reads the record's anchor and words under this lock: they change together. A
    // process killed halfway leaves a record repair_locked() mends to the safe side.
    init_record(*r, key, sat_add(now, 1));
    return true;
}

bool KeyTable::give_back(const Key& key, std::int64_t n, std::int64_t tag, Nanos now) {
    return give_back_count(key, n, tag, now) > 0;
}

bool KeyTable::still_held(const Key& /*key*/, std::int64_t tag, std::int64_t /*permits*/) {
    // A key's entries of a holder are cleared only with its slot (held_locked reclaims it whole):
    // while the slot is this holding's, the entries are there. No shard lock on a release's way.
    return store_->segment().holds(holding_of(tag));
}

bool KeyTable::let_go(const Key& key, std::int64_t tag, std::int64_t permits, Nanos now) {
    const std::int64_t given = give_back_count(key, permits, tag, now);
    // The rest's uses of the slot: their entry was cleared without them (still ours, or unpin does nothing).
    store_->segment().unpin(holding_of(tag), permits - given);
    return given > 0;
}

void KeyTable::note_lost(std::int64_t leases) noexcept {
    lost_leases_.fetch_add(leases);
    store_->note_lost();
}

std::int64_t KeyTable::give_back_count(const Key& key, std::int64_t n, std::int64_t tag, Nanos now) {
    const std::uint32_t shard = shard_of(key);
    const Holding h = holding_of(tag);
    if (releases_permits() && !store_->segment().holds(h)) {
        return 0; // a forked child's copy of the parent's lease, or reclaimed meanwhile
    }
    std::int64_t given = 0;
    {
        RobustLock lock(lock_of(data_, shard));
        Record* r = find_locked(shard, key, now, false);
        if (r == nullptr) {
            return 0; // evicted: nothing of it is held (and its holder's uses went with a reclaim)
        }
        switch (tmpl_.params.kind) {
        case Kind::SlidingWindow: {
            window_of(*r).give_back(n, tag, now);
            return 0;
        }
        case Kind::Concurrency: {
            const std::uint64_t mine = entry_tag(h.index, h.generation);
            for (std::size_t i = 0; i < entries_ && given == 0; ++i) {
                HolderEntry& e = r->entry(i);
                if (e.tag.load() == mine) {
                    given = std::max<std::int64_t>(std::min(n, e.count.load()), 0);
                    e.count.fetch_sub(given);
                    if (given > 0 && held_locked(*r, 0, false) == 0) {
                        r->touched.store(now);
                    }
                    break;
                }
            }
            break;
        }
        default: detail::rule_give_back(*rule_, r->word(), r->anchor, n, tag, now); return 0;
        }
    }
    store_->segment().unpin(h, given); // (after the entry: the slot is freed only once it holds nothing)
    return given;
}

bool KeyTable::no_room(const Key& key) {
    const std::uint32_t shard = shard_of(key);
    const Nanos now = store_->now();
    {
        RobustLock lock(lock_of(data_, shard));
        if (find_locked(shard, key, now, true) != nullptr) {
            return false;
        }
    }
    evict_idle(); // idle keys of other shards make room
    RobustLock lock(lock_of(data_, shard));
    return find_locked(shard, key, now, true) == nullptr;
}

std::int64_t KeyTable::available(const Key& key, Nanos now) {
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, now, false);
    const auto& v = tmpl_.params.values;
    if (r == nullptr) {
        return size() < max_ ? v[0] : 0; // a new key: its full limit, if there is room for it
    }
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: return window_of(*r).available_at(now);
    case Kind::Concurrency: return std::max<std::int64_t>(v[0] - held_locked(*r, 0, false), 0); // (damaged counts)
    default: return rule_->available(r->word().load(), r->anchor, now);
    }
}

Nanos KeyTable::time_until(const Key& key, std::int64_t needed, Nanos now) {
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, now, false);
    const auto& v = tmpl_.params.values;
    if (r == nullptr) {
        return needed <= v[0] ? 0 : kNever;
    }
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: return window_of(*r).time_until(needed, now);
    case Kind::Concurrency: {
        if (v[0] - held_locked(*r, 0, false) < needed) {
            return kNever;
        }
        // Permits are free, but a process can take them only with a holder slot and an entry of its own.
        Segment& seg = store_->segment();
        Holding h;
        if (!seg.current(h)) {
            if (!seg.slot_available()) {
                return kNever;
            }
            h = Holding{static_cast<std::uint32_t>(kMaxHolders), 0}; // matches no entry: a free one is needed
        }
        if (entry_for_locked(*r, h, false) != nullptr) {
            return 0;
        }
        return kNever; // kKeyHolders other processes hold this key: only a release makes room
    }
    default: return rule_->time_until(r->word().load(), r->anchor, needed, now);
    }
}

Nanos KeyTable::full_at(const Key& key) {
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    const Nanos now = store_->now();
    Record* r = find_locked(shard, key, now, false);
    if (r == nullptr) {
        return now;
    }
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: return window_of(*r).full_at();
    case Kind::Concurrency: return held_locked(*r, 0, false) == 0 ? r->touched.load() : kNever;
    default: return rule_->full_at(r->word().load(), r->anchor);
    }
}

std::unique_ptr<Projection> KeyTable::project(const Key& key) {
    if (releases_permits()) {
        return nullptr;
    }
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    const Nanos now = store_->now();
    Record* r = find_locked(shard, key, now, true);
    const auto& v = tmpl_.params.values;
    if (tmpl_.params.kind == Kind::SlidingWindow) {
        if (r == nullptr) {
            // No room for the key: a fresh window's projection (its own storage, as a new key's).
            auto words = std::make_unique<AtomicPair[]>(static_cast<std::size_t>(SlidingWindowShape::slots(v[2])) + 1);
            SlidingWindowState::init_storage(words.get(), v[2]);
            return SlidingWindowState::over(v[0], v[1], v[2], now, words.get()).project();
        }
        return window_of(*r).project();
    }
    if (r == nullptr) {
        return rule_->project(rule_->initial(now), now);
    }
    return rule_->project(r->word().load(), r->anchor);
}

bool KeyTable::reclaim(const Key& key) {
    if (!releases_permits()) {
        return false;
    }
    const Nanos mono = monotonic_now();
    Nanos last = last_reclaim_.load();
    if (mono - last < kReclaimEvery || !last_reclaim_.compare_exchange_strong(last, mono)) {
        return false;
    }
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, store_->now(), false);
    if (r == nullptr) {
        return false;
    }
    const std::int64_t before = held_locked(*r, mono, false);
    return held_locked(*r, mono, true) < before;
}

Reason KeyTable::refusal(const Key& key, std::int64_t n) {
    if (!releases_permits()) {
        return Reason::LimitReached;
    }
    const Nanos now = store_->now();
    return available(key, now) >= n && time_until(key, n, now) == kNever ? Reason::ProcessLimit : Reason::LimitReached;
}

std::int64_t KeyTable::evict_idle() {
    const Nanos now = store_->now();
    std::int64_t evicted = 0;
    for (std::uint32_t s = 0; s < shards_; ++s) {
        RobustLock lock(lock_of(data_, s));
        for (std::uint32_t i = 0; i < slots_; ++i) {
            Record& r = record_at(s, i);
            if (r.used.load() == 1 && idle_locked(r, now)) {
                drop_locked(r);
                ++evicted;
            }
        }
    }
    return evicted;
}

std::shared_ptr<SharedLimiter> KeyTable::limiter_for(std::string_view key) {
    return std::make_shared<KeyLimiter>(shared_from_this(), key_of(key), tmpl_.params.values[0]);
}

} // namespace permits::shm

#endif // __linux__
