#include "permits/sliding_window_counter.hpp"

#include <algorithm>
#include <stdexcept>

namespace permits {

namespace {
std::int64_t pack_counts(std::int64_t previous, std::int64_t current) {
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(previous) << 32) |
                                     static_cast<std::uint64_t>(current));
}
} // namespace

SlidingWindowCounter::SlidingWindowCounter(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window,
                                           QueueOptions queue, bool manual)
    : Limiter(std::move(clock), permit_limit, queue, manual), limit_(permit_limit), window_(window),
      anchor_(state_now()) {
    detail::check_limit("permit_limit", permit_limit);
    detail::check_duration("window", window);
}

Nanos SlidingWindowCounter::window_start(std::int64_t w) const noexcept {
    return sat_nanos(static_cast<i128>(anchor_) + static_cast<i128>(w) * window_);
}

SlidingWindowCounter::Counts SlidingWindowCounter::counts_at(Pair s, std::int64_t w) noexcept {
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

i128 SlidingWindowCounter::room(const Counts& c, Nanos now) const noexcept {
    const Nanos elapsed = std::clamp<Nanos>(now - window_start(c.window), 0, window_);
    return static_cast<i128>(limit_) * window_ - static_cast<i128>(c.previous) * (window_ - elapsed) -
           static_cast<i128>(c.current) * window_;
}

bool SlidingWindowCounter::take(std::int64_t n, Nanos now, std::int64_t& tag) {
    Pair s = state_.hint();
    for (;;) {
        const Counts c = counts_at(s, std::max(window_index(now), s.a));
        if (room(c, now) < static_cast<i128>(n) * window_) {
            if (!state_.confirm(s)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        if (state_.compare_exchange(s, Pair{c.window, pack_counts(c.previous, c.current + n)})) {
            tag = c.window;
            return true;
        }
    }
}

std::int64_t SlidingWindowCounter::available_at(Nanos now) const {
    const Pair s = state_.load();
    const i128 r = room(counts_at(s, std::max(window_index(now), s.a)), now);
    return r <= 0 ? 0 : static_cast<std::int64_t>(r / window_); // floor of a non-negative value
}

Nanos SlidingWindowCounter::time_until(std::int64_t needed, Nanos now) const {
    const Pair s = state_.load();
    Counts c = counts_at(s, std::max(window_index(now), s.a));
    // The earliest elapsed time e in window c.window with previous*(W-e) <= (limit-current-needed)*W.
    auto earliest = [&](const Counts& k) -> Nanos {
        const std::int64_t spare = limit_ - k.current - needed;
        if (spare < 0) {
            return kNever;
        }
        if (k.previous == 0) {
            return window_start(k.window);
        }
        const i128 slack = static_cast<i128>(spare) * window_ / k.previous;
        const Nanos e = slack >= window_ ? 0 : window_ - static_cast<Nanos>(slack);
        return sat_add(window_start(k.window), e);
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
        at = window_start(c.window);
    }
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

void SlidingWindowCounter::put_back(std::int64_t n, std::int64_t tag, Nanos now) {
    Pair s = state_.load();
    for (;;) {
        if (s.a != tag || window_index(now) != tag) {
            return; // only the current window's count can be given back
        }
        const Counts c = counts_at(s, tag);
        if (state_.compare_exchange(s, Pair{tag, pack_counts(c.previous, std::max<std::int64_t>(0, c.current - n))})) {
            return;
        }
    }
}

Nanos SlidingWindowCounter::full_since(Nanos now) const {
    const Pair s = state_.load();
    const Counts c = counts_at(s, s.a);
    Nanos since = window_start(s.a);
    if (c.current > 0) {
        since = window_start(s.a + 2); // the current count stops weighing when the next window ends
    } else if (c.previous > 0) {
        since = window_start(s.a + 1);
    }
    return since <= now ? since : kNever;
}

struct SlidingWindowCounter::Proj final : Projection {
    const SlidingWindowCounter& sw;
    i128 w, previous, current;
    Proj(const SlidingWindowCounter& c, Pair s) : sw(c) {
        const Counts k = counts_at(s, s.a);
        w = k.window;
        previous = k.previous;
        current = k.current;
    }

    i128 start(i128 v) const { return static_cast<i128>(sw.anchor_) + v * sw.window_; }
    // Earliest time >= t in window v with prev*(W - e) + (cur + need)*W <= limit*W, or -1.
    i128 earliest(i128 v, i128 prev, i128 cur, std::int64_t need, i128 t) const {
        const i128 spare = sw.limit_ - cur - need;
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
        const i128 now_w = not_before <= sw.anchor_ ? 0 : (not_before - sw.anchor_) / sw.window_;
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

std::unique_ptr<Projection> SlidingWindowCounter::project() const {
    return std::make_unique<Proj>(*this, state_.load());
}

} // namespace permits
