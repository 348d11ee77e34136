#include "permits/cancel_scope.hpp"

#include <algorithm>

namespace permits {

namespace {
// The scopes entered on this thread, innermost last.
thread_local std::vector<std::shared_ptr<CancelScope>> t_entered;
} // namespace

void CancelScope::cancel() {
    std::vector<Wait> waits;
    {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled_ = true;
        waits.swap(waits_);
    }
    for (auto& [owner, waiter] : waits) {
        owner->cancel(*waiter); // false if it completed meanwhile: its caller gets what it got
    }
}

bool CancelScope::cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
}

void CancelScope::enter() {
    t_entered.push_back(shared_from_this());
}

void CancelScope::leave() {
    const auto it = std::find(t_entered.rbegin(), t_entered.rend(), shared_from_this());
    if (it != t_entered.rend()) {
        t_entered.erase(std::next(it).base());
    }
}

bool CancelScope::cancelled_here() {
    return std::any_of(t_entered.begin(), t_entered.end(), [](const auto& s) { return s->cancelled(); });
}

bool CancelScope::add(Wait wait) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) {
        return false;
    }
    waits_.push_back(std::move(wait));
    return true;
}

void CancelScope::remove(const Waiter* waiter) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(waits_, [waiter](const Wait& w) { return w.second.get() == waiter; });
}

CancelScope::Watch::Watch(const std::shared_ptr<Limiter>& owner, std::shared_ptr<Waiter> waiter)
    : waiter_(std::move(waiter)), scopes_(t_entered) {
    bool cancel_now = false;
    for (const auto& scope : scopes_) {
        cancel_now = !scope->add({owner, waiter_}) || cancel_now;
    }
    if (cancel_now) {
        owner->cancel(*waiter_);
    }
}

CancelScope::Watch::~Watch() {
    for (const auto& scope : scopes_) {
        scope->remove(waiter_.get());
    }
}

} // namespace permits
