// MonotonicClock on its two sources: the time-stamp counter (where the kernel trusts it) and
// CLOCK_MONOTONIC. No tight timing thresholds: the machines these run on are shared and noisy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "permits/clock.hpp"
#include "permits/time.hpp"
#include "permits/token_bucket.hpp"

using namespace permits;

namespace {

constexpr Nanos kMs = 1'000'000;

Nanos steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string first_line(const char* path, const std::string& prefix) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(prefix, 0) == 0) {
            return line;
        }
    }
    return {};
}

bool tsc_trusted_here() {
#if defined(__x86_64__) && defined(__linux__)
    return tsc_is_trusted(first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", ""),
                          first_line("/proc/cpuinfo", "flags"));
#else
    return false;
#endif
}

/// Both sources, the TSC only where this machine has a trusted one.
std::vector<std::shared_ptr<MonotonicClock>> clocks() {
    std::vector<std::shared_ptr<MonotonicClock>> out{
        std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic)};
    auto tsc = std::make_shared<MonotonicClock>(MonotonicClock::Source::Tsc);
    if (tsc->source() == MonotonicClock::Source::Tsc) {
        out.push_back(tsc);
    }
    return out;
}

} // namespace

TEST(TscIsTrusted, NeedsTheKernelsClocksourceAndAnInvariantCounter) {
    const std::string flags = "flags\t\t: fpu tsc msr constant_tsc rep_good nopl nonstop_tsc cpuid tsc_known_freq";
    EXPECT_TRUE(tsc_is_trusted("tsc\n", flags));
    EXPECT_TRUE(tsc_is_trusted("tsc", flags));
    EXPECT_FALSE(tsc_is_trusted("kvm-clock\n", flags));
    EXPECT_FALSE(tsc_is_trusted("hpet\n", flags));
    EXPECT_FALSE(tsc_is_trusted("", flags));
    EXPECT_FALSE(tsc_is_trusted("tsc\n", "flags\t\t: fpu tsc msr constant_tsc rep_good"));
    EXPECT_FALSE(tsc_is_trusted("tsc\n", "flags\t\t: fpu tsc msr nonstop_tsc"));
    EXPECT_FALSE(tsc_is_trusted("tsc\n", "flags\t\t: constant_tsc_x nonstop_tsc"));
    EXPECT_FALSE(tsc_is_trusted("tsc\n", ""));
}

TEST(TscScale, ScalesTicksFromTheCalibrationPoint) {
    const TscScale half{1000, 5, std::uint64_t{1} << (TscScale::kShift - 1)}; // 0.5 ns per tick
    EXPECT_EQ(half.to_nanos(1000), 5);
    EXPECT_EQ(half.to_nanos(3000), 1005);
    EXPECT_EQ(half.to_nanos(3001), 1005); // rounds down
    EXPECT_EQ(half.to_nanos(999), 5);     // never before the calibration point
    EXPECT_EQ(half.to_nanos(0), 5);
    // 128-bit product: ~10**18 ticks (years of a GHz counter) do not overflow.
    EXPECT_EQ(half.to_nanos(1000 + 2'000'000'000'000'000'000ULL), 5 + 1'000'000'000'000'000'000LL);
    const TscScale odd{0, 0, 1'868'310'000ULL}; // about 2.3 GHz
    Nanos prev = 0;
    for (std::uint64_t t = 0; t < 100'000; t += 7) {
        const Nanos n = odd.to_nanos(t);
        ASSERT_GE(n, prev);
        prev = n;
    }
}

TEST(MonotonicClock, UsesTheTscExactlyWhereTheKernelDoes) {
    EXPECT_EQ(MonotonicClock(MonotonicClock::Source::Monotonic).source(), MonotonicClock::Source::Monotonic);
    const MonotonicClock::Source expected =
        tsc_trusted_here() ? MonotonicClock::Source::Tsc : MonotonicClock::Source::Monotonic;
    EXPECT_EQ(MonotonicClock(MonotonicClock::Source::Tsc).source(), expected);
    if (expected == MonotonicClock::Source::Tsc) {
        const TscScale& s = MonotonicClock(MonotonicClock::Source::Tsc).tsc_scale();
        // Between 10 MHz and 128 GHz: mult is nanoseconds per tick, times 2**32.
        EXPECT_GT(s.mult, std::uint64_t{1} << (TscScale::kShift - 7));
        EXPECT_LT(s.mult, std::uint64_t{100} << TscScale::kShift);
    }
}

TEST(MonotonicClock, InstanceFollowsPermitsClock) {
    // ctest runs this suite as it is; scripts/test runs it again with PERMITS_CLOCK=monotonic.
    const char* env = std::getenv("PERMITS_CLOCK"); // NOLINT(concurrency-mt-unsafe)
    const bool forced = env != nullptr && std::string(env) == "monotonic";
    const MonotonicClock::Source expected =
        !forced && tsc_trusted_here() ? MonotonicClock::Source::Tsc : MonotonicClock::Source::Monotonic;
    EXPECT_EQ(MonotonicClock::instance()->source(), expected);
}

TEST(MonotonicClock, EachThreadsReadsNeverGoBackAndThreadsAgree) {
    for (const auto& clock : clocks()) {
        SCOPED_TRACE(clock->source() == MonotonicClock::Source::Tsc ? "tsc" : "monotonic");
        // Each thread's reads never go back; a read made after seeing another thread's read is not
        // before it by more than a generous 1 ms (counters of different cores are synchronised).
        constexpr int kThreads = 4;
        constexpr int kReads = 200'000;
        std::atomic<Nanos> latest{0};
        std::atomic<int> back{0};
        std::atomic<int> behind{0};
        std::vector<std::thread> threads;
        for (int i = 0; i < kThreads; ++i) {
            threads.emplace_back([&] {
                Nanos prev = 0;
                for (int r = 0; r < kReads; ++r) {
                    const Nanos seen = latest.load();
                    const Nanos t = clock->now();
                    if (t < prev) {
                        back.fetch_add(1);
                    }
                    if (t < seen - kMs) {
                        behind.fetch_add(1);
                    }
                    prev = t;
                    Nanos cur = latest.load();
                    while (cur < t && !latest.compare_exchange_weak(cur, t)) {
                    }
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
        EXPECT_EQ(back.load(), 0);
        EXPECT_EQ(behind.load(), 0);
    }
}

TEST(MonotonicClock, AgreesWithClockMonotonicAfterASleep) {
    for (const auto& clock : clocks()) {
        SCOPED_TRACE(clock->source() == MonotonicClock::Source::Tsc ? "tsc" : "monotonic");
        const Nanos start = clock->now();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        // Same origin as CLOCK_MONOTONIC; the TSC's rate is off by parts per million, so 5 ms is
        // generous. The reads bracket the clock's, so a preemption between them does not count.
        const Nanos before = steady_ns();
        const Nanos t = clock->now();
        const Nanos after = steady_ns();
        EXPECT_GE(t, before - 5 * kMs);
        EXPECT_LE(t, after + 5 * kMs);
        EXPECT_GE(t - start, 50 * kMs - kMs); // the sleep, less a clock's error
    }
}

TEST(MonotonicClock, ACounterResetSwitchesToClockMonotonicForGood) {
    MonotonicClock calibrated(MonotonicClock::Source::Tsc);
    if (calibrated.source() != MonotonicClock::Source::Tsc) {
        GTEST_SKIP() << "no trusted TSC here";
    }
    // A calibration point far in the counter's future: as if the counter restarted from zero.
    TscScale scale = calibrated.tsc_scale();
    scale.tsc0 += std::uint64_t{1} << 50;
    MonotonicClock clock(scale);
    EXPECT_EQ(clock.source(), MonotonicClock::Source::Tsc);
    const Nanos before = steady_ns();
    const Nanos t = clock.now();
    const Nanos after = steady_ns();
    EXPECT_EQ(clock.source(), MonotonicClock::Source::Monotonic);
    EXPECT_GE(t, before);
    EXPECT_LE(t, after);
    EXPECT_GE(clock.now(), t);
}

TEST(MonotonicClock, QueuedRequestsAreServedOnTime) {
    // Real time through the engine thread, whose waits are computed from the clock's readings.
    for (const auto& clock : clocks()) {
        SCOPED_TRACE(clock->source() == MonotonicClock::Source::Tsc ? "tsc" : "monotonic");
        const Nanos start = clock->now();
        auto bucket =
            std::make_shared<TokenBucket>(clock, 1, 1, 20 * kMs, QueueOptions{2, QueueOrder::OldestFirst}, false);
        ASSERT_TRUE(bucket->acquire(1).acquired);
        auto first = bucket->enqueue(1, -1);
        auto second = bucket->enqueue(1, -1);
        ASSERT_TRUE(first.waiter && second.waiter);
        while (!second.waiter->wait_for(1'000'000'000)) {
        }
        EXPECT_TRUE(first.waiter->outcome().acquired);
        EXPECT_TRUE(second.waiter->outcome().acquired);
        EXPECT_GE(clock->now() - start, 40 * kMs); // two whole periods, from construction
    }
}
