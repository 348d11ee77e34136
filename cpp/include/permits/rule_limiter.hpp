// A limiter whose state is one atomic word changed by a Rule: the lock-free acquire of the
// token bucket, fixed window, sliding window counter and concurrency limiters.
#pragma once

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

/// `R` is a final Rule: its calls here are direct, not virtual.
template <class R> class RuleLimiter : public Limiter {
public:
    RuleLimiter(std::shared_ptr<Clock> clock, const R& rule, QueueOptions queue, bool manual)
        : Limiter(std::move(clock), rule.max_permits(), queue, manual), rule_(rule), anchor_(state_now()),
          state_(rule_.initial(anchor_)) {}
    /// Goes on from a state kept elsewhere (a per-key record whose requests now have to queue).
    RuleLimiter(std::shared_ptr<Clock> clock, const R& rule, QueueOptions queue, Nanos anchor, Pair state)
        : Limiter(std::move(clock), rule.max_permits(), queue, false), rule_(rule), anchor_(anchor), state_(state) {}

    const R& rule() const noexcept { return rule_; }
    Nanos anchor() const noexcept { return anchor_; }
    bool releases_permits() const noexcept override { return rule_.releases_permits(); }
    Nanos full_at() const override { return rule_.full_at(state_.load(), anchor_); }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override {
        Pair s = state_.hint();
        for (;;) {
            Pair next;
            if (!rule_.take(s, anchor_, n, now, next, tag)) {
                if (!state_.confirm(s)) {
                    continue; // decided on a stale guess: decide again
                }
                return false;
            }
            if (state_.compare_exchange(s, next)) {
                return true;
            }
        }
    }
    std::int64_t available_at(Nanos now) const override { return rule_.available(state_.load(), anchor_, now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override {
        return rule_.time_until(state_.load(), anchor_, needed, now);
    }
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) override {
        Pair s = state_.hint();
        for (;;) {
            Pair next;
            if (!rule_.give_back(s, anchor_, n, tag, now, next)) {
                if (!state_.confirm(s)) {
                    continue;
                }
                return;
            }
            if (state_.compare_exchange(s, next)) {
                return;
            }
        }
    }
    std::unique_ptr<Projection> project() const override { return rule_.project(state_.load(), anchor_); }

private:
    const R rule_;
    const Nanos anchor_;
    AtomicPair state_;
};

} // namespace permits
