#include "permits/clock.hpp"

#include <chrono>
#include <stdexcept>

namespace permits {

std::shared_ptr<MonotonicClock> MonotonicClock::instance() {
    static const auto clock = std::make_shared<MonotonicClock>();
    return clock;
}

Nanos MonotonicClock::now() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

ManualClock::ManualClock(Nanos start) : now_(start) {
    if (start < 0 || start > kMaxTime) {
        throw std::invalid_argument("a ManualClock starts between 0 and 2**63 - 2**60 ns");
    }
}

void ManualClock::schedule(std::weak_ptr<TimerTarget> target, Nanos when) {
    std::lock_guard<std::mutex> lock(mu_);
    heap_.push(when, std::move(target));
}

void ManualClock::advance(Nanos delta) {
    std::lock_guard<std::mutex> order(advance_mu_);
    if (delta < 0 || delta > kMaxTime - now_.load()) {
        throw std::invalid_argument("a ManualClock moves forward, and at most to 2**63 - 2**60 ns");
    }
    now_.fetch_add(delta);
    // Timers may schedule more timers that are already due: keep going until none is.
    for (;;) {
        std::weak_ptr<TimerTarget> due;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!heap_.pop_due(now_.load(), due)) {
                return;
            }
        }
        if (auto target = due.lock()) {
            target->on_timer(now_.load());
        }
    }
}

void ManualClock::run_due() {
    advance(0);
}

std::size_t ManualClock::pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.size();
}

} // namespace permits
