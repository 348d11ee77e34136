#include "permits/sliding_window.hpp"

#include "sliding_log.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace permits {

namespace {
constexpr std::int64_t kMaxSegments = 65536;

using sliding::current_of;
using sliding::older_of;
using sliding::pack;

// The arithmetic every sliding window's state shares, whatever keeps its counts: `before(j)` is the
// count of segment j for h.a - segments < j < h.a, j >= 0 (a segment before the head still in its
// window); the head's own count is in h. SlidingWindowState reads its lock-free ring,
// CompactSlidingWindow a per-key record's 32-bit counts: the same code decides for both.

/// Permits taken in segment j, as seen with head h.
template <class Before> std::int64_t count_with(const SlidingWindowShape& w, Pair h, std::int64_t j, Before before) {
    if (j == h.a) {
        return current_of(h);
    }
    if (j > h.a || j < 0 || j <= h.a - w.segments) {
        return 0;
    }
    return before(j);
}

/// Permits held in the window ending with segment p (>= h.a).
template <class Before> std::int64_t used_with(const SlidingWindowShape& w, Pair h, std::int64_t p, Before before) {
    if (p == h.a) {
        return older_of(h) + current_of(h);
    }
    // The window ending with segment p holds segments p-S+1 .. p.
    std::int64_t used = 0;
    const std::int64_t first = std::max<std::int64_t>(p - w.segments + 1, 0);
    if (h.a >= first) {
        used += current_of(h);
    }
    for (std::int64_t j = std::max(first, h.a - w.segments + 1); j <= std::min(h.a - 1, p); ++j) {
        used += before(j);
    }
    return used;
}

template <class Before>
Nanos time_until_with(const SlidingWindowShape& w, Pair h, std::int64_t needed, Nanos now, Before before) {
    const std::int64_t p = std::max(w.segment_index(now), h.a);
    std::int64_t available = w.limit - used_with(w, h, p, before);
    if (available >= needed) {
        return 0;
    }
    if (p == h.a) {
        // The walk starts from the segments' own counts, as a take in every later segment reads them:
        // the head's sum of the older ones (what a take within its segment reads) can say less than
        // they do (a refund that raced an archive, or a damaged shared ring), and a walk from it
        // would free what it never counted.
        std::int64_t counted = 0;
        for (std::int64_t j = std::max<std::int64_t>(p - w.segments + 1, 0); j <= p; ++j) {
            counted += count_with(w, h, j, before);
        }
        available = std::min(available, w.limit - counted);
    }
    // Walk forward: at the start of segment p+i, segment p+i-S expires and frees its permits.
    for (std::int64_t i = 1; i <= w.segments; ++i) {
        available += count_with(w, h, p + i - w.segments, before);
        if (available >= needed) {
            const Nanos at = w.segment_start(p + i);
            return at == kNever ? kNever : std::max<Nanos>(0, at - now);
        }
    }
    // More than a window's worth (requests queued ahead): whole windows more.
    const Nanos at = w.segment_start(p + w.segments * (1 + ceil_div(needed - w.limit, w.limit)));
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

template <class Before> Nanos full_at_with(const SlidingWindowShape& w, Pair h, Before before) {
    // The last segment that took permits frees them `segments` segments later.
    std::int64_t last = -1;
    if (current_of(h) > 0) {
        last = h.a;
    } else {
        for (std::int64_t j = h.a - 1; j >= std::max<std::int64_t>(0, h.a - w.segments + 1); --j) {
            if (before(j) > 0) {
                last = j;
                break;
            }
        }
    }
    // Nothing held in the window: full since the head's segment began (a refund may have emptied
    // it; before any grant the head is segment 0, the anchor).
    return last < 0 ? w.segment_start(h.a) : w.segment_start(last + w.segments);
}

/// The state with head h given back n permits taken in the segment starting at `tag`: only the
/// current segment's count can be (the head's, at `now`; of this state's segments, not of one made
/// before it); false when nothing changes.
bool give_back_to(const SlidingWindowShape& w, Pair h, std::int64_t n, std::int64_t tag, Nanos now, Pair& next) {
    const std::int64_t current = w.segment_index(now);
    if (w.segment_of(h.a) != current || period_tag(w.anchor, current, w.segment) != tag) {
        return false;
    }
    next = Pair{h.a, pack(std::max<std::int64_t>(0, current_of(h) - n), older_of(h))};
    return true;
}

struct SlidingWindowProj final : Projection {
    const SlidingWindowShape sw;         // a copy: a per-key state lives only as long as its call
    i128 head;                           // latest segment with a grant in the projection
    std::map<i128, std::int64_t> counts; // permits per segment, for the segments still in a window

    template <class Before> SlidingWindowProj(const SlidingWindowShape& s, Pair h, Before before) : sw(s), head(h.a) {
        for (std::int64_t j = std::max<std::int64_t>(0, h.a - s.segments + 1); j <= h.a; ++j) {
            if (const std::int64_t c = count_with(s, h, j, before); c > 0) {
                counts[j] = c;
            }
        }
    }
    i128 used(i128 p) const {
        i128 sum = 0;
        for (auto it = counts.upper_bound(p - sw.segments); it != counts.end() && it->first <= p; ++it) {
            sum += it->second;
        }
        return sum;
    }
    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        const i128 now_p = not_before <= sw.anchor ? 0 : (not_before - sw.anchor) / sw.segment;
        i128 p = std::max(now_p, head);
        i128 at = not_before;
        if (sw.limit.get() - used(p) < need) {
            // Walk forward: each segment start frees the segment leaving the window.
            do {
                ++p;
            } while (sw.limit.get() - used(p) < need);
            at = static_cast<i128>(sw.anchor) + p * sw.segment;
        }
        if (apply && n > 0) {
            counts[p] += n;
            head = p;
            counts.erase(counts.begin(), counts.upper_bound(p - sw.segments));
        }
        return at;
    }
};
} // namespace

void SlidingWindowState::check(std::int64_t permit_limit, Nanos window, std::int64_t segments) {
    detail::check_limit("permit_limit", permit_limit);
    if (segments < 0) {
        // The log: k segments of window / k, rounded up, and one more (sliding_log.hpp says why
        // it needs (k - 1) * segment < window: a window of at least k * k ns).
        const std::int64_t k = -segments;
        if (k >= kMaxSegments) {
            throw std::invalid_argument("segmentsper_window must be between 1 and 65535");
        }
        if (window < 1 || window / k < k) {
            throw std::invalid_argument("window must be at least " + std::to_string(k * k) + " nanoseconds");
        }
        return;
    }
    if (segments < 1 || segments > kMaxSegments) {
        throw std::invalid_argument("segmentsper_window must be between 1 and 65536");
    }
    if (window < 1 || window / segments < 1) {
        throw std::invalid_argument("window must be at least segmentsper_window nanoseconds");
    }
}

void SlidingWindowState::init_storage(AtomicPair* words, std::int64_t segments_given) {
    const std::int64_t segments = slots(segments_given);
    Pair head = words[0].load();
    words[0].compare_exchange(head, Pair{0, 0});
    // Slot j holds segment j's count; mark every slot as "a segment long before the anchor".
    for (std::int64_t j = 1; j <= segments; ++j) {
        Pair empty = words[j].load();
        words[j].compare_exchange(empty, Pair{-1 - segments, 0});
    }
}

SlidingWindowShape SlidingWindowShape::of(std::int64_t permit_limit, Nanos window, std::int64_t segments,
                                          Nanos anchor) noexcept {
    if (segments < 0) {
        return {permit_limit, window, 1 - segments, ceil_div(window, -segments), anchor, true};
    }
    return {permit_limit, window, segments, segments > 0 ? window / segments : 0, anchor, false};
}

SlidingWindowState SlidingWindowState::over(std::int64_t permit_limit, Nanos window, std::int64_t segments,
                                            Nanos anchor, AtomicPair* words) noexcept {
    return {SlidingWindowShape::of(permit_limit, window, segments, anchor), words, words + 1};
}

SlidingWindow::SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window,
                             std::int64_t segments, QueueOptions queue, bool manual)
    : Limiter(std::move(clock), permit_limit, queue, manual) {
    SlidingWindowState::check(permit_limit, window, segments);
    own_ = std::make_unique<AtomicPair[]>(static_cast<std::size_t>(SlidingWindowShape::slots(segments)) + 1);
    SlidingWindowState::init_storage(own_.get(), segments);
    st_ = SlidingWindowState::over(permit_limit, window, segments, state_now(), own_.get());
}

SlidingWindow::SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window,
                             std::int64_t segments, QueueOptions queue, const ExternalState& external)
    : Limiter(std::move(clock), permit_limit, queue, false), keep_alive_(external.keep_alive) {
    SlidingWindowState::check(permit_limit, window, segments);
    st_ = SlidingWindowState::over(permit_limit, window, segments, external.anchor, external.word);
}

SlidingWindow::SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window,
                             std::int64_t segments, QueueOptions queue, Nanos anchor, Pair head,
                             const std::vector<Pair>& entries)
    : Limiter(std::move(clock), permit_limit, queue, false) {
    SlidingWindowState::check(permit_limit, window, segments);
    own_ = std::make_unique<AtomicPair[]>(static_cast<std::size_t>(SlidingWindowShape::slots(segments)) + 1);
    SlidingWindowState::init_storage(own_.get(), segments);
    st_ = SlidingWindowState::over(permit_limit, window, segments, anchor, own_.get());
    Pair empty = st_.head->load();
    st_.head->compare_exchange(empty, head);
    for (const Pair e : entries) {
        AtomicPair& slot = st_.ring[st_.segment_of(e.a) % st_.segments];
        Pair r = slot.load();
        slot.compare_exchange(r, e);
    }
}

void SlidingWindow::reconfigure(std::int64_t permit_limit, Nanos window, std::int64_t segments, QueueOptions queue) {
    SlidingWindowState::check(permit_limit, window, segments);
    if (window != st_.window || SlidingWindowShape::slots(segments) != st_.segments || (segments < 0) != st_.stamped) {
        throw std::invalid_argument("a limiter keeps its window and its segments");
    }
    // The counts are kept as they are: each is read against the limit of the moment (a count over a
    // lower limit reads as that limit: its segment has no room while it is in the window).
    const std::int64_t amounts[2] = {permit_limit, 0};
    reconfigure_with(
        permit_limit, queue, [&] { st_.limit.set(permit_limit); }, amounts);
}

void SlidingWindow::take_on(std::int64_t permit_limit) {
    apply_change(permit_limit, queue_options(), [&] { st_.limit.set(permit_limit); });
}

Nanos SlidingWindowShape::segment_start(std::int64_t s) const noexcept {
    return sat_nanos(static_cast<i128>(anchor) + static_cast<i128>(s) * segment);
}

std::int64_t SlidingWindowState::count_in(Pair h, std::int64_t j) const noexcept {
    return count_with(*this, h, j, [this](std::int64_t i) { return ring_count(i); });
}

std::int64_t SlidingWindowState::used_at(Pair h, std::int64_t p) const noexcept {
    return used_with(*this, h, p, [this](std::int64_t i) { return ring_count(i); });
}

std::int64_t SlidingWindowState::ring_count(std::int64_t j) const noexcept {
    return ring_entry(j).a;
}

Pair SlidingWindowState::ring_entry(std::int64_t j) const noexcept {
    const Pair r = ring[j % segments].load();
    if (r.a < 0 || segment_of(r.a) != j) {
        return {0, 0};
    }
    // A damaged count never makes room; nor does one over a lower limit (reconfigure), read as it.
    const std::int64_t cap = limit;
    return {r.b < 0 || r.b > cap ? cap : r.b, r.a};
}

void SlidingWindowState::archive(Pair h) const noexcept {
    const Pair entry{h.a, current_of(h)};
    if (entry.b == 0 || h.a < 0) {
        return; // an empty segment needs no entry: a missing entry reads as 0 (and a damaged
                // shared head's negative segment is no slot of the ring)
    }
    AtomicPair& slot = ring[segment_of(h.a) % segments];
    Pair r = slot.load();
    // Atomic max on (segment, count): an archiver that lost the race to a newer segment
    // or a larger count of the same segment writes nothing. A slot holding a segment the head has
    // not reached is damaged shared memory, not a newer archive: it would hide this count for good.
    while (r.a < entry.a || (r.a == entry.a && r.b < entry.b) || (r.a > entry.a && r.a > head->load().a)) {
        if (slot.compare_exchange(r, entry)) {
            return;
        }
    }
}

std::string SlidingWindowState::damage() const {
    // The ring first, then the head: a slot is only ever written with a segment the head was in,
    // so a head read after it is never behind it, whatever other processes do meanwhile.
    std::vector<Pair> slots(static_cast<std::size_t>(segments));
    for (std::int64_t i = 0; i < segments; ++i) {
        slots[static_cast<std::size_t>(i)] = ring[i].load();
    }
    const Pair h = head->load();
    const auto show = [](Pair p) { return "{" + std::to_string(p.a) + ", " + std::to_string(p.b) + "}"; };
    if (!head_sound(h)) {
        return "its head " + show(h) + " says segment " + std::to_string(h.a) + " with " +
               std::to_string(current_of(h)) + " + " + std::to_string(older_of(h)) +
               " permits taken in its window (a segment before its first or past the end of time, or more than its "
               "permit_limit of " +
               std::to_string(limit) + ")";
    }
    for (std::int64_t i = 0; i < segments; ++i) {
        const Pair r = slots[static_cast<std::size_t>(i)];
        if (r.b < 0 || r.b > limit) {
            return "its ring slot " + std::to_string(i) + " " + show(r) + " has a count not between 0 and its " +
                   "permit_limit of " + std::to_string(limit);
        }
        if (r.a >= 0 && (segment_of(r.a) % segments != i || r.a > h.a)) {
            return "its ring slot " + std::to_string(i) + " " + show(r) + " holds segment " +
                   std::to_string(segment_of(r.a)) + ", not one of that slot's up to its head's segment " +
                   std::to_string(segment_of(h.a));
        }
    }
    return {};
}

bool SlidingWindowState::head_sound(Pair h) const noexcept {
    const std::int64_t current = current_of(h);
    const std::int64_t older = older_of(h); // (both 32 bits: never below zero)
    return h.a >= 0 && segment_of(h.a) <= segment_index(kMaxTime) && current <= limit && older <= limit - current;
}

void SlidingWindowState::exhaust(Nanos now) noexcept {
    Pair h = head->load();
    while (!head->compare_exchange(h, Pair{stamped ? now : segment_index(now), pack(limit, 0)})) {
    }
}

void SlidingWindowState::refill(Nanos now) noexcept {
    Pair h = head->load();
    while (!head->compare_exchange(h, Pair{stamped ? now : segment_index(now), pack(0, 0)})) {
    }
    for (std::int64_t j = 0; j < segments; ++j) {
        Pair r = ring[j].load();
        while (!ring[j].compare_exchange(r, Pair{-1 - segments, 0})) { // empty, as init_storage() makes it
        }
    }
}

bool SlidingWindowState::take(std::int64_t n, Nanos now, std::int64_t& tag) noexcept {
    if (stamped) {
        return take_log(n, now, tag);
    }
    Pair h = head->hint();
    for (;;) {
        const std::int64_t p = std::max(segment_index(now), h.a);
        const std::int64_t used = used_at(h, p); // O(1) within the head segment
        if (limit - used < n) {
            if (!head->confirm(h)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        Pair next{p, pack(current_of(h) + n, older_of(h))};
        if (p != h.a) {
            if (!head->confirm(h)) {
                continue; // archive only a head the word really held: a hint may be torn
            }
            archive(h); // before the head leaves segment h.a, so its count is never lost
            next.b = pack(n, used);
        }
        if (head->compare_exchange(h, next)) {
            tag = period_tag(anchor, p, segment);
            return true;
        }
    }
}

bool SlidingWindowState::take_log(std::int64_t n, Nanos now, std::int64_t& tag) noexcept {
    const auto entry = sliding_log::RingEntries{this};
    Pair h = head->hint();
    for (;;) {
        const std::int64_t hs = segment_index(h.a);
        const std::int64_t p = std::max(segment_index(now), hs);
        if (limit - sliding_log::used_with(*this, h, p, now, entry) < n) {
            if (!head->confirm(h)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        Pair next{n > 0 ? std::max(h.a, now) : h.a, pack(current_of(h) + n, older_of(h))};
        if (p != hs) {
            if (!head->confirm(h)) {
                continue; // archive only a head the word really held: a hint may be torn
            }
            archive(h); // before the head leaves segment hs, so its count is never lost
            next = Pair{now, pack(n, sliding_log::older_at(*this, h, p, entry))};
        }
        if (head->compare_exchange(h, next)) {
            tag = period_tag(anchor, p, segment);
            return true;
        }
    }
}

std::int64_t SlidingWindowState::available_at(Nanos now) const noexcept {
    const Pair h = head->load();
    if (stamped) {
        return std::max<std::int64_t>(
            0, limit - sliding_log::used_with(*this, h, std::max(segment_index(now), segment_index(h.a)), now,
                                              sliding_log::RingEntries{this}));
    }
    // (Below zero after a lower limit, while more than it is in the window: none.)
    return std::max<std::int64_t>(0, limit - used_at(h, std::max(segment_index(now), h.a)));
}

Nanos SlidingWindowState::time_until(std::int64_t needed, Nanos now) const noexcept {
    if (stamped) {
        return sliding_log::time_until_with(*this, head->load(), needed, now, sliding_log::RingEntries{this});
    }
    return time_until_with(*this, head->load(), needed, now, [this](std::int64_t i) { return ring_count(i); });
}

void SlidingWindowState::give_back(std::int64_t n, std::int64_t tag, Nanos now) noexcept {
    Pair h = head->load();
    Pair next;
    while (give_back_to(*this, h, n, tag, now, next) && !head->compare_exchange(h, next)) {
    }
}

Nanos SlidingWindowState::full_at() const noexcept {
    if (stamped) {
        return sliding_log::full_at_with(*this, head->load(), sliding_log::RingEntries{this});
    }
    return full_at_with(*this, head->load(), [this](std::int64_t i) { return ring_count(i); });
}

std::unique_ptr<Projection> SlidingWindowState::project() const {
    if (stamped) {
        return std::make_unique<sliding_log::SlidingLogProj>(*this, head->load(), sliding_log::RingEntries{this});
    }
    return std::make_unique<SlidingWindowProj>(*this, head->load(), [this](std::int64_t i) { return ring_count(i); });
}

namespace {
// The head in the state's first 4 words (a 32-bit block: copied, not cast).
Pair head_of(const std::uint32_t* state) noexcept {
    std::int64_t a = 0;
    std::int64_t b = 0;
    std::memcpy(&a, state, sizeof a);
    std::memcpy(&b, state + 2, sizeof b);
    return {a, b};
}
void set_head(std::uint32_t* state, Pair h) noexcept {
    std::memcpy(state, &h.a, sizeof h.a);
    std::memcpy(state + 2, &h.b, sizeof h.b);
}
} // namespace

CompactSlidingWindow::CompactSlidingWindow(std::int64_t permit_limit, Nanos window, std::int64_t segments) {
    SlidingWindowState::check(permit_limit, window, segments);
    shape_ = SlidingWindowShape::of(permit_limit, window, segments, 0);
    given_segments_ = segments;
}

namespace {
// The log's record: a segment's stamp as an offset from the segment's start, in ns while a segment
// is under 2**32 ns (about 4.3 s), else in units of segment / (2**32 - 1) ns, rounded up: a stamp
// read back is never before the grant's time (its permits never come back sooner), nor past its
// segment's end.
constexpr std::int64_t kOffsetMax = 0xffffffffLL;

Nanos offset_unit(const SlidingWindowShape& w) noexcept {
    return w.segment <= kOffsetMax ? 1 : ceil_div(w.segment, kOffsetMax);
}
std::uint32_t offset_of(const SlidingWindowShape& w, std::int64_t j, Nanos stamp) noexcept {
    const Nanos from = stamp - w.segment_start(j);
    return from <= 0 ? 0U : static_cast<std::uint32_t>(std::min(ceil_div(from, offset_unit(w)), kOffsetMax));
}
Nanos stamp_of(const SlidingWindowShape& w, std::int64_t j, std::uint32_t offset) noexcept {
    const i128 in = std::min<i128>(static_cast<i128>(offset) * offset_unit(w), w.segment - 1);
    return sat_nanos(static_cast<i128>(w.segment_start(j)) + in);
}

/// A compact log's segments before its head, as entry_with reads them.
struct RecordEntries {
    const SlidingWindowShape& w;
    const std::uint32_t* counts;
    sliding_log::Entry operator()(std::int64_t j) const noexcept {
        const auto slot = static_cast<std::size_t>(j % w.segments);
        return {counts[slot], stamp_of(w, j, counts[static_cast<std::size_t>(w.segments) + slot])};
    }
};
} // namespace

void CompactSlidingWindow::init(std::uint32_t* state) const noexcept {
    std::memset(state, 0, words() * sizeof(std::uint32_t)); // head {0, 0}: segment 0, nothing taken
}

bool CompactSlidingWindow::take(std::uint32_t* state, Nanos anchor, std::int64_t n, Nanos now,
                                std::int64_t& tag) const noexcept {
    const SlidingWindowShape w = at(anchor);
    if (w.stamped) {
        return take_log(w, state, n, now, tag);
    }
    const Pair h = head_of(state);
    std::uint32_t* counts = state + 4;
    const std::int64_t p = std::max(w.segment_index(now), h.a);
    const std::int64_t used = used_with(w, h, p, [&](std::int64_t j) { return counts[j % w.segments]; });
    if (w.limit - used < n) {
        return false;
    }
    Pair next{p, pack(current_of(h) + n, older_of(h))};
    if (p != h.a) {
        // The head leaves segment h.a: its count goes to its slot, and the slots of the segments
        // skipped since (none took permits) read 0 from now on; a whole window later, every slot.
        if (p - h.a >= w.segments) {
            std::fill_n(counts, w.segments, 0U);
        } else {
            counts[h.a % w.segments] = static_cast<std::uint32_t>(current_of(h));
            for (std::int64_t j = h.a + 1; j < p; ++j) {
                counts[j % w.segments] = 0;
            }
        }
        next.b = pack(n, used);
    }
    set_head(state, next);
    tag = period_tag(w.anchor, p, w.segment);
    return true;
}

bool CompactSlidingWindow::take_log(const SlidingWindowShape& w, std::uint32_t* state, std::int64_t n, Nanos now,
                                    std::int64_t& tag) noexcept {
    const Pair h = head_of(state);
    std::uint32_t* counts = state + 4;
    std::uint32_t* offsets = counts + w.segments;
    const RecordEntries entry{w, counts};
    const std::int64_t hs = w.segment_index(h.a);
    const std::int64_t p = std::max(w.segment_index(now), hs);
    if (w.limit - sliding_log::used_with(w, h, p, now, entry) < n) {
        return false;
    }
    Pair next{n > 0 ? std::max(h.a, now) : h.a, pack(current_of(h) + n, older_of(h))};
    if (p != hs) {
        next = Pair{now, pack(n, sliding_log::older_at(w, h, p, entry))};
        // The head's segment goes to its slot; the skipped ones (no grants) read 0 from now on.
        if (p - hs >= w.segments) {
            std::fill_n(counts, w.segments, 0U);
        } else {
            counts[hs % w.segments] = static_cast<std::uint32_t>(current_of(h));
            offsets[hs % w.segments] = offset_of(w, hs, h.a);
            for (std::int64_t j = hs + 1; j < p; ++j) {
                counts[j % w.segments] = 0;
            }
        }
    }
    set_head(state, next);
    tag = period_tag(w.anchor, p, w.segment);
    return true;
}

std::int64_t CompactSlidingWindow::available(const std::uint32_t* state, Nanos anchor, Nanos now) const noexcept {
    const SlidingWindowShape w = at(anchor);
    const Pair h = head_of(state);
    const std::uint32_t* counts = state + 4;
    if (w.stamped) {
        return std::max<std::int64_t>(
            0, w.limit - sliding_log::used_with(w, h, std::max(w.segment_index(now), w.segment_index(h.a)), now,
                                                RecordEntries{w, counts}));
    }
    return std::max<std::int64_t>(0, w.limit - used_with(w, h, std::max(w.segment_index(now), h.a),
                                                         [&](std::int64_t j) { return counts[j % w.segments]; }));
}

Nanos CompactSlidingWindow::time_until(const std::uint32_t* state, Nanos anchor, std::int64_t needed,
                                       Nanos now) const noexcept {
    const SlidingWindowShape w = at(anchor);
    const std::uint32_t* counts = state + 4;
    if (w.stamped) {
        return sliding_log::time_until_with(w, head_of(state), needed, now, RecordEntries{w, counts});
    }
    return time_until_with(w, head_of(state), needed, now, [&](std::int64_t j) { return counts[j % w.segments]; });
}

bool CompactSlidingWindow::give_back(std::uint32_t* state, Nanos anchor, std::int64_t n, std::int64_t tag,
                                     Nanos now) const noexcept {
    Pair next;
    if (!give_back_to(at(anchor), head_of(state), n, tag, now, next)) {
        return false;
    }
    set_head(state, next);
    return true;
}

Nanos CompactSlidingWindow::full_at(const std::uint32_t* state, Nanos anchor) const noexcept {
    const SlidingWindowShape w = at(anchor);
    const std::uint32_t* counts = state + 4;
    if (w.stamped) {
        return sliding_log::full_at_with(w, head_of(state), RecordEntries{w, counts});
    }
    return full_at_with(w, head_of(state), [&](std::int64_t j) { return counts[j % w.segments]; });
}

std::unique_ptr<Projection> CompactSlidingWindow::project(const std::uint32_t* state, Nanos anchor) const {
    const SlidingWindowShape w = at(anchor);
    const std::uint32_t* counts = state + 4;
    if (w.stamped) {
        return std::make_unique<sliding_log::SlidingLogProj>(w, head_of(state), RecordEntries{w, counts});
    }
    return std::make_unique<SlidingWindowProj>(w, head_of(state),
                                               [&](std::int64_t j) { return counts[j % w.segments]; });
}

std::shared_ptr<SlidingWindow> CompactSlidingWindow::promote(std::shared_ptr<Clock> clock, QueueOptions queue,
                                                             Nanos anchor, const std::uint32_t* state) const {
    std::vector<Pair> entries;
    const Pair head = state != nullptr ? head_of(state) : Pair{};
    const SlidingWindowShape w = at(anchor);
    const std::int64_t hs = w.segment_of(head.a);
    for (std::int64_t j = std::max<std::int64_t>(0, hs - w.segments + 1); state != nullptr && j < hs; ++j) {
        if (const std::uint32_t c = state[4 + j % w.segments]; c > 0) {
            entries.push_back({w.stamped ? RecordEntries{w, state + 4}(j).stamp : j, c});
        }
    }
    return std::make_shared<SlidingWindow>(std::move(clock), shape_.limit, shape_.window, given_segments_, queue,
                                           anchor, head, entries);
}

} // namespace permits
