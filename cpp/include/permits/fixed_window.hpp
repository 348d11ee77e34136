// Fixed window: windows back to back from the anchor; the count resets at each boundary
// however late the next request comes (docs/design.md, Fixed window).
#pragma once

#include "permits/rule.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// State {window index of the last change, permits used in that window}.
class FixedWindowRule final : public Rule {
public:
    FixedWindowRule(std::int64_t permit_limit, Nanos window);
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
    std::int64_t window_index(Nanos anchor, Nanos now) const noexcept {
        return now <= anchor ? 0 : (now - anchor) / window_;
    }
    Nanos window_start(Nanos anchor, std::int64_t w) const noexcept;

    detail::Live<std::int64_t> limit_;
    Nanos window_;
};

class FixedWindow final : public RuleLimiter<FixedWindowRule> {
public:
    using RuleLimiter::RuleLimiter;
    FixedWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, QueueOptions queue, bool manual)
        : RuleLimiter(std::move(clock), FixedWindowRule(permit_limit, window), queue, manual) {}
    std::int64_t permit_limit() const noexcept { return rule().permit_limit(); }
    Nanos window() const noexcept { return rule().window(); }
};

} // namespace permits
