// Token bucket: integer tokens; `tokens_per_period` added for every whole period since the
// anchor (construction), capped at `token_limit` (semantics.md 2).
#pragma once

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

class TokenBucket final : public Limiter {
public:
    TokenBucket(std::shared_ptr<Clock> clock, std::int64_t token_limit, std::int64_t tokens_per_period, Nanos period,
                QueueOptions queue, bool manual);
    std::int64_t token_limit() const noexcept { return limit_; }
    std::int64_t tokens_per_period() const noexcept { return per_period_; }
    Nanos period() const noexcept { return period_; }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override;
    std::int64_t available_at(Nanos now) const override;
    Nanos time_until(std::int64_t needed, Nanos now) const override;
    void put_back(std::int64_t n, std::int64_t tag, Nanos now) override;
    Nanos full_since(Nanos now) const override;
    std::unique_ptr<Projection> project() const override;

private:
    struct Proj;
    std::int64_t period_index(Nanos now) const noexcept { return now <= anchor_ ? 0 : (now - anchor_) / period_; }
    /// Tokens at period p of a state {a: period of last change, b: tokens then}.
    std::int64_t tokens_at(Pair s, std::int64_t p) const noexcept;
    Nanos period_start(std::int64_t p) const noexcept;

    const std::int64_t limit_;
    const std::int64_t per_period_;
    const Nanos period_;
    const Nanos anchor_;
    AtomicPair state_; // {period index of the last change, tokens at that period}
};

} // namespace permits
