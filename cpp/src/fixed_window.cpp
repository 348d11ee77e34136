#include "permits/fixed_window.hpp"

#include <algorithm>

namespace permits {

FixedWindowRule::FixedWindowRule(std::int64_t permit_limit, Nanos window) : limit_(permit_limit), window_(window) {
    detail::check_limit("permit_limit", permit_limit);
    detail::check_duration("window", window);
}

Nanos FixedWindowRule::window_start(Nanos anchor, std::int64_t w) const noexcept {
    return sat_nanos(static_cast<i128>(anchor) + static_cast<i128>(w) * window_);
}

bool FixedWindowRule::take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next,
                           std::int64_t& tag) const noexcept {
    const std::int64_t w = std::max(window_index(anchor, now), s.a);
    const std::int64_t used = w == s.a ? s.b : 0;
    if (limit_ - used < n) {
        return false;
    }
    next = {w, used + n};
    tag = period_tag(anchor, w, window_);
    return true;
}

std::int64_t FixedWindowRule::available(Pair s, Nanos anchor, Nanos now) const noexcept {
    // More than the limit taken in this window after a lower limit: none available.
    const std::int64_t limit = limit_;
    return window_index(anchor, now) > s.a ? limit : std::max<std::int64_t>(0, limit - s.b);
}

Nanos FixedWindowRule::time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept {
    const std::int64_t w = std::max(window_index(anchor, now), s.a);
    const std::int64_t limit = limit_;
    const std::int64_t available = w == s.a ? std::max<std::int64_t>(0, limit - s.b) : limit;
    if (available >= needed) {
        return 0;
    }
    // Each later window brings `limit` permits (treated as fungible across windows).
    const Nanos at = window_start(anchor, w + ceil_div(needed - available, limit));
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

bool FixedWindowRule::give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                                Pair& next) const noexcept {
    // Only the current window's count can be given back; a past window is gone, and so is one of a
    // state made before this one (its windows started before this anchor).
    if (window_index(anchor, now) != s.a || period_tag(anchor, s.a, window_) != tag) {
        return false;
    }
    next = {s.a, std::max<std::int64_t>(0, s.b - n)};
    return next != s;
}

Nanos FixedWindowRule::full_at(Pair s, Nanos anchor) const noexcept {
    return window_start(anchor, s.b == 0 ? s.a : s.a + 1);
}

const char* FixedWindowRule::damage(Pair s, Nanos anchor) const noexcept {
    if (s.b < 0 || s.b > limit_) {
        return "its count is not between 0 and its permit_limit";
    }
    if (s.a < 0 || s.a > window_index(anchor, kMaxTime)) {
        return "its window is before its first or past the end of time";
    }
    return nullptr;
}

Pair FixedWindowRule::exhausted(Nanos anchor, Nanos now) const noexcept {
    return {window_index(anchor, now), limit_};
}

struct FixedWindowRule::Proj final : Projection {
    const FixedWindowRule& fw;
    const Nanos anchor;
    i128 w;    // window index
    i128 used; // permits taken in window w
    Proj(const FixedWindowRule& f, Nanos a, Pair s) : fw(f), anchor(a), w(s.a), used(s.b) {}

    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        const i128 now_w = not_before <= anchor ? 0 : (not_before - anchor) / fw.window_;
        i128 v = std::max(now_w, w);
        i128 u = v == w ? used : 0;
        i128 at = not_before;
        if (fw.limit_.get() - u < need) {
            ++v; // head-of-line: what this window has left is not enough, the next one is
            u = 0;
            at = static_cast<i128>(anchor) + v * fw.window_;
        }
        if (apply) {
            w = v;
            used = u + n;
        }
        return at;
    }
};

std::unique_ptr<Projection> FixedWindowRule::project(Pair s, Nanos anchor) const {
    return std::make_unique<Proj>(*this, anchor, s);
}

const char* FixedWindowRule::cannot_follow(const Rule& before) const noexcept {
    return detail::cannot_follow_as(*this, before, &FixedWindowRule::window_, "a limiter keeps its window");
}

void FixedWindowRule::adopt(const Rule& next) noexcept {
    limit_.set(next.max_permits());
}

} // namespace permits
