// Token bucket: integer tokens; `tokens_per_period` added for every whole period since the
// anchor, capped at `token_limit` (docs/design.md, Token bucket).
#pragma once

#include "permits/rule.hpp"
#include "permits/rule_limiter.hpp"

namespace permits {

/// State {period index of the last change, tokens at that period}.
class TokenBucketRule final : public Rule {
public:
    TokenBucketRule(std::int64_t token_limit, std::int64_t tokens_per_period, Nanos period);
    std::int64_t token_limit() const noexcept { return limit_; }
    std::int64_t tokens_per_period() const noexcept { return per_period_; }
    Nanos period() const noexcept { return period_; }

    std::int64_t max_permits() const noexcept override { return limit_; }
    Pair initial(Nanos /*anchor*/) const noexcept override { return {0, limit_}; }
    bool take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next, std::int64_t& tag) const noexcept override;
    std::int64_t available(Pair s, Nanos anchor, Nanos now) const noexcept override;
    Nanos time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept override;
    bool give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                   Pair& next) const noexcept override;
    const char* cannot_follow(const Rule& before) const noexcept override;
    void adopt(const Rule& next) noexcept override;
    void amounts(std::int64_t (&out)[2]) const noexcept override {
        out[0] = limit_;
        out[1] = per_period_;
    }
    Nanos full_at(Pair s, Nanos anchor) const noexcept override;
    std::unique_ptr<Projection> project(Pair s, Nanos anchor) const override;
    const char* damage(Pair s, Nanos anchor) const noexcept override;
    Pair exhausted(Nanos anchor, Nanos now) const noexcept override;

private:
    struct Proj;
    std::int64_t period_index(Nanos anchor, Nanos now) const noexcept {
        return now <= anchor ? 0 : (now - anchor) / period_;
    }
    /// Tokens at period p (>= s.a) of state s.
    std::int64_t tokens_at(Pair s, std::int64_t p) const noexcept;
    Nanos period_start(Nanos anchor, std::int64_t p) const noexcept;

    detail::Live<std::int64_t> limit_;
    detail::Live<std::int64_t> per_period_;
    Nanos period_;
};

class TokenBucket final : public RuleLimiter<TokenBucketRule> {
public:
    using RuleLimiter::RuleLimiter;
    TokenBucket(std::shared_ptr<Clock> clock, std::int64_t token_limit, std::int64_t tokens_per_period, Nanos period,
                QueueOptions queue, bool manual)
        : RuleLimiter(std::move(clock), TokenBucketRule(token_limit, tokens_per_period, period), queue, manual) {}
    std::int64_t token_limit() const noexcept { return rule().token_limit(); }
    std::int64_t tokens_per_period() const noexcept { return rule().tokens_per_period(); }
    Nanos period() const noexcept { return rule().period(); }
};

} // namespace permits
