// Sliding window of `segments` segments: a permit taken in segment s comes back when segment
// s + segments begins; after a gap every expired segment is free at once (docs/design.md, Sliding window).
//
// Lock-free layout: the head holds the current segment and its count (every grant is one CAS on
// it); when a grant moves the head to a new segment, the old head is first archived in the ring
// (an atomic max, so a late archiver can never overwrite a newer entry).
//
// The arithmetic is SlidingWindowState's, over a head and ring kept anywhere: the limiter's own
// memory, a slot of a shared-memory segment, or a per-key record there.
#pragma once

#include <memory>

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// A sliding window's parameters and arithmetic over a head and ring it does not own.
struct SlidingWindowState {
    std::int64_t limit = 0;
    Nanos window = 0;
    std::int64_t segments = 0;
    Nanos segment = 0;
    Nanos anchor = 0;
    AtomicPair* head = nullptr; ///< {segment index, permits taken in it (and in the older segments)}
    AtomicPair* ring = nullptr; ///< slot j % segments: {j, permits taken in segment j}

    /// std::invalid_argument naming the option unless the parameters make a window.
    static void check(std::int64_t permit_limit, Nanos window, std::int64_t segments);
    /// Makes `words` (1 + segments AtomicPairs: the head, then the ring) a new, full window's state.
    static void init_storage(AtomicPair* words, std::int64_t segments);
    /// The parameters over `words` (laid out as init_storage() does), anchored at `anchor`.
    static SlidingWindowState over(std::int64_t permit_limit, Nanos window, std::int64_t segments, Nanos anchor,
                                   AtomicPair* words) noexcept;

    bool take(std::int64_t n, Nanos now, std::int64_t& tag) noexcept;
    std::int64_t available_at(Nanos now) const noexcept;
    Nanos time_until(std::int64_t needed, Nanos now) const noexcept;
    void give_back(std::int64_t n, std::int64_t tag, Nanos now) noexcept;
    Nanos full_at() const noexcept;
    std::unique_ptr<Projection> project() const;

    std::int64_t segment_index(Nanos now) const noexcept { return now <= anchor ? 0 : (now - anchor) / segment; }
    Nanos segment_start(std::int64_t s) const noexcept;
    /// Permits taken in segment j, as seen with head h.
    std::int64_t count_in(Pair h, std::int64_t j) const noexcept;
    /// Permits held in the window ending with segment p.
    std::int64_t used_at(Pair h, std::int64_t p) const noexcept;
    void archive(Pair h) const noexcept;
};

class SlidingWindow final : public Limiter {
public:
    SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, std::int64_t segments,
                  QueueOptions queue, bool manual);
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

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override { return st_.take(n, now, tag); }
    std::int64_t available_at(Nanos now) const override { return st_.available_at(now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override { return st_.time_until(needed, now); }
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) override { st_.give_back(n, tag, now); }
    std::unique_ptr<Projection> project() const override { return st_.project(); }

private:
    std::unique_ptr<AtomicPair[]> own_;      // the head and ring, unless they are kept elsewhere
    std::shared_ptr<const void> keep_alive_; // what maps external words
    SlidingWindowState st_;
};

} // namespace permits
