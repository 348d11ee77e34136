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
#include "shm_table_layout.hpp"

namespace permits::shm {

using namespace table_layout;

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

SlidingWindowState KeyTable::window_of(Record& r, std::int64_t limit) const noexcept {
    const auto& v = tmpl_.params.values;
    return SlidingWindowState::over(limit, v[1], v[2], r.anchor, reinterpret_cast<AtomicPair*>(r.words()));
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
    // Checked against the highest limit the keys had (a limit lowered keeps what was taken); a state
    // beyond it while another process has changed the amounts since this one took them on may be
    // counted under a higher one: judged once this process has taken it on (meanwhile a count
    // beyond this process's limit grants nothing).
    const auto newer = [&] { return slot_->generation.load(std::memory_order_acquire) != seen_.load(); };
    if (tmpl_.params.kind == Kind::SlidingWindow) {
        SlidingWindowState w = window_of(r, highest_.load());
        const Pair h = w.head->load();
        if (damaged || (!w.head_sound(h) && !newer())) {
            w.exhaust(now);
        } else if (!(w.head->hint() == h)) {
            w.head->rehint();
        }
        return;
    }
    AtomicPair& word = r.word();
    Pair s = word.load();
    if (damaged || (most_->damage(s, r.anchor) != nullptr && !newer())) {
        while (!word.compare_exchange(s, most_->exhausted(r.anchor, now))) {
        }
    } else if (!(word.hint() == s)) {
        word.rehint();
    }
}

std::int64_t KeyTable::held_locked(Record& r, Nanos mono_now, bool reclaim) const {
    Segment& seg = store_->segment();
    const std::int64_t most = highest_.load(); // (a holder may hold up to the highest limit the keys had)
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
        if (c < 0 || c > most) {
            // Damaged: what its holder really holds is unknown, so it counts as the whole limit until
            // that holder gives its permits back or is found dead (never a grant beyond the limit).
            c = most;
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
    catch_up();
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
                    if (limit() - held < n && mono - last >= kReclaimEvery &&
                        last_reclaim_.compare_exchange_strong(last, mono)) {
                        held = held_locked(*r, mono, true);
                    }
                    if (limit() - held < n) {
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
    catch_up();
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
    catch_up();
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
    catch_up();
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
    catch_up();
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, now, false);
    const std::int64_t limit = this->limit();
    if (r == nullptr) {
        return size() < max_ ? limit : 0; // a new key: its full limit, if there is room for it
    }
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: return window_of(*r).available_at(now);
    case Kind::Concurrency: return std::max<std::int64_t>(limit - held_locked(*r, 0, false), 0); // (damaged counts)
    default: return rule_->available(r->word().load(), r->anchor, now);
    }
}

Nanos KeyTable::time_until(const Key& key, std::int64_t needed, Nanos now) {
    catch_up();
    const std::uint32_t shard = shard_of(key);
    RobustLock lock(lock_of(data_, shard));
    Record* r = find_locked(shard, key, now, false);
    const std::int64_t limit = this->limit();
    if (r == nullptr) {
        return needed <= limit ? 0 : kNever;
    }
    switch (tmpl_.params.kind) {
    case Kind::SlidingWindow: return window_of(*r).time_until(needed, now);
    case Kind::Concurrency: {
        if (limit - held_locked(*r, 0, false) < needed) {
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
    catch_up();
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
    catch_up();
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
            return SlidingWindowState::over(limit(), v[1], v[2], now, words.get()).project();
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
    catch_up();
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

} // namespace permits::shm

#endif // __linux__
