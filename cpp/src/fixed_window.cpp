#include "permits/fixed_window.hpp"

#include <algorithm>
#include <stdexcept>

namespace permits {

FixedWindow::FixedWindow(std::shared_ptr<Clock> clock, std::int64_t permit_limit, Nanos window, QueueOptions queue,
                         bool manual)
    : Limiter(std::move(clock), permit_limit, queue, manual), limit_(permit_limit), window_(window),
      anchor_(state_now()) {
    detail::check_limit("permit_limit", permit_limit);
    detail::check_duration("window", window);
}

Nanos FixedWindow::window_start(std::int64_t w) const noexcept {
    return sat_nanos(static_cast<i128>(anchor_) + static_cast<i128>(w) * window_);
}

bool FixedWindow::take(std::int64_t n, Nanos now, std::int64_t& tag) {
    Pair s = state_.hint();
    for (;;) {
        const std::int64_t w = std::max(window_index(now), s.a);
        const std::int64_t used = w == s.a ? s.b : 0;
        if (limit_ - used < n) {
            if (!state_.confirm(s)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        if (state_.compare_exchange(s, Pair{w, used + n})) {
            tag = w;
            return true;
        }
    }
}

std::int64_t FixedWindow::available_at(Nanos now) const {
    const Pair s = state_.load();
    return window_index(now) > s.a ? limit_ : limit_ - s.b;
}

Nanos FixedWindow::time_until(std::int64_t needed, Nanos now) const {
    const Pair s = state_.load();
    const std::int64_t w = std::max(window_index(now), s.a);
    const std::int64_t available = w == s.a ? limit_ - s.b : limit_;
    if (available >= needed) {
        return 0;
    }
    // Each later window brings `limit` permits (treated as fungible across windows).
    const Nanos at = window_start(w + ceil_div(needed - available, limit_));
    return at == kNever ? kNever : std::max<Nanos>(0, at - now);
}

void FixedWindow::put_back(std::int64_t n, std::int64_t tag, Nanos now) {
    Pair s = state_.load();
    for (;;) {
        // Only the current window's count can be given back; a past window is gone.
        if (s.a != tag || window_index(now) != tag) {
            return;
        }
        if (state_.compare_exchange(s, Pair{s.a, std::max<std::int64_t>(0, s.b - n)})) {
            return;
        }
    }
}

Nanos FixedWindow::full_since(Nanos now) const {
    const Pair s = state_.load();
    if (s.b == 0) {
        return window_start(s.a);
    }
    const Nanos next = window_start(s.a + 1);
    return next <= now ? next : kNever;
}

struct FixedWindow::Proj final : Projection {
    const FixedWindow& fw;
    i128 w;    // window index
    i128 used; // permits taken in window w
    Proj(const FixedWindow& f, Pair s) : fw(f), w(s.a), used(s.b) {}

    i128 grant(std::int64_t n, i128 not_before, bool apply) override {
        const std::int64_t need = std::max<std::int64_t>(n, 1);
        const i128 now_w = not_before <= fw.anchor_ ? 0 : (not_before - fw.anchor_) / fw.window_;
        i128 v = std::max(now_w, w);
        i128 u = v == w ? used : 0;
        i128 at = not_before;
        if (fw.limit_ - u < need) {
            ++v; // head-of-line: what this window has left is not enough, the next one is
            u = 0;
            at = static_cast<i128>(fw.anchor_) + v * fw.window_;
        }
        if (apply) {
            w = v;
            used = u + n;
        }
        return at;
    }
};

std::unique_ptr<Projection> FixedWindow::project() const {
    return std::make_unique<Proj>(*this, state_.load());
}

} // namespace permits
