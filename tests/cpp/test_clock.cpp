// ManualClock (runs the timers that come due on advance, in time order) and TimerHeap.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "permits/clock.hpp"
#include "permits/concurrency.hpp"
#include "permits/scheduler.hpp"
#include "permits/time.hpp"

using namespace permits;

namespace {

struct Fired {
    std::string name;
    Nanos now;
    bool operator==(const Fired&) const = default;
};

/// Records every call; optionally reschedules itself `again` ns after the time it fires at.
class Recorder final : public TimerTarget {
public:
    Recorder(std::string name, std::vector<Fired>& log) : name_(std::move(name)), log_(log) {}
    void on_timer(Nanos now) override {
        log_.push_back({name_, now});
        if (reschedules_ > 0) {
            --reschedules_;
            clock_->schedule(self_, now + again_);
        }
    }
    void reschedule(std::shared_ptr<ManualClock> clock, std::weak_ptr<TimerTarget> self, Nanos again, int times) {
        clock_ = std::move(clock);
        self_ = std::move(self);
        again_ = again;
        reschedules_ = times;
    }

private:
    std::string name_;
    std::vector<Fired>& log_;
    std::shared_ptr<ManualClock> clock_;
    std::weak_ptr<TimerTarget> self_;
    Nanos again_ = 0;
    int reschedules_ = 0;
};

} // namespace

TEST(ManualClock, StartsWhereToldAndAdvances) {
    auto clock = std::make_shared<ManualClock>(0);
    EXPECT_EQ(clock->now(), 0);
    clock->advance(5);
    EXPECT_EQ(clock->now(), 5);
    clock->advance(0);
    EXPECT_EQ(clock->now(), 5);
    clock->run_due();
    EXPECT_EQ(clock->now(), 5);
    EXPECT_EQ(&clock->scheduler(), static_cast<Scheduler*>(clock.get()));
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(ManualClock, RunsDueTimersInTimeOrder) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    auto b = std::make_shared<Recorder>("b", log);
    auto c = std::make_shared<Recorder>("c", log);
    clock->schedule(c, 30);
    clock->schedule(a, 10);
    clock->schedule(b, 20);
    EXPECT_EQ(clock->pending(), 3u);

    clock->advance(9);
    EXPECT_TRUE(log.empty());
    clock->advance(6); // t = 15
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0], (Fired{"a", 15}));
    EXPECT_EQ(clock->pending(), 2u);

    clock->advance(100); // t = 115: b then c, each told the current time
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[1], (Fired{"b", 115}));
    EXPECT_EQ(log[2], (Fired{"c", 115}));
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(ManualClock, TimerDueExactlyNowRuns) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    clock->schedule(a, 10);
    clock->advance(10);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].now, 10);

    clock->schedule(a, 10); // already due: runs on the next run_due
    EXPECT_EQ(log.size(), 1u);
    clock->run_due();
    EXPECT_EQ(log.size(), 2u);
}

TEST(ManualClock, EqualTimesRunInSchedulingOrder) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    auto b = std::make_shared<Recorder>("b", log);
    auto c = std::make_shared<Recorder>("c", log);
    clock->schedule(b, 5);
    clock->schedule(a, 5);
    clock->schedule(c, 5);
    clock->advance(5);
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[0].name, "b");
    EXPECT_EQ(log[1].name, "a");
    EXPECT_EQ(log[2].name, "c");
}

TEST(ManualClock, TimersScheduledByTimersRunWhenAlreadyDue) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    a->reschedule(clock, a, 0, 2); // reschedules itself for "now" twice
    clock->schedule(a, 1);
    clock->advance(1);
    EXPECT_EQ(log.size(), 3u);
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(ManualClock, TimersScheduledByTimersForLaterWait) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    a->reschedule(clock, a, 10, 5);
    clock->schedule(a, 10);
    clock->advance(10);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(clock->pending(), 1u);
    clock->advance(9);
    EXPECT_EQ(log.size(), 1u);
    clock->advance(1);
    EXPECT_EQ(log.size(), 2u);
    EXPECT_EQ(log[1].now, 20);
}

TEST(ManualClock, DuplicateEntriesCallTheTargetEachTime) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    clock->schedule(a, 3);
    clock->schedule(a, 3);
    clock->advance(3);
    EXPECT_EQ(log.size(), 2u);
}

TEST(ManualClock, DestroyedTargetsAreSkipped) {
    auto clock = std::make_shared<ManualClock>(0);
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    {
        auto gone = std::make_shared<Recorder>("gone", log);
        clock->schedule(gone, 5);
    }
    clock->schedule(a, 6);
    EXPECT_EQ(clock->pending(), 2u);
    clock->advance(10);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].name, "a");
    EXPECT_EQ(clock->pending(), 0u);
}

TEST(TimerHeap, EmptyHeap) {
    TimerHeap h;
    EXPECT_EQ(h.size(), 0u);
    EXPECT_EQ(h.next(), kNever);
    std::weak_ptr<TimerTarget> out;
    EXPECT_FALSE(h.pop_due(kNever, out));
}

TEST(TimerHeap, PopsDueEntriesEarliestFirst) {
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    auto b = std::make_shared<Recorder>("b", log);
    auto c = std::make_shared<Recorder>("c", log);
    TimerHeap h;
    h.push(30, c);
    h.push(10, a);
    h.push(20, b);
    EXPECT_EQ(h.size(), 3u);
    EXPECT_EQ(h.next(), 10);

    std::weak_ptr<TimerTarget> out;
    EXPECT_FALSE(h.pop_due(9, out));
    EXPECT_EQ(h.size(), 3u);
    ASSERT_TRUE(h.pop_due(25, out));
    EXPECT_EQ(out.lock(), a);
    ASSERT_TRUE(h.pop_due(25, out));
    EXPECT_EQ(out.lock(), b);
    EXPECT_FALSE(h.pop_due(25, out));
    EXPECT_EQ(h.next(), 30);
    ASSERT_TRUE(h.pop_due(30, out));
    EXPECT_EQ(out.lock(), c);
    EXPECT_EQ(h.size(), 0u);
    EXPECT_EQ(h.next(), kNever);
}

TEST(TimerHeap, TiesPopInPushOrder) {
    std::vector<Fired> log;
    std::vector<std::shared_ptr<Recorder>> targets;
    TimerHeap h;
    for (int i = 0; i < 20; ++i) {
        targets.push_back(std::make_shared<Recorder>(std::to_string(i), log));
        h.push(7, targets.back());
    }
    std::weak_ptr<TimerTarget> out;
    for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE(h.pop_due(7, out));
        EXPECT_EQ(out.lock(), targets[i]) << i;
    }
    EXPECT_FALSE(h.pop_due(7, out));
}

TEST(TimerHeap, ExpiredTargetsStillPop) {
    TimerHeap h;
    std::vector<Fired> log;
    {
        auto gone = std::make_shared<Recorder>("gone", log);
        h.push(1, gone);
    }
    std::weak_ptr<TimerTarget> out;
    ASSERT_TRUE(h.pop_due(1, out));
    EXPECT_TRUE(out.expired());
    EXPECT_EQ(h.size(), 0u);
}

TEST(TimerHeap, KNeverEntries) {
    std::vector<Fired> log;
    auto a = std::make_shared<Recorder>("a", log);
    TimerHeap h;
    h.push(kNever, a);
    EXPECT_EQ(h.next(), kNever);
    std::weak_ptr<TimerTarget> out;
    EXPECT_FALSE(h.pop_due(kNever - 1, out));
    EXPECT_TRUE(h.pop_due(kNever, out));
}

TEST(MonotonicClock, IsASingletonThatNeverGoesBack) {
    auto c1 = MonotonicClock::instance();
    auto c2 = MonotonicClock::instance();
    EXPECT_EQ(c1, c2);
    Nanos prev = c1->now();
    for (int i = 0; i < 1000; ++i) {
        const Nanos t = c1->now();
        ASSERT_GE(t, prev);
        prev = t;
    }
    EXPECT_EQ(&c1->scheduler(), static_cast<Scheduler*>(&EngineThread::instance()));
}

TEST(Time, SaturatingHelpers) {
    EXPECT_EQ(sat_add(1, 2), 3);
    EXPECT_EQ(sat_add(kNever, 1), kNever);
    EXPECT_EQ(sat_add(kNever - 1, 1), kNever);
    EXPECT_EQ(sat_add(kNever / 2 + 1, kNever / 2 + 1), kNever);
    EXPECT_EQ(sat_nanos(static_cast<i128>(kNever) * 4), kNever);
    EXPECT_EQ(sat_nanos(-5), 0);
    EXPECT_EQ(sat_nanos(42), 42);
    EXPECT_EQ(ceil_div(0, 3), 0);
    EXPECT_EQ(ceil_div(1, 3), 1);
    EXPECT_EQ(ceil_div(3, 3), 1);
    EXPECT_EQ(ceil_div(4, 3), 2);
    EXPECT_EQ(kMaxPermits, 2147483647);
    // (a * b) >> shift with the product past 64 bits (the TSC's scaling), both ways.
    for (auto* f : {&mul_shift, &mul_shift_portable}) {
        EXPECT_EQ(f(3, 5, 0), 15u);
        EXPECT_EQ(f(std::uint64_t{1} << 40, std::uint64_t{1} << 40, 32), std::uint64_t{1} << 48);
        EXPECT_EQ(f(~std::uint64_t{0}, std::uint64_t{1} << 63, 63), ~std::uint64_t{0});
        EXPECT_EQ(f(0xffffffffULL, 0x1'0000'0001ULL, 32), 0xffffffffULL);
        EXPECT_EQ(f(0x1234'5678'9abc'def0ULL, 0xfedc'ba98'7654'3210ULL, 63), 0x243f'4015'aefa'e844ULL);
    }
}

TEST(EngineThread, OneThreadServesEveryTimerOfTheProcess) {
    // Real time: three limiters with waiters that time out 1-3 ms from now share one thread.
    auto clock = permits::MonotonicClock::instance();
    std::vector<std::shared_ptr<permits::Concurrency>> limiters;
    std::vector<std::shared_ptr<permits::Waiter>> waiters;
    for (int i = 0; i < 3; ++i) {
        auto l = std::make_shared<permits::Concurrency>(clock, 1,
                                                        permits::QueueOptions{4, permits::QueueOrder::OldestFirst});
        ASSERT_TRUE(l->acquire(1).acquired);
        for (int j = 0; j < 3; ++j) {
            auto q = l->enqueue(1, 1'000'000 * (j + 1));
            ASSERT_TRUE(q.waiter);
            waiters.push_back(q.waiter);
        }
        limiters.push_back(l);
    }
    for (auto& w : waiters) {
        while (!w->wait_for(1'000'000'000)) {
        }
        EXPECT_EQ(w->outcome().reason, permits::Reason::Timeout);
    }
    EXPECT_EQ(permits::EngineThread::threads_started(), 1u);
}
