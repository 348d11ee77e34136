// Concurrency: permits held until released; no time involved.
#pragma once

#include <algorithm>

#include "permits/rule.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// State {permits available, when they last all came back}, counted against the limit the state began
/// with (`base`): a new limit (reconfigure) changes what a take may leave, never what a release
/// gives back, so releases need no limit at all and a limit can change while they race.
class ConcurrencyRule final : public Rule {
public:
    explicit ConcurrencyRule(std::int64_t permit_limit);
    std::int64_t permit_limit() const noexcept { return limit_; }

    std::int64_t max_permits() const noexcept override { return limit_; }
    bool releases_permits() const noexcept override { return true; }
    Pair initial(Nanos anchor) const noexcept override { return {base_, anchor}; }
    bool take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next, std::int64_t& tag) const noexcept override;
    /// None while more than a lower limit is held.
    std::int64_t available(Pair s, Nanos /*anchor*/, Nanos /*now*/) const noexcept override {
        return std::max<std::int64_t>(0, s.a - base_ + limit_);
    }
    Nanos time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept override;
    bool give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                   Pair& next) const noexcept override;
    Nanos full_at(Pair s, Nanos /*anchor*/) const noexcept override { return s.a >= base_ ? s.b : kNever; }
    std::unique_ptr<Projection> project(Pair /*s*/, Nanos /*anchor*/) const override { return nullptr; }
    const char* cannot_follow(const Rule& before) const noexcept override;
    void adopt(const Rule& next) noexcept override;

private:
    detail::Live<std::int64_t> limit_;
    std::int64_t base_; // the limit its states count from: the first one
};

class Concurrency final : public RuleLimiter<ConcurrencyRule> {
public:
    using RuleLimiter::RuleLimiter;
    Concurrency(std::shared_ptr<Clock> clock, std::int64_t permit_limit, QueueOptions queue)
        : RuleLimiter(std::move(clock), ConcurrencyRule(permit_limit), queue, false) {}
    std::int64_t permit_limit() const noexcept { return rule().permit_limit(); }
};

} // namespace permits
