// Sliding window of `segments` segments: a permit taken in segment s comes back when segment
// s + segments begins; after a gap every expired segment is free at once (docs/design.md, Sliding window).
//
// The sliding log (segments given as -k, specs.SlidingLog) keeps the same head and ring, k + 1
// segments of window / k (rounded up), and a time with each segment: its latest grant. A segment's
// permits come back one window after that time, not when the segment leaves: never more than the
// limit in any interval of the window's length, a wait never longer than the window, and a queue
// that never empties gets the whole limit every window (sliding_log.hpp holds its arithmetic).
//
// Lock-free layout: the head holds the current segment and its count (every grant is one CAS on
// it); when a grant moves the head to a new segment, the old head is first archived in the ring
// (an atomic max, so a late archiver can never overwrite a newer entry).
//
// The arithmetic is SlidingWindowState's, over a head and ring kept anywhere: the limiter's own
// memory, a slot of a shared-memory segment, or a per-key record there. An in-process per-key
// record keeps a compact copy instead (CompactSlidingWindow): the same head, and a 32-bit count per
// segment, changed under its shard's lock; both read their counts through one arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// A sliding window's parameters, anchored: what its arithmetic needs besides the counts.
struct SlidingWindowShape {
    detail::Live<std::int64_t> limit = 0; // reconfigure changes it while requests read it
    Nanos window = 0;
    std::int64_t segments = 0;
    Nanos segment = 0;
    Nanos anchor = 0;
    /// The sliding log: a head's and a ring slot's first word is the time of its segment's latest
    /// grant (the segment is that time's), not the segment's number.
    bool stamped = false;

    /// The parameters as the engine takes them (`segments` < 0: the sliding log of -segments).
    static SlidingWindowShape of(std::int64_t permit_limit, Nanos window, std::int64_t segments, Nanos anchor) noexcept;
    /// The ring's slots for `segments` as the engine takes them: k + 1 for the log of k segments.
    static std::int64_t slots(std::int64_t segments) noexcept { return segments > 0 ? segments : 1 - segments; }
    std::int64_t segment_index(Nanos now) const noexcept { return now <= anchor ? 0 : (now - anchor) / segment; }
    /// The segment of a head or ring slot whose first word is `a`.
    std::int64_t segment_of(std::int64_t a) const noexcept { return stamped ? segment_index(a) : a; }
    Nanos segment_start(std::int64_t s) const noexcept;
};

/// A sliding window's parameters and arithmetic over a head and ring it does not own.
struct SlidingWindowState : SlidingWindowShape {
    AtomicPair* head = nullptr; ///< {segment index (the log: its latest grant's time), permits taken in it (and in the
                                ///< older segments)}
    AtomicPair* ring =
        nullptr; ///< slot j % segments: {j (the log: its latest grant's time), permits taken in segment j}

    /// std::invalid_argument naming the option unless the parameters make a window.
    static void check(std::int64_t permit_limit, Nanos window, std::int64_t segments);
    /// Makes `words` (1 + slots(segments_given) AtomicPairs: the head, then the ring) a new, full
    /// window's state.
    static void init_storage(AtomicPair* words, std::int64_t segments_given);
    /// The parameters over `words` (laid out as init_storage() does), anchored at `anchor`.
    static SlidingWindowState over(std::int64_t permit_limit, Nanos window, std::int64_t segments, Nanos anchor,
                                   AtomicPair* words) noexcept;

    bool take(std::int64_t n, Nanos now, std::int64_t& tag) noexcept;
    bool take_log(std::int64_t n, Nanos now, std::int64_t& tag) noexcept;
    std::int64_t available_at(Nanos now) const noexcept;
    Nanos time_until(std::int64_t needed, Nanos now) const noexcept;
    void give_back(std::int64_t n, std::int64_t tag, Nanos now) noexcept;
    Nanos full_at() const noexcept;
    std::unique_ptr<Projection> project() const;

    /// Permits taken in segment j, as seen with head h.
    std::int64_t count_in(Pair h, std::int64_t j) const noexcept;
    /// Permits held in the window ending with segment p.
    std::int64_t used_at(Pair h, std::int64_t p) const noexcept;
    /// Segment j's count in the ring (0 when its slot holds another segment; the whole limit when
    /// the count is not between 0 and the limit: damaged shared memory, read on the safe side).
    std::int64_t ring_count(std::int64_t j) const noexcept;
    /// The log's segment j in the ring: {count as ring_count's, the time of its latest grant}.
    Pair ring_entry(std::int64_t j) const noexcept;
    void archive(Pair h) const noexcept;

    /// What breaks the state's invariants (a count below zero or beyond the limit, a segment before
    /// the first or past the end of time, a ring slot holding another slot's segment or one the head
    /// has not reached), with the values; empty when nothing does. Reads every slot. (A head and ring
    /// in memory other processes share may be damaged.)
    std::string damage() const;
    /// True when head h keeps its invariants (its segment within time, its counts within the limit).
    bool head_sound(Pair h) const noexcept;
    /// Makes the head say its whole limit was taken in the segment of `now`: a damaged head's repair.
    void exhaust(Nanos now) noexcept;
    /// Makes the window full at `now`: the head empty in the segment of `now`, no ring entry read
    /// (a take racing with it may archive its old head after: that count stays, never one too few).
    void refill(Nanos now) noexcept;
};

class SlidingWindow final : public Limiter {
public:
    SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, std::int64_t segments,
                  QueueOptions queue, bool manual);
    /// Goes on from a compact window's state (a per-key record whose request has to queue):
    /// anchored at `anchor`, with head `head` and ring entries `entries` ({segment, or the log's
    /// stamp; count} of the segments before the head still in its window).
    SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, std::int64_t segments,
                  QueueOptions queue, Nanos anchor, Pair head, const std::vector<Pair>& entries);
    /// Runs on a head and ring it does not own (shared memory: other processes change them too),
    /// laid out by SlidingWindowState::init_storage(): `external.word` is the head.
    SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, std::int64_t segments,
                  QueueOptions queue, const ExternalState& external);
    std::int64_t permit_limit() const noexcept { return st_.limit; }
    Nanos window() const noexcept { return st_.window; }
    std::int64_t segments() const noexcept { return st_.segments; }
    Nanos segment_length() const noexcept { return st_.segment; }
    Nanos full_at() const override { return st_.full_at(); }
    bool shares_state() const noexcept override { return keep_alive_ != nullptr; }
    /// From now on `permit_limit` and `queue` hold; the counts are kept (a lower limit holds as they
    /// leave the window). std::invalid_argument for another window or segments; ClosedError once closed.
    void reconfigure(std::int64_t permit_limit, Nanos window, std::int64_t segments, QueueOptions queue);
    /// Takes on a limit another process published (a follower: Limiter::follow), the queue kept.
    void take_on(std::int64_t permit_limit);

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override { return st_.take(n, now, tag); }
    std::int64_t available_at(Nanos now) const override { return st_.available_at(now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override { return st_.time_until(needed, now); }
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) override { st_.give_back(n, tag, now); }
    std::unique_ptr<Projection> project() const override { return st_.project(); }
    bool reset_state(Nanos now) override {
        st_.refill(now);
        return true;
    }

private:
    std::unique_ptr<AtomicPair[]> own_;      // the head and ring, unless they are kept elsewhere
    std::shared_ptr<const void> keep_alive_; // what maps external words
    SlidingWindowState st_;
};

/// A sliding window's state kept in a per-key record (per_key.hpp) rather than in a limiter: a block
/// of words() 32-bit words, the head (as SlidingWindowState's, 4 words) then the count of each
/// segment before the head still in its window (slot j % segments); the log's then the time of each
/// one's latest grant, after its segment's start (in ns, or coarser past 2**32 - 1 ns a segment,
/// rounded up: a permit may come back later, never sooner). Changed only under the record's
/// shard lock: plain loads and stores, and a slot needs no segment number (the slots of skipped
/// segments are zeroed as the head passes them), so 4 bytes a segment, not a 32-byte AtomicPair.
/// Decides exactly as SlidingWindow: the same arithmetic reads both (tests/cpp: the differential test).
class CompactSlidingWindow {
public:
    /// std::invalid_argument naming the option unless the parameters make a window.
    CompactSlidingWindow(std::int64_t permit_limit, Nanos window, std::int64_t segments);
    std::int64_t permit_limit() const noexcept { return shape_.limit; }
    Nanos window() const noexcept { return shape_.window; }
    std::int64_t segments() const noexcept { return shape_.segments; }
    /// The segments as the constructor took them (below zero: the log).
    std::int64_t given_segments() const noexcept { return given_segments_; }
    /// A new limit (reconfigure), under every lock of the states it reads: the counts stay.
    void set_limit(std::int64_t permit_limit) noexcept { shape_.limit.set(permit_limit); }
    /// The state's length in 32-bit words.
    std::size_t words() const noexcept {
        return 4 + static_cast<std::size_t>(shape_.segments) * (shape_.stamped ? 2 : 1);
    }
    /// `state` (words() words) becomes a new, full window's.
    void init(std::uint32_t* state) const noexcept;

    /// As SlidingWindowState's, on `state`, for a window anchored at `anchor`.
    bool take(std::uint32_t* state, Nanos anchor, std::int64_t n, Nanos now, std::int64_t& tag) const noexcept;
    std::int64_t available(const std::uint32_t* state, Nanos anchor, Nanos now) const noexcept;
    Nanos time_until(const std::uint32_t* state, Nanos anchor, std::int64_t needed, Nanos now) const noexcept;
    /// False when that changes nothing (a refund for a segment gone by).
    bool give_back(std::uint32_t* state, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now) const noexcept;
    Nanos full_at(const std::uint32_t* state, Nanos anchor) const noexcept;
    std::unique_ptr<Projection> project(const std::uint32_t* state, Nanos anchor) const;
    /// A full limiter going on from `state` exactly (nullptr: a new window anchored at `anchor`).
    std::shared_ptr<SlidingWindow> promote(std::shared_ptr<Clock> clock, QueueOptions queue, Nanos anchor,
                                           const std::uint32_t* state) const;

private:
    SlidingWindowShape at(Nanos anchor) const noexcept {
        SlidingWindowShape w = shape_;
        w.anchor = anchor;
        return w;
    }
    static bool take_log(const SlidingWindowShape& w, std::uint32_t* state, std::int64_t n, Nanos now,
                         std::int64_t& tag) noexcept;
    SlidingWindowShape shape_;
    std::int64_t given_segments_ = 0; // as the constructor took them (< 0: the log)
};

} // namespace permits
