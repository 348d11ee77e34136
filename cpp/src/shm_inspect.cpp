#include "permits/shm_inspect.hpp"

#if defined(__linux__)

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_limiters.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

namespace permits::shm {

namespace {

constexpr Nanos kMs = 1000000;
constexpr Nanos kDefaultTtl = 60000 * kMs; // SharedMemoryStore's default lease_ttl

/// A limiter kind's parameters as its slot stores them (shm_limiters.cpp's params_of).
struct Shape {
    std::uint32_t count = 0;
    const char* names[3] = {};
    std::uint32_t durations = 0; ///< bit i: value i is in nanoseconds
};

Shape shape_of(Kind kind) {
    switch (kind) {
    case Kind::TokenBucket: return {3, {"token_limit", "tokens_per_period", "replenishment_period"}, 1U << 2};
    case Kind::FixedWindow:
    case Kind::SlidingWindowCounter: return {2, {"permit_limit", "window"}, 1U << 1};
    case Kind::SlidingWindow: return {3, {"permit_limit", "window", "segments_per_window"}, 1U << 1};
    case Kind::Concurrency: return {2, {"permit_limit", "lease_ttl"}, 1U << 1};
    default: return {};
    }
}

/// A sliding window whose segments are below zero is the sliding log (specs.SlidingLog): its kind
/// and parameters as users know them.
bool is_log(Kind kind, std::int64_t segments) {
    return kind == Kind::SlidingWindow && segments < 0;
}
Shape shape_of(Kind kind, std::int64_t segments) {
    Shape shape = shape_of(kind);
    if (is_log(kind, segments)) {
        shape.count = 2; // permit_limit, window
    }
    return shape;
}

void add_params(SlotInfo& info, const Shape& shape, const std::int64_t* values) {
    for (std::uint32_t i = 0; i < shape.count; ++i) {
        info.params.push_back({shape.names[i], values[i], ((shape.durations >> i) & 1U) != 0});
    }
}

/// What is wrong with where `slot` says its data lies; empty when nothing is (named()'s checks).
std::string placement_damage(const Segment& seg, const NamedSlot& slot, std::uint32_t count) {
    const Header& h = seg.header();
    if (slot.count != count) {
        return "its slot stores " + std::to_string(slot.count) + " parameters, not " + std::to_string(count);
    }
    if (slot.offset < h.arena_offset || slot.offset > seg.size() || slot.bytes > seg.size() - slot.offset ||
        slot.offset % 64 != 0) {
        return "its slot's sizes do not add up";
    }
    if (slot.anchor < 0 || slot.anchor > kMaxTime) {
        return "its slot's anchor, " + std::to_string(slot.anchor) + " ns, is outside time";
    }
    return {};
}

HolderInfo holder_info(const Segment& seg, std::uint32_t index, std::int64_t permits, Nanos ttl, Nanos mono,
                       std::uint64_t our_ns) {
    const HolderSlot& slot = seg.header().holders[index];
    HolderInfo info;
    info.index = index;
    const std::uint64_t tag = slot.tag();
    info.pid = tag & 0xffffffffULL;
    info.permits = permits;
    info.alive = !holder_dead(slot, ttl, mono);
    if (slot.tag() != tag) {
        info.pid = 0; // freed or taken again while judged (holder_dead reads the tag anew): left out
    }
    info.same_namespace = our_ns == 0 || slot.pid_ns.load() == 0 || slot.pid_ns.load() == our_ns;
    return info;
}

/// Lists a holder unless its slot was freed while it was read (pid 0): it has let go of its permits.
void add_holder(std::vector<HolderInfo>& holders, const HolderInfo& holder) {
    if (holder.pid != 0) {
        holders.push_back(holder);
    }
}

/// The time-based kinds: a Rule over the slot's one state word.
/// (`rule` holds now; `most`, the same with the highest limit the slot had, reads the state for damage.)
template <class R>
void read_rule(const Segment& seg, const NamedSlot& slot, const R& rule, const R& most, std::optional<Nanos> now,
               SlotInfo& info) {
    if (slot.bytes != sizeof(AtomicPair)) {
        info.damage = "its slot's sizes do not add up";
        return;
    }
    const Pair s = seg.at<AtomicPair>(slot.offset)->load();
    if (const char* what = most.damage(s, slot.anchor)) {
        info.damage = "its state {" + std::to_string(s.a) + ", " + std::to_string(s.b) + "}: " + what;
        return;
    }
    if (now) {
        info.available = rule.available(s, slot.anchor, *now);
    }
}

void read_sliding(const Segment& seg, const NamedSlot& slot, const std::int64_t* v, std::int64_t highest,
                  std::optional<Nanos> now, SlotInfo& info) {
    SlidingWindowState::check(v[0], v[1], v[2]);
    if (slot.bytes != (static_cast<std::uint64_t>(SlidingWindowShape::slots(v[2])) + 1) * sizeof(AtomicPair)) {
        info.damage = "its slot's sizes do not add up";
        return;
    }
    auto* words = seg.at<AtomicPair>(slot.offset);
    if (std::string what = SlidingWindowState::over(highest, v[1], v[2], slot.anchor, words).damage(); !what.empty()) {
        info.damage = std::move(what);
        return;
    }
    if (now) {
        info.available = SlidingWindowState::over(v[0], v[1], v[2], slot.anchor, words).available_at(*now);
    }
}

void read_concurrency(const Segment& seg, const NamedSlot& slot, Nanos mono, std::uint64_t our_ns, SlotInfo& info) {
    (void)ConcurrencyRule(slot.values[0]);
    if (slot.values[1] < kMs) {
        throw std::invalid_argument("its lease_ttl is below a millisecond");
    }
    if (slot.bytes != ConcurrencyView::bytes()) {
        info.damage = "its slot's sizes do not add up";
        return;
    }
    std::int64_t available = 0;
    std::vector<std::int64_t> held(kMaxHolders);
    // (read only: a look settles nothing)
    const ConcurrencyView view = ConcurrencyView::over(seg.at<char>(slot.offset), slot.values[0],
                                                       const_cast<NamedSlot*>(&slot)); // NOLINT
    view.peek(available, held.data());
    // The limit now (as reconfigured); a holder may hold up to the highest it had, and below zero
    // are available while more are held than a lowered limit.
    const std::int64_t limit = view.limit_now();
    const std::int64_t most = view.highest();
    (void)ConcurrencyRule(limit);
    if (available < limit - most || available > limit) {
        info.damage = "its state says " + std::to_string(available) + " permits available, not between " +
                      std::to_string(limit - most) + " and its limit of " + std::to_string(limit);
        return;
    }
    for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
        if (held[i] < 0 || held[i] > most) {
            info.damage = "its ledger says holder " + std::to_string(i) + " holds " + std::to_string(held[i]) +
                          " permits, not between 0 and its limit of " + std::to_string(most);
            info.holders.clear();
            return;
        }
        if (held[i] > 0) {
            add_holder(info.holders, holder_info(seg, i, held[i], slot.values[1], mono, our_ns));
        }
    }
    info.available = std::max<std::int64_t>(available, 0); // (below zero: more held than a lowered limit)
}

void read_table(const Segment& seg, const NamedSlot& slot, Nanos mono, std::uint64_t our_ns, SlotInfo& info) {
    const std::int64_t* v = slot.values;
    const auto keys = static_cast<Kind>(v[0]);
    const Shape shape = shape_of(keys, v[3]);
    info.key_kind = is_log(keys, v[3]) ? "sliding_log" : kind_name(keys);
    const KeyTable::Census census = KeyTable::census(seg, slot);
    if (!census.damage.empty()) {
        info.damage = census.damage;
        return;
    }
    add_params(info, shape, census.live); // (the amounts as they hold now)
    info.params.push_back({"max_partitions", v[4], false});
    info.params.push_back({"idle_timeout", v[5], true});
    info.limit = census.live[0];
    info.keys = census.keys;
    for (std::uint32_t i = 0; i < census.held.size(); ++i) {
        if (census.held[i] > 0) {
            add_holder(info.holders, holder_info(seg, i, census.held[i], v[2], mono, our_ns));
        }
    }
}

SlotInfo read_slot(const Segment& seg, const NamedSlot& slot, std::optional<Nanos> now, Nanos mono,
                   std::uint64_t our_ns) {
    SlotInfo info;
    info.name.assign(slot.name, ::strnlen(slot.name, kNameBytes));
    info.kind = kind_name(slot.kind);
    info.bytes = slot.bytes;
    std::int64_t live[8] = {}; // the parameters as they hold now (reconfigured amounts)
    std::int64_t highest = 0;
    live_values(slot, live, highest);
    const std::int64_t* v = live;
    const std::uint32_t count = slot.kind == Kind::KeyTable ? 6 : shape_of(slot.kind).count;
    if (count == 0) {
        info.damage = "its kind, " + std::to_string(static_cast<std::uint32_t>(slot.kind)) + ", is no limiter's";
        return info;
    }
    if (std::string where = placement_damage(seg, slot, count); !where.empty()) {
        info.damage = std::move(where);
        return info;
    }
    try {
        switch (slot.kind) {
        case Kind::TokenBucket:
            read_rule(seg, slot, TokenBucketRule(v[0], v[1], v[2]), TokenBucketRule(highest, v[1], v[2]), now, info);
            break;
        case Kind::FixedWindow:
            read_rule(seg, slot, FixedWindowRule(v[0], v[1]), FixedWindowRule(highest, v[1]), now, info);
            break;
        case Kind::SlidingWindowCounter:
            read_rule(seg, slot, SlidingWindowCounterRule(v[0], v[1]), SlidingWindowCounterRule(highest, v[1]), now,
                      info);
            break;
        case Kind::SlidingWindow: read_sliding(seg, slot, v, highest, now, info); break;
        case Kind::Concurrency: read_concurrency(seg, slot, mono, our_ns, info); break;
        default: read_table(seg, slot, mono, our_ns, info); return info;
        }
    } catch (const std::invalid_argument& e) {
        // (parameters no limiter could have been made with: the constructors' own message)
        info.damage = std::string("its parameters: ") + e.what();
    }
    if (info.damage.empty()) {
        if (is_log(slot.kind, v[2])) {
            info.kind = "sliding_log";
        }
        add_params(info, shape_of(slot.kind, v[2]), v);
        info.limit = v[0];
    } else {
        info.available.reset();
    }
    return info;
}

} // namespace

std::string kind_name(Kind kind) {
    switch (kind) {
    case Kind::TokenBucket: return "token_bucket";
    case Kind::FixedWindow: return "fixed_window";
    case Kind::SlidingWindow: return "sliding_window";
    case Kind::SlidingWindowCounter: return "sliding_window_counter";
    case Kind::Concurrency: return "concurrency";
    case Kind::KeyTable: return "partitioned";
    default: return "kind " + std::to_string(static_cast<std::uint32_t>(kind));
    }
}

SegmentInfo describe(const std::string& name, std::optional<Nanos> now) {
    const std::shared_ptr<Segment> seg = Segment::inspect(name);
    const Header& h = seg->header();
    SegmentInfo info;
    info.name = name;
    info.size = seg->size();
    info.capacity = h.capacity;
    info.arena_bytes = h.arena_bytes;
    info.used_bytes = h.arena_used;
    info.clock = h.clock;
    info.holder_slots = static_cast<std::int64_t>(kMaxHolders);
    const Nanos mono = monotonic_now();
    if (!now && h.clock == ClockKind::Monotonic) {
        now = mono; // the real clock of store limiters: CLOCK_MONOTONIC itself
    }
    const std::uint64_t our_ns = ProcessId::self().pid_ns;
    // A holder of the segment is judged with the longest lease_ttl any of its limiters has: dead
    // only when every one of them would judge it so.
    Nanos ttl = 0;
    for (const NamedSlot& slot : h.named) {
        if (slot.ready.load() != 1) {
            continue;
        }
        info.slots.push_back(read_slot(*seg, slot, now, mono, our_ns));
        const SlotInfo& s = info.slots.back();
        if (s.damage.empty() && (s.kind == "concurrency" || s.key_kind == "concurrency")) {
            ttl = std::max(ttl, slot.values[slot.kind == Kind::KeyTable ? 2 : 1]);
        }
    }
    for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
        const Pair word = h.holders[i].word.load();
        if ((static_cast<std::uint64_t>(word.a) & 0xffffffffULL) != 0) {
            add_holder(info.holders, holder_info(*seg, i, word.b, ttl == 0 ? kDefaultTtl : ttl, mono, our_ns));
        }
    }
    return info;
}

} // namespace permits::shm

#endif // __linux__
