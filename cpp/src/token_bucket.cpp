#include "permits/token_bucket.hpp"

#include <algorithm>

namespace permits {

TokenBucketRule::TokenBucketRule(std::int64_t token_limit, std::int64_t tokens_per_period, Nanos period)
    : limit_(token_limit), per_period_(tokens_per_period), period_(period) {
    detail::check_limit("token_limit", token_limit);
    detail::check_limit("tokens_per_period", tokens_per_period);
    detail::check_duration("replenishment_period", period);
}

std::int64_t TokenBucketRule::tokens_at(Pair s, std::int64_t p) const noexcept {
    const std::int64_t limit = limit_;
    if (p <= s.a) {
        return std::min(s.b, limit); // (more after a lower token_limit: the bucket holds no more)
    }
    const i128 t = static_cast<i128>(s.b) + static_cast<i128>(p - s.a) * per_period_.get();
    return t >= limit ? limit : static_cast<std::int64_t>(t);
}

Nanos TokenBucketRule::period_start(Nanos anchor, std::int64_t p) const noexcept {
    return sat_nanos(static_cast<i128>(anchor) + static_cast<i128>(p) * period_);
}

bool TokenBucketRule::take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next,
                           std::int64_t& tag) const noexcept {
    const std::int64_t p = std::max(period_index(anchor, now), s.a); // never step back in time
    const std::int64_t tokens = tokens_at(s, p);
    if (tokens < n) {
        return false;
    }
    next = {p, tokens - n};
    tag = period_tag(anchor, p, period_);
    return true;
}

std::int64_t TokenBucketRule::available(Pair s, Nanos anchor, Nanos now) const noexcept {
    return tokens_at(s, std::max(period_index(anchor, now), s.a));
}

Nanos TokenBucketRule::time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept {
    const std::int64_t p = std::max(period_index(anchor, now), s.a);
    const std::int64_t tokens = tokens_at(s, p);
    if (tokens >= needed) {
        return 0;
    }
    // Tokens arrive at period boundaries; queued requests ahead take theirs as they come.
    const std::int64_t periods = ceil_div(needed - tokens, per_period_);
    const Nanos at = period_start(anchor, p + periods);
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

bool TokenBucketRule::give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                                Pair& next) const noexcept {
    if (tag < anchor) {
        return false; // granted by a state made before this one: this one started full
    }
    const std::int64_t p = std::max(period_index(anchor, now), s.a);
    const std::int64_t granted_in = period_index(anchor, tag);
    // Only what the bucket could not have refilled since the grant (in period `granted_in`) comes
    // back: had the grant never happened, each refill since would have found those tokens there
    // already, so giving back more would let it grant more in some interval than its rate allows.
    const i128 refilled = static_cast<i128>(std::max<std::int64_t>(0, p - granted_in)) * per_period_.get();
    if (refilled >= n) {
        return false;
    }
    const i128 tokens = static_cast<i128>(tokens_at(s, p)) + (n - refilled);
    const std::int64_t limit = limit_;
    next = {p, tokens >= limit ? limit : static_cast<std::int64_t>(tokens)};
    return next != s;
}

Nanos TokenBucketRule::full_at(Pair s, Nanos anchor) const noexcept {
    if (s.b >= limit_) {
        return period_start(anchor, s.a);
    }
    return period_start(anchor, s.a + ceil_div(limit_ - s.b, per_period_));
}

const char* TokenBucketRule::damage(Pair s, Nanos anchor) const noexcept {
    if (s.b < 0 || s.b > limit_) {
        return "its tokens are not between 0 and its token_limit";
    }
    if (s.a < 0 || s.a > period_index(anchor, kMaxTime)) {
        return "its period is before its first or past the end of time";
    }
    return nullptr;
}

Pair TokenBucketRule::exhausted(Nanos anchor, Nanos now) const noexcept {
    return {period_index(anchor, now), 0};
}

struct TokenBucketRule::Proj final : Projection {
    const TokenBucketRule& tb;
    const Nanos anchor;
    i128 p;      // period index
    i128 tokens; // tokens at period p
    Proj(const TokenBucketRule& b, Nanos a, Pair s) : tb(b), anchor(a), p(s.a), tokens(s.b) {}

    i128 index_at(i128 t) const { return t <= anchor ? 0 : (t - anchor) / tb.period_; }
    i128 tokens_at(i128 q) const {
        const i128 t = tokens + (q - p) * tb.per_period_.get();
        const i128 limit = tb.limit_.get();
        return t >= limit ? limit : t;
    }
    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        i128 q = std::max(index_at(not_before), p);
        i128 at = not_before;
        if (tokens_at(q) < need) {
            q += (need - tokens_at(q) + tb.per_period_.get() - 1) / tb.per_period_.get();
            at = static_cast<i128>(anchor) + q * tb.period_;
        }
        if (apply) {
            tokens = tokens_at(q) - n;
            p = q;
        }
        return at;
    }
};

std::unique_ptr<Projection> TokenBucketRule::project(Pair s, Nanos anchor) const {
    return std::make_unique<Proj>(*this, anchor, s);
}

const char* TokenBucketRule::cannot_follow(const Rule& before) const noexcept {
    return detail::cannot_follow_as(*this, before, &TokenBucketRule::period_,
                                    "a limiter keeps its replenishment_period");
}

void TokenBucketRule::adopt(const Rule& next) noexcept {
    const auto& bucket = static_cast<const TokenBucketRule&>(next); // (cannot_follow: the same kind)
    limit_.set(bucket.limit_);
    per_period_.set(bucket.per_period_);
}

} // namespace permits
