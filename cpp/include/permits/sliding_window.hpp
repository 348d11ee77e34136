// Sliding window of `segments` segments: a permit taken in segment s comes back when segment
// s + segments begins; after a gap every expired segment is free at once (docs/design.md, Sliding window).
//
// Lock-free layout: `head_` holds the current segment and its count (every grant is one CAS on
// it); when a grant moves the head to a new segment, the old head is first archived in `ring_`
// (an atomic max, so a late archiver can never overwrite a newer entry).
#pragma once

#include <memory>

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

class SlidingWindow final : public Limiter {
public:
    SlidingWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, std::int64_t segments,
                  QueueOptions queue, bool manual);
    std::int64_t permit_limit() const noexcept { return limit_; }
    Nanos window() const noexcept { return window_; }
    std::int64_t segments() const noexcept { return segments_; }
    Nanos segment_length() const noexcept { return segment_; }
    Nanos full_at() const override;

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override;
    std::int64_t available_at(Nanos now) const override;
    Nanos time_until(std::int64_t needed, Nanos now) const override;
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) override;
    std::unique_ptr<Projection> project() const override;

private:
    struct Proj;
    std::int64_t segment_index(Nanos now) const noexcept { return now <= anchor_ ? 0 : (now - anchor_) / segment_; }
    Nanos segment_start(std::int64_t s) const noexcept;
    /// Permits taken in segment j, as seen with head h.
    std::int64_t count_in(Pair h, std::int64_t j) const noexcept;
    /// Permits held in the window ending with segment p.
    std::int64_t used_at(Pair h, std::int64_t p) const noexcept;
    void archive(Pair h) noexcept;

    const std::int64_t limit_;
    const Nanos window_;
    const std::int64_t segments_;
    const Nanos segment_;
    const Nanos anchor_;
    AtomicPair head_;                    // {segment index, permits taken in it}
    std::unique_ptr<AtomicPair[]> ring_; // slot j % segments: {j, permits taken in segment j}
};

} // namespace permits
