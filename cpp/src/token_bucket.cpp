#include "permits/token_bucket.hpp"

#include <algorithm>
#include <stdexcept>

namespace permits {

TokenBucket::TokenBucket(std::shared_ptr<Clock> clock, std::int64_t token_limit, std::int64_t tokens_per_period,
                         Nanos period, QueueOptions queue, bool manual)
    : Limiter(std::move(clock), token_limit, queue, manual), limit_(token_limit), per_period_(tokens_per_period),
      period_(period), anchor_(state_now()), state_(Pair{0, token_limit}) {
    detail::check_limit("token_limit", token_limit);
    detail::check_limit("tokens_per_period", tokens_per_period);
    detail::check_duration("replenishment_period", period);
}

std::int64_t TokenBucket::tokens_at(Pair s, std::int64_t p) const noexcept {
    if (p <= s.a) {
        return s.b;
    }
    const i128 t = static_cast<i128>(s.b) + static_cast<i128>(p - s.a) * per_period_;
    return t >= limit_ ? limit_ : static_cast<std::int64_t>(t);
}

Nanos TokenBucket::period_start(std::int64_t p) const noexcept {
    return sat_nanos(static_cast<i128>(anchor_) + static_cast<i128>(p) * period_);
}

bool TokenBucket::take(std::int64_t n, Nanos now, std::int64_t& tag) {
    Pair s = state_.hint();
    for (;;) {
        const std::int64_t p = std::max(period_index(now), s.a); // never step back in time
        const std::int64_t tokens = tokens_at(s, p);
        if (tokens < n) {
            if (!state_.confirm(s)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        if (state_.compare_exchange(s, Pair{p, tokens - n})) {
            tag = p;
            return true;
        }
    }
}

std::int64_t TokenBucket::available_at(Nanos now) const {
    const Pair s = state_.load();
    return tokens_at(s, std::max(period_index(now), s.a));
}

Nanos TokenBucket::time_until(std::int64_t needed, Nanos now) const {
    const Pair s = state_.load();
    const std::int64_t p = std::max(period_index(now), s.a);
    const std::int64_t tokens = tokens_at(s, p);
    if (tokens >= needed) {
        return 0;
    }
    // Tokens arrive at period boundaries; queued requests ahead take theirs as they come.
    const std::int64_t periods = ceil_div(needed - tokens, per_period_);
    const Nanos at = period_start(p + periods);
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

void TokenBucket::put_back(std::int64_t n, std::int64_t /*tag*/, Nanos now) {
    Pair s = state_.load();
    for (;;) {
        const std::int64_t p = std::max(period_index(now), s.a);
        const std::int64_t tokens = std::min(limit_, tokens_at(s, p) + n);
        if (state_.compare_exchange(s, Pair{p, tokens})) {
            return;
        }
    }
}

Nanos TokenBucket::full_since(Nanos now) const {
    const Pair s = state_.load();
    if (s.b >= limit_) {
        return period_start(s.a);
    }
    const Nanos full_at = period_start(s.a + ceil_div(limit_ - s.b, per_period_));
    return full_at <= now ? full_at : kNever;
}

struct TokenBucket::Proj final : Projection {
    const TokenBucket& tb;
    i128 p;      // period index
    i128 tokens; // tokens at period p
    Proj(const TokenBucket& b, Pair s) : tb(b), p(s.a), tokens(s.b) {}

    i128 index_at(i128 t) const { return t <= tb.anchor_ ? 0 : (t - tb.anchor_) / tb.period_; }
    i128 tokens_at(i128 q) const {
        const i128 t = tokens + (q - p) * tb.per_period_;
        return t >= tb.limit_ ? tb.limit_ : t;
    }
    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        i128 q = std::max(index_at(not_before), p);
        i128 at = not_before;
        if (tokens_at(q) < need) {
            q += (need - tokens_at(q) + tb.per_period_ - 1) / tb.per_period_;
            at = static_cast<i128>(tb.anchor_) + q * tb.period_;
        }
        if (apply) {
            tokens = tokens_at(q) - n;
            p = q;
        }
        return at;
    }
};

std::unique_ptr<Projection> TokenBucket::project() const {
    return std::make_unique<Proj>(*this, state_.load());
}

} // namespace permits
