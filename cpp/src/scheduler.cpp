#include <chrono>
#include <new>
#include <pthread.h>

#include "permits/clock.hpp"

namespace permits {

void TimerHeap::push(Nanos when, std::weak_ptr<TimerTarget> target) {
    heap_.push({when, seq_++, std::move(target)});
}

bool TimerHeap::pop_due(Nanos now, std::weak_ptr<TimerTarget>& out) {
    if (heap_.empty() || heap_.top().when > now) {
        return false;
    }
    out = heap_.top().target;
    heap_.pop();
    return true;
}

Nanos TimerHeap::next() const {
    return heap_.empty() ? kNever : heap_.top().when;
}

EngineThread& EngineThread::instance() {
    // Leaked on purpose: the thread must outlive every limiter, including those destroyed
    // during interpreter shutdown, and is never joined from a static destructor.
    static EngineThread* engine = [] {
        auto* e = new EngineThread();
        // A forked child has no engine thread and may have inherited a locked mutex: start afresh
        // (the thread is started again by the next timer).
        ::pthread_atfork(nullptr, nullptr, [] {
            EngineThread& self = instance();
            new (&self.mu_) std::mutex();
            new (&self.cv_) std::condition_variable();
            self.started_ = false;
        });
        return e;
    }();
    return *engine;
}

std::size_t EngineThread::pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.size();
}

void EngineThread::schedule(std::weak_ptr<TimerTarget> target, Nanos when) {
    bool wake = false;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!started_) {
            // Started on first use and detached: it lives as long as the process.
            std::thread([this] { run(); }).detach();
            started_ = true;
            threads_started_.fetch_add(1);
        }
        wake = when < heap_.next();
        heap_.push(when, std::move(target));
    }
    if (wake) {
        cv_.notify_one();
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
        if (auto target = due.lock()) {
            target->on_timer(clock.now());
        }
        lock.lock();
    }
}

} // namespace permits
