// The sliding log's arithmetic (sliding_window.hpp): k + 1 segments of window / k (rounded up),
// each with the time of its latest grant, its stamp; a segment's permits come back at its stamp
// plus the window and a nanosecond (back_at). Included by sliding_window.cpp only: the lock-free state and the per-key
// record's compact copy read their segments through `entry(j)` and decide with the same code.
//
// Why k + 1 slots and a head that holds two oldest segments apart: a segment j's stamp lies in
// [j*s, (j+1)*s), so (with k*s >= window > (k-1)*s) its permits come back during segment j + k or
// in the last moments of j + k - 1, never before the start of j + k - 1 nor after j + k ends. In
// the head's segment p, the segments p-k+2 .. p-1 are all still held: the head sums them once when
// it moves to p; the two oldest, p-k and p-k+1, are read with their stamps at every decision.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>

#include "permits/atomic_pair.hpp"
#include "permits/int128.hpp"
#include "permits/rule.hpp"
#include "permits/sliding_window.hpp"

namespace permits::sliding {

// The head's second word: permits taken in the head segment (low 32 bits) and in the older
// segments of its window (high 32 bits), so that a grant within a segment reads no ring slot.
inline std::int64_t current_of(Pair h) noexcept {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(h.b) & 0xffffffffU);
}
inline std::int64_t older_of(Pair h) noexcept {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(h.b) >> 32);
}
inline std::int64_t pack(std::int64_t current, std::int64_t older) noexcept {
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(older) << 32) | static_cast<std::uint64_t>(current));
}

} // namespace permits::sliding

namespace permits::sliding_log {

using sliding::current_of;
using sliding::older_of;

/// A segment of the log: its permits and the time of its latest grant.
struct Entry {
    std::int64_t count = 0;
    Nanos stamp = 0;
};

/// The lock-free ring's segments, as entry_with reads them.
struct RingEntries {
    const SlidingWindowState* st;
    Entry operator()(std::int64_t j) const noexcept {
        const Pair e = st->ring_entry(j);
        return {e.a, e.b};
    }
};

inline std::int64_t k_of(const SlidingWindowShape& w) noexcept {
    return w.segments - 1;
}

/// When an entry's permits come back: a nanosecond past a window after its stamp, so that an
/// interval of the window's length never holds more than the limit even with both its ends (a
/// server that counts the requests of [now - window, now], as the `limits` library's moving window
/// does, never sees more).
inline Nanos back_at(const SlidingWindowShape& w, Entry e) noexcept {
    return sat_add(std::max<Nanos>(e.stamp, 0), w.window + 1);
}

inline bool held(const SlidingWindowShape& w, Entry e, Nanos now) noexcept {
    return e.count > 0 && back_at(w, e) > now;
}

/// Segment j as seen with head h; `entry(j)` reads a segment before the head's still in its window.
template <class E> Entry entry_with(const SlidingWindowShape& w, Pair h, std::int64_t j, E entry) {
    const std::int64_t hs = w.segment_index(h.a);
    if (j == hs) {
        return {current_of(h), h.a};
    }
    if (j > hs || j < 0 || j <= hs - w.segments) {
        return {};
    }
    return entry(j);
}

/// Permits held at `now` by the segments up to p, counting every one.
template <class E> std::int64_t counted_with(const SlidingWindowShape& w, Pair h, std::int64_t p, Nanos now, E entry) {
    std::int64_t used = 0;
    for (std::int64_t j = std::max<std::int64_t>(p - k_of(w), 0); j <= p; ++j) {
        if (const Entry e = entry_with(w, h, j, entry); held(w, e, now)) {
            used += e.count;
        }
    }
    return used;
}

/// Permits held at `now`, in segment p (>= the head's): O(1) within the head's segment.
template <class E> std::int64_t used_with(const SlidingWindowShape& w, Pair h, std::int64_t p, Nanos now, E entry) {
    if (p != w.segment_index(h.a)) {
        return counted_with(w, h, p, now, entry);
    }
    std::int64_t used = current_of(h) + older_of(h);
    for (std::int64_t j = std::max<std::int64_t>(p - k_of(w), 0); j <= std::min(p - k_of(w) + 1, p - 1); ++j) {
        if (const Entry e = entry_with(w, h, j, entry); held(w, e, now)) {
            used += e.count;
        }
    }
    return used;
}

/// The head's `older` when it moves to segment p: segments p-k+2 .. p-1, all held throughout p.
template <class E> std::int64_t older_at(const SlidingWindowShape& w, Pair h, std::int64_t p, E entry) {
    std::int64_t older = 0;
    for (std::int64_t j = std::max<std::int64_t>(p - k_of(w) + 2, 0); j < p; ++j) {
        older += entry_with(w, h, j, entry).count;
    }
    return older;
}

template <class E> Nanos time_until_with(const SlidingWindowShape& w, Pair h, std::int64_t needed, Nanos now, E entry) {
    const std::int64_t p = std::max(w.segment_index(now), w.segment_index(h.a));
    // The fewer of what a take reads and what the segments hold (they differ only in damaged
    // shared memory or after a refund raced an archive): a wait never ends before a take passes.
    std::int64_t available = w.limit - std::max(used_with(w, h, p, now, entry), counted_with(w, h, p, now, entry));
    if (available >= needed) {
        return 0;
    }
    Nanos last = now;
    for (std::int64_t j = std::max<std::int64_t>(p - k_of(w), 0); j <= p; ++j) {
        if (const Entry e = entry_with(w, h, j, entry); held(w, e, now)) {
            available += e.count;
            last = back_at(w, e);
            if (available >= needed) {
                return last == kNever ? kNever : last - now;
            }
        }
    }
    // More than a window's worth (requests queued ahead): whole windows more.
    const i128 at = static_cast<i128>(last) + static_cast<i128>(w.window + 1) * ceil_div(needed - w.limit, w.limit);
    const Nanos t = sat_nanos(at);
    return t == kNever ? kNever : std::max<Nanos>(0, t - now);
}

template <class E> Nanos full_at_with(const SlidingWindowShape& w, Pair h, E entry) {
    const std::int64_t hs = w.segment_index(h.a);
    for (std::int64_t j = hs; j >= std::max<std::int64_t>(0, hs - k_of(w)); --j) {
        if (const Entry e = entry_with(w, h, j, entry); e.count > 0) {
            return back_at(w, e); // the latest grant comes back last
        }
    }
    return w.segment_start(hs); // nothing taken in the window: full since the head's segment began
}

/// The log projected forward (a chain's or a queue's look ahead): its segments, oldest first.
struct SlidingLogProj final : Projection {
    const SlidingWindowShape sw;
    i128 head;                                          // the segment of the latest grant
    std::map<i128, std::pair<i128, std::int64_t>> held; // segment -> {stamp, count}

    template <class E>
    SlidingLogProj(const SlidingWindowShape& s, Pair h, E entry) : sw(s), head(s.segment_index(h.a)) {
        for (std::int64_t j = std::max<std::int64_t>(0, s.segment_index(h.a) - k_of(s)); j <= s.segment_index(h.a);
             ++j) {
            if (const Entry e = entry_with(s, h, j, entry); e.count > 0) {
                held[j] = {e.stamp, e.count};
            }
        }
    }
    i128 used(i128 t) const {
        i128 sum = 0;
        for (const auto& [j, e] : held) {
            if (e.first + sw.window + 1 > t) {
                sum += e.second;
            }
        }
        return sum;
    }
    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        i128 at = not_before;
        if (sw.limit.get() - used(at) < need) {
            // Segments come back oldest first, each one window after its stamp.
            i128 last = at;
            for (const auto& [j, e] : held) {
                last = std::max(last, e.first + sw.window + 1);
                if (sw.limit.get() - used(last) >= need) {
                    break;
                }
            }
            at = last;
        }
        if (apply && n > 0) {
            const i128 p = std::max(at <= sw.anchor ? i128{0} : (at - sw.anchor) / sw.segment, head);
            auto& e = held[p];
            e = {std::max(e.first, at), e.second + n};
            head = p;
            for (auto it = held.begin(); it != held.end();) {
                it = it->second.first + sw.window + 1 <= at ? held.erase(it) : std::next(it);
            }
        }
        return at;
    }
};

} // namespace permits::sliding_log
