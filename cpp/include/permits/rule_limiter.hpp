// A limiter whose state is one atomic word changed by a Rule: the lock-free acquire of the
// token bucket, fixed window, sliding window counter and concurrency limiters.
#pragma once

#include <memory>
#include <stdexcept>

#include "permits/atomic_pair.hpp"
#include "permits/limiter.hpp"

namespace permits {

/// A state kept outside the limiter (a slot of a shared-memory segment): its word, its anchor, and
/// what keeps that memory mapped while the limiter lives.
struct ExternalState {
    AtomicPair* word = nullptr;
    Nanos anchor = 0;
    std::shared_ptr<const void> keep_alive;
};

namespace detail {
/// A rule's take on a state word: the one compare-and-swap loop of every rule-driven limiter,
/// whether the word is a limiter's own, a slot of a shared segment or a per-key record.
template <class R>
bool rule_take(const R& rule, AtomicPair& state, Nanos anchor, std::int64_t n, Nanos now, std::int64_t& tag) {
    Pair s = state.hint();
    for (;;) {
        Pair next;
        if (!rule.take(s, anchor, n, now, next, tag)) {
            if (!state.confirm(s)) {
                continue; // decided on a stale guess: decide again
            }
            return false;
        }
        if (state.compare_exchange(s, next)) {
            return true;
        }
    }
}

template <class R>
void rule_give_back(const R& rule, AtomicPair& state, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now) {
    Pair s = state.hint();
    for (;;) {
        Pair next;
        if (!rule.give_back(s, anchor, n, tag, now, next)) {
            if (!state.confirm(s)) {
                continue;
            }
            return;
        }
        if (state.compare_exchange(s, next)) {
            return;
        }
    }
}
} // namespace detail

/// `R` is a final Rule: its calls here are direct, not virtual.
template <class R> class RuleLimiter : public Limiter {
public:
    RuleLimiter(std::shared_ptr<Clock> clock, const R& rule, QueueOptions queue, bool manual)
        : Limiter(std::move(clock), rule.max_permits(), queue, manual), rule_(rule), anchor_(state_now()),
          own_(rule_.initial(anchor_)), state_(&own_) {}
    /// Goes on from a state kept elsewhere (a per-key record whose requests now have to queue).
    RuleLimiter(std::shared_ptr<Clock> clock, const R& rule, QueueOptions queue, Nanos anchor, Pair state)
        : Limiter(std::move(clock), rule.max_permits(), queue, false), rule_(rule), anchor_(anchor), own_(state),
          state_(&own_) {}
    /// Runs on a state word it does not own (shared memory: other processes change it too).
    RuleLimiter(std::shared_ptr<Clock> clock, const R& rule, QueueOptions queue, ExternalState external)
        : Limiter(std::move(clock), rule.max_permits(), queue, false), rule_(rule), anchor_(external.anchor),
          state_(external.word), keep_alive_(std::move(external.keep_alive)) {}

    const R& rule() const noexcept { return rule_; }
    Nanos anchor() const noexcept { return anchor_; }
    bool releases_permits() const noexcept override { return rule().releases_permits(); }
    bool shares_state() const noexcept override { return keep_alive_ != nullptr; }
    Nanos full_at() const override { return rule().full_at(state_->load(), anchor_); }
    void amounts(std::int64_t (&out)[2]) const noexcept override { rule().amounts(out); }

    /// From now on `rule` and `queue` hold; the state is kept (what is taken stays taken, a lower
    /// limit holds as permits come back). A request deciding as it changes is decided under
    /// either. std::invalid_argument if `rule` cannot take the state over (another window,
    /// period); ClosedError once closed.
    void reconfigure(const R& rule, QueueOptions queue) {
        if (const char* why = rule.cannot_follow(this->rule()); why != nullptr) {
            throw std::invalid_argument(why);
        }
        std::int64_t amounts[2] = {};
        rule.amounts(amounts);
        reconfigure_with(
            rule.max_permits(), queue, [&] { rule_.adopt(rule); }, amounts);
    }
    /// Takes on `rule`'s amounts another process published (a follower: Limiter::follow), the
    /// queue options kept; `rule` was checked where it was published.
    void take_on(const R& rule) {
        apply_change(rule.max_permits(), queue_options(), [&] { rule_.adopt(rule); });
    }

protected:
    bool take(std::int64_t n, Nanos now, std::int64_t& tag) override {
        return detail::rule_take(rule(), *state_, anchor_, n, now, tag);
    }
    std::int64_t available_at(Nanos now) const override { return rule().available(state_->load(), anchor_, now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override {
        return rule().time_until(state_->load(), anchor_, needed, now);
    }
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) override {
        detail::rule_give_back(rule(), *state_, anchor_, n, tag, now);
    }
    std::unique_ptr<Projection> project() const override { return rule().project(state_->load(), anchor_); }
    bool reset_state(Nanos /*now*/) override {
        // A new limiter's state is full at any time after its anchor: a take moves it on to now.
        Pair s = state_->load();
        while (!state_->compare_exchange(s, rule().initial(anchor_))) {
        }
        return true;
    }

private:
    R rule_; // its amounts change in place (reconfigure): the state is never touched
    const Nanos anchor_;
    AtomicPair own_;                         // the state, unless it is kept elsewhere
    AtomicPair* const state_;                // &own_, or a shared slot's word
    std::shared_ptr<const void> keep_alive_; // what maps an external word
};

} // namespace permits
