#include "permits/waiter.hpp"

#include <chrono>
#include <new>

namespace permits {

Notifier::Notifier(detail::WakeKind kind) : channel_(kind) {
    detail::ForkRegistry::add(this);
}

Notifier::~Notifier() {
    detail::ForkRegistry::remove(this);
}

void Notifier::push(std::shared_ptr<Waiter> w) {
    bool signal = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(w));
        signal = !signalled_;
        signalled_ = true;
    }
    if (signal) {
        channel_.signal(); // one byte per batch
        wakeups_.fetch_add(1);
    }
}

std::vector<std::shared_ptr<Waiter>> Notifier::drain() {
    std::vector<std::shared_ptr<Waiter>> out;
    drain_into(out);
    return out;
}

void Notifier::drain_into(std::vector<std::shared_ptr<Waiter>>& out) {
    out.clear();
    channel_.empty();
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(ready_);
    signalled_ = false;
}

bool Waiter::complete(const Outcome& o) {
    int expected = Pending;
    // Claim, write, publish: a late second completion changes nothing, and a reader that sees
    // Completed sees the outcome.
    if (!state_.compare_exchange_strong(expected, Completing)) {
        return false;
    }
    outcome_ = o;
    state_.store(Completed);
    if (notifier_) {
        // Handed over, not kept: the notifier holds this waiter until drained, and a waiter holding
        // its notifier back would be a cycle that keeps both (and the wake-up descriptors) alive for
        // ever when nobody drains it (a loop closed with the grant undelivered, a cancelled wait).
        const std::shared_ptr<Notifier> notifier = std::move(notifier_);
        notifier->push(shared_from_this());
    } else {
        std::lock_guard<std::mutex> lock(mu_);
        cv_.notify_all();
    }
    return true;
}

bool Waiter::cancel() noexcept {
    int expected = Pending;
    if (!state_.compare_exchange_strong(expected, Cancelled)) {
        return false;
    }
    // Nothing will be delivered: the notifier (and its descriptors) need not wait for this entry
    // to leave its limiter's queue, which may hold it until a later pass.
    if (notifier_) {
        notifier_.reset();
    } else {
        std::lock_guard<std::mutex> lock(mu_); // a thread blocked in wait_for() wakes: cancelled
        cv_.notify_all();
    }
    return true;
}

void Waiter::abandon() noexcept {
    int expected = Pending;
    state_.compare_exchange_strong(expected, Cancelled);
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
}

bool Waiter::wait_for(Nanos timeout_ns) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                 [this] { return state() == Completed || state() == Cancelled; });
    return state() == Completed;
}

} // namespace permits
