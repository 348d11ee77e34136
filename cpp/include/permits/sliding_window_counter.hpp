// Sliding window counter (two fixed windows, weighted): a request for n is granted iff
// previous * (1 - f) + current + n <= limit, f the elapsed fraction of the current window
// (docs/design.md, Sliding window counter). Exact integer arithmetic, no floating point.
#pragma once

#include "permits/rule.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// State {window index, previous << 32 | current}.
class SlidingWindowCounterRule final : public Rule {
public:
    SlidingWindowCounterRule(std::int64_t permit_limit, Nanos window);
    std::int64_t permit_limit() const noexcept { return limit_; }
    Nanos window() const noexcept { return window_; }

    std::int64_t max_permits() const noexcept override { return limit_; }
    Pair initial(Nanos /*anchor*/) const noexcept override { return {0, 0}; }
    bool take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next, std::int64_t& tag) const noexcept override;
    std::int64_t available(Pair s, Nanos anchor, Nanos now) const noexcept override;
    Nanos time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept override;
    bool give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                   Pair& next) const noexcept override;
    const char* cannot_follow(const Rule& before) const noexcept override;
    void adopt(const Rule& next) noexcept override;
    Nanos full_at(Pair s, Nanos anchor) const noexcept override;
    std::unique_ptr<Projection> project(Pair s, Nanos anchor) const override;
    const char* damage(Pair s, Nanos anchor) const noexcept override;
    Pair exhausted(Nanos anchor, Nanos now) const noexcept override;

private:
    struct Proj;
    struct Counts {
        std::int64_t window;
        std::int64_t previous;
        std::int64_t current;
    };
    std::int64_t window_index(Nanos anchor, Nanos now) const noexcept {
        return now <= anchor ? 0 : (now - anchor) / window_;
    }
    Nanos window_start(Nanos anchor, std::int64_t w) const noexcept;
    /// The counts as seen from window w (>= the stored window).
    static Counts counts_at(Pair s, std::int64_t w) noexcept;
    /// limit*W - previous*(W - elapsed) - current*W: the room left, in permit-nanoseconds.
    i128 room(const Counts& c, Nanos anchor, Nanos now) const noexcept;

    detail::Live<std::int64_t> limit_;
    Nanos window_;
};

class SlidingWindowCounter final : public RuleLimiter<SlidingWindowCounterRule> {
public:
    using RuleLimiter::RuleLimiter;
    SlidingWindowCounter(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, QueueOptions queue,
                         bool manual)
        : RuleLimiter(std::move(clock), SlidingWindowCounterRule(permit_limit, window), queue, manual) {}
    std::int64_t permit_limit() const noexcept { return rule().permit_limit(); }
    Nanos window() const noexcept { return rule().window(); }
};

} // namespace permits
