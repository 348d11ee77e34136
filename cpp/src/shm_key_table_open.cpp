// A per-key table opened: made in the segment or checked against what its opener asks for, its
// census for an inspector, and this process's side of it, on the keys' amounts as they hold now.
#include "permits/shm_key_table.hpp"

#if defined(__linux__)

#include <string>

#include "permits/concurrency.hpp"
#include "shm_table_layout.hpp"

namespace permits::shm {

using namespace table_layout;

namespace {
/// The keys' parameters the table was made with (its records' size: a concurrency key's holder
/// entries), whatever this opener's own limit.
Params made_params(const KeyTable::Template& tmpl, const NamedSlot& slot) {
    Params made = tmpl.params;
    made.values[0] = slot.values[1];
    return made;
}
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
    std::copy(v + 1, v + 4, c.live);
    // (read only: AmountBanks' words are written by publish_amounts alone)
    auto& writable = const_cast<TableHead&>(head); // NOLINT(cppcoreguidelines-pro-type-const-cast)
    std::int64_t a[2] = {};
    const AmountBanks banks{&slot.generation, v + 1, writable.odd, writable.even, &writable.highest};
    if (live_amounts(banks, a) != 0) {
        put_amounts(keys.kind, c.live, a);
    }
    c.bytes_per_key = record;
    if (keys.kind != Kind::Concurrency) {
        return c;
    }
    c.held.assign(kMaxHolders, 0);
    const std::int64_t most = highest_of(banks); // (a holder may hold up to the highest limit the keys had)
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
            c.held[holder] += count < 0 || count > most ? most : count; // (a damaged count: the whole limit)
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
    // A concurrency key's record has room for as many holders as the limit the table was made with:
    // once a process changed the limit, a later opener's own limit sizes nothing.
    Params made = tmpl.params;
    if (const NamedSlot* existing = store->segment().find(name);
        existing != nullptr && existing->kind == Kind::KeyTable && existing->generation.load() != 0 &&
        existing->values[0] == static_cast<std::int64_t>(made.kind) && made.kind == Kind::Concurrency) {
        made.values[0] = existing->values[1];
    }
    const std::uint64_t record = record_bytes(made);
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
    return std::make_shared<KeyTable>(store, slot, tmpl, max_partitions, idle_timeout);
}

KeyTable::KeyTable(std::shared_ptr<Store> store, NamedSlot& slot, const Template& tmpl, std::int64_t max_partitions,
                   Nanos idle_timeout)
    : store_(std::move(store)), slot_(&slot), data_(store_->segment().at<char>(slot.offset)), tmpl_(tmpl),
      max_(max_partitions), idle_(idle_timeout), record_(record_bytes(made_params(tmpl, slot))),
      entries_(entries_of(made_params(tmpl, slot))) {
    // The geometry as this process computes it (open() checked the segment's against it): what
    // the segment says is never what bounds an index.
    geometry(max_partitions, shards_, slots_);
    auto& v = tmpl_.params.values;
    // The keys' amounts as the table holds them, once a process reconfigured them (open() let
    // this process's own differ then).
    std::int64_t a[2] = {};
    const std::uint32_t generation = live_amounts(banks(), a);
    if (generation != 0) {
        put_amounts(tmpl_.params.kind, v, a);
    }
    rule_ = checked_rule_of(tmpl_.params.kind, v);
    const std::int64_t highest = std::max(highest_of(banks()), v[0]);
    if (rule_) {
        std::int64_t most[3] = {highest, v[1], v[2]};
        most_ = rule_of(tmpl_.params.kind, most);
    }
    limit_.store(v[0]);
    highest_.store(highest);
    seen_.store(generation);
}

} // namespace permits::shm

#endif // __linux__
