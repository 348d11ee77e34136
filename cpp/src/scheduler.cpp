#include "permits/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "permits/clock.hpp"
#include "permits/fork.hpp"

namespace permits {

void TimerHeap::push(Nanos when, std::weak_ptr<TimerTarget> target, const TimerTarget* raw) {
    heap_.push_back({when, seq_++, std::move(target), raw});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
}

bool TimerHeap::pop_due(Nanos now, std::weak_ptr<TimerTarget>& out) {
    if (heap_.empty() || heap_.front().when > now) {
        return false;
    }
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    out = std::move(heap_.back().target);
    heap_.pop_back();
    return true;
}

std::size_t TimerHeap::remove(const TimerTarget* target) {
    const std::size_t removed = std::erase_if(heap_, [target](const Entry& e) { return e.raw == target; });
    if (removed > 0) {
        std::make_heap(heap_.begin(), heap_.end(), Later{});
    }
    if (heap_.empty()) {
        heap_.shrink_to_fit(); // a burst of timers leaves no buffer behind
    }
    return removed;
}

Nanos TimerHeap::next() const {
    return heap_.empty() ? kNever : heap_.front().when;
}

EngineThread& EngineThread::instance() {
    // Leaked on purpose: the thread must outlive every limiter, including those destroyed
    // during interpreter shutdown, and is never joined from a static destructor.
    static EngineThread* engine = new EngineThread();
    return *engine;
}

std::size_t EngineThread::pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.size();
}

void EngineThread::start_locked() {
    // Started on first use and detached: it lives as long as the process.
    std::thread([this] { run(); }).detach();
    started_ = true;
    threads_started_.fetch_add(1);
}

void EngineThread::schedule(std::weak_ptr<TimerTarget> target, Nanos when) {
    const TimerTarget* raw = target.lock().get(); // not under mu_: this reference may be the last
    bool wake = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!started_) {
            start_locked();
        }
        wake = when < heap_.next();
        heap_.push(when, std::move(target), raw);
    }
    if (wake) {
        cv_.notify_one();
    }
}

std::size_t EngineThread::cancel(const TimerTarget* target) {
    // The thread may wake for a timer no longer there: it finds nothing due and sleeps again.
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.remove(target);
}

void EngineThread::resume() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ && heap_.size() > 0) {
        start_locked();
    }
}

void EngineThread::run() {
    auto& clock = *MonotonicClock::instance();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        const Nanos next = heap_.next();
        if (next == kNever) {
            cv_.wait(lock); // nothing waits: sleep until a timer is scheduled
            continue;
        }
        const Nanos now = clock.now();
        if (next > now) {
            cv_.wait_for(lock, std::chrono::nanoseconds(next - now));
            continue;
        }
        std::weak_ptr<TimerTarget> due;
        heap_.pop_due(now, due);
        lock.unlock(); // a timer takes its limiter's lock and may schedule again
        {
            // Never taken with mu_ held: fork's prepare takes busy_ before mu_.
            std::lock_guard<std::mutex> busy(busy_);
            if (auto target = due.lock()) {
                target->on_timer(clock.now());
            } // the target may be destroyed here, still under busy_
        }
        lock.lock();
    }
}

} // namespace permits
