#include "permits/sliding_window_counter.hpp"

#include <algorithm>

namespace permits {

namespace {
std::int64_t pack_counts(std::int64_t previous, std::int64_t current) {
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(previous) << 32) |
                                     static_cast<std::uint64_t>(current));
}
} // namespace

SlidingWindowCounterRule::SlidingWindowCounterRule(std::int64_t permit_limit, Nanos window)
    : limit_(permit_limit), window_(window) {
    detail::check_limit("permit_limit", permit_limit);
    detail::check_duration("window", window);
}

Nanos SlidingWindowCounterRule::window_start(Nanos anchor, std::int64_t w) const noexcept {
    return sat_nanos(static_cast<i128>(anchor) + static_cast<i128>(w) * window_);
}

SlidingWindowCounterRule::Counts SlidingWindowCounterRule::counts_at(Pair s, std::int64_t w) noexcept {
    const auto packed = static_cast<std::uint64_t>(s.b);
    const auto previous = static_cast<std::int64_t>(packed >> 32);
    const auto current = static_cast<std::int64_t>(packed & 0xffffffffU);
    if (w <= s.a) {
        return {s.a, previous, current};
    }
    if (w == s.a + 1) {
        return {w, current, 0};
    }
    return {w, 0, 0}; // after a long gap the previous window counts 0
}

i128 SlidingWindowCounterRule::room(const Counts& c, Nanos anchor, Nanos now) const noexcept {
    const Nanos elapsed = std::clamp<Nanos>(now - window_start(anchor, c.window), 0, window_);
    return static_cast<i128>(limit_.get()) * window_ - static_cast<i128>(c.previous) * (window_ - elapsed) -
           static_cast<i128>(c.current) * window_;
}

bool SlidingWindowCounterRule::take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next,
                                    std::int64_t& tag) const noexcept {
    // room() >= n * W, rearranged: one division gives the window and the time into it, and two
    // multiplications decide (no window start to rebuild; benchmarks/cpp/bench_engine.cpp).
    const Nanos since = now <= anchor ? 0 : now - anchor;
    const std::int64_t current_window = since / window_;
    const Counts c = counts_at(s, std::max(current_window, s.a));
    const Nanos elapsed = c.window == current_window ? since % window_ : 0; // a later stored window: none
    if (static_cast<i128>(limit_ - c.current - n) * window_ < static_cast<i128>(c.previous) * (window_ - elapsed)) {
        return false;
    }
    next = {c.window, pack_counts(c.previous, c.current + n)};
    tag = period_tag(anchor, c.window, window_);
    return true;
}

std::int64_t SlidingWindowCounterRule::available(Pair s, Nanos anchor, Nanos now) const noexcept {
    const i128 r = room(counts_at(s, std::max(window_index(anchor, now), s.a)), anchor, now);
    return r <= 0 ? 0 : static_cast<std::int64_t>(r / window_); // floor of a non-negative value
}

Nanos SlidingWindowCounterRule::time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept {
    Counts c = counts_at(s, std::max(window_index(anchor, now), s.a));
    // The earliest elapsed time e in window c.window with previous*(W-e) <= (limit-current-needed)*W.
    auto earliest = [&](const Counts& k) -> Nanos {
        const std::int64_t spare = limit_ - k.current - needed;
        if (spare < 0) {
            return kNever;
        }
        if (k.previous == 0) {
            return window_start(anchor, k.window);
        }
        const i128 slack = static_cast<i128>(spare) * window_ / k.previous;
        const Nanos e = slack >= window_ ? 0 : window_ - static_cast<Nanos>(slack);
        return sat_add(window_start(anchor, k.window), e);
    };
    Nanos at = earliest(c);
    if (at == kNever) {
        c = {c.window + 1, c.current, 0};
        at = earliest(c);
    }
    if (at == kNever) {
        // More than one window's worth is needed (requests queued ahead): count whole windows.
        const std::int64_t extra = ceil_div(needed - limit_, limit_);
        c = {c.window + 1 + extra, 0, 0};
        at = window_start(anchor, c.window);
    }
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

bool SlidingWindowCounterRule::give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                                         Pair& next) const noexcept {
    if (window_index(anchor, now) != s.a || period_tag(anchor, s.a, window_) != tag) {
        return false; // only the current window's count can be given back (of this state's windows)
    }
    const Counts c = counts_at(s, s.a);
    next = {s.a, pack_counts(c.previous, std::max<std::int64_t>(0, c.current - n))};
    return next != s;
}

Nanos SlidingWindowCounterRule::full_at(Pair s, Nanos anchor) const noexcept {
    const Counts c = counts_at(s, s.a);
    if (c.current > 0) {
        return window_start(anchor, s.a + 2); // the current count stops weighing when the next window ends
    }
    return window_start(anchor, c.previous > 0 ? s.a + 1 : s.a);
}

const char* SlidingWindowCounterRule::damage(Pair s, Nanos anchor) const noexcept {
    const Counts c = counts_at(s, s.a); // (both counts are 32 bits: never below zero)
    if (c.previous > limit_ || c.current > limit_) {
        return "a count is beyond its permit_limit";
    }
    if (s.a < 0 || s.a > window_index(anchor, kMaxTime)) {
        return "its window is before its first or past the end of time";
    }
    return nullptr;
}

Pair SlidingWindowCounterRule::exhausted(Nanos anchor, Nanos now) const noexcept {
    return {window_index(anchor, now), pack_counts(0, limit_)};
}

struct SlidingWindowCounterRule::Proj final : Projection {
    const SlidingWindowCounterRule& sw;
    const Nanos anchor;
    i128 w, previous, current;
    Proj(const SlidingWindowCounterRule& c, Nanos a, Pair s) : sw(c), anchor(a) {
        const Counts k = counts_at(s, s.a);
        w = k.window;
        previous = k.previous;
        current = k.current;
    }

    i128 start(i128 v) const { return static_cast<i128>(anchor) + v * sw.window_; }
    // Earliest time >= t in window v with prev*(W - e) + (cur + need)*W <= limit*W, or -1.
    i128 earliest(i128 v, i128 prev, i128 cur, std::int64_t need, i128 t) const {
        const i128 spare = sw.limit_.get() - cur - need;
        if (spare < 0) {
            return -1;
        }
        i128 e = 0;
        if (prev > 0) {
            const i128 slack = spare * sw.window_ / prev;
            e = slack >= sw.window_ ? 0 : sw.window_ - slack;
        }
        const i128 at = std::max(t, start(v) + e);
        return at >= start(v + 1) ? -1 : at; // at the boundary the counts are the next window's
    }
    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        const i128 now_w = not_before <= anchor ? 0 : (not_before - anchor) / sw.window_;
        i128 v = std::max(now_w, w);
        i128 prev = v == w ? previous : (v == w + 1 ? current : 0);
        i128 cur = v == w ? current : 0;
        i128 at = earliest(v, prev, cur, need, not_before);
        while (at < 0) { // not in this window: the next one, where this window's count weighs less
            prev = cur;
            cur = 0;
            ++v;
            at = earliest(v, prev, cur, need, not_before);
        }
        if (apply) {
            w = v;
            previous = prev;
            current = cur + n;
        }
        return at;
    }
};

std::unique_ptr<Projection> SlidingWindowCounterRule::project(Pair s, Nanos anchor) const {
    return std::make_unique<Proj>(*this, anchor, s);
}

const char* SlidingWindowCounterRule::cannot_follow(const Rule& before) const noexcept {
    return detail::cannot_follow_as(*this, before, &SlidingWindowCounterRule::window_, "a limiter keeps its window");
}

void SlidingWindowCounterRule::adopt(const Rule& next) noexcept {
    limit_.set(next.max_permits());
}

} // namespace permits
