// Sliding window counter (two fixed windows, weighted): a request for n is granted iff
// previous * (1 - f) + current + n <= limit, f the elapsed fraction of the current window
// (semantics.md 4b). Exact integer arithmetic, no floating point.
#pragma once

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

class SlidingWindowCounter final : public Limiter {
public:
    SlidingWindowCounter(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, QueueOptions queue,
                         bool manual);
    std::int64_t permit_limit() const noexcept { return limit_; }
    Nanos window() const noexcept { return window_; }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override;
    std::int64_t available_at(Nanos now) const override;
    Nanos time_until(std::int64_t needed, Nanos now) const override;
    void put_back(std::int64_t n, std::int64_t tag, Nanos now) override;
    Nanos full_since(Nanos now) const override;
    std::unique_ptr<Projection> project() const override;

private:
    struct Proj;
    struct Counts {
        std::int64_t window;
        std::int64_t previous;
        std::int64_t current;
    };
    std::int64_t window_index(Nanos now) const noexcept { return now <= anchor_ ? 0 : (now - anchor_) / window_; }
    Nanos window_start(std::int64_t w) const noexcept;
    /// The counts as seen from window w (>= the stored window).
    static Counts counts_at(Pair s, std::int64_t w) noexcept;
    /// limit*W - previous*(W - elapsed) - current*W: the room left, in permit-nanoseconds.
    i128 room(const Counts& c, Nanos now) const noexcept;

    const std::int64_t limit_;
    const Nanos window_;
    const Nanos anchor_;
    AtomicPair state_; // {window index, previous << 32 | current}
};

} // namespace permits
