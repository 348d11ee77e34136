// What one read of the time costs, by source: the engine's MonotonicClock on each of its sources
// (through the virtual call the limiters make) and the primitives under them. Google Benchmark:
//   build/bench/bench_clock --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <memory>

#include "permits/clock.hpp"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

using namespace permits;

namespace {

Nanos clock_gettime_ns(clockid_t id) {
    timespec ts{};
    clock_gettime(id, &ts);
    return ts.tv_sec * 1'000'000'000 + ts.tv_nsec;
}

void BM_ClockGettime_Monotonic(benchmark::State& state) {
    for (auto _ : state) {
        benchmark::DoNotOptimize(clock_gettime_ns(CLOCK_MONOTONIC));
    }
}

void BM_ClockGettime_MonotonicCoarse(benchmark::State& state) {
    for (auto _ : state) {
        benchmark::DoNotOptimize(clock_gettime_ns(CLOCK_MONOTONIC_COARSE));
    }
}

void BM_SteadyClock_Now(benchmark::State& state) {
    for (auto _ : state) {
        benchmark::DoNotOptimize(std::chrono::steady_clock::now());
    }
}

#if defined(__x86_64__)
void BM_Rdtsc(benchmark::State& state) {
    for (auto _ : state) {
        benchmark::DoNotOptimize(__rdtsc());
    }
}

void BM_Rdtscp(benchmark::State& state) {
    unsigned aux = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(__rdtscp(&aux));
    }
}

void BM_LfenceRdtsc(benchmark::State& state) {
    for (auto _ : state) {
        _mm_lfence();
        benchmark::DoNotOptimize(__rdtsc());
    }
}

void BM_Rdtsc_ToNanos(benchmark::State& state) {
    const TscScale scale = MonotonicClock(MonotonicClock::Source::Tsc).tsc_scale();
    if (scale.mult == 0) {
        state.SkipWithError("no trusted TSC here");
        return;
    }
    for (auto _ : state) {
        benchmark::DoNotOptimize(scale.to_nanos(__rdtsc()));
    }
}
#endif

// The engine's read, as a limiter makes it: a virtual call on a Clock.
void read_clock(benchmark::State& state, MonotonicClock::Source source) {
    const std::shared_ptr<Clock> clock = std::make_shared<MonotonicClock>(source);
    if (static_cast<MonotonicClock&>(*clock).source() != source) {
        state.SkipWithError("no trusted TSC here");
        return;
    }
    for (auto _ : state) {
        benchmark::DoNotOptimize(clock->now());
    }
}

void BM_MonotonicClock_Monotonic(benchmark::State& state) {
    read_clock(state, MonotonicClock::Source::Monotonic);
}

void BM_MonotonicClock_Tsc(benchmark::State& state) {
    read_clock(state, MonotonicClock::Source::Tsc);
}

} // namespace

BENCHMARK(BM_ClockGettime_Monotonic);
BENCHMARK(BM_SteadyClock_Now);
BENCHMARK(BM_ClockGettime_MonotonicCoarse);
#if defined(__x86_64__)
BENCHMARK(BM_Rdtsc);
BENCHMARK(BM_Rdtscp);
BENCHMARK(BM_LfenceRdtsc);
BENCHMARK(BM_Rdtsc_ToNanos);
#endif
BENCHMARK(BM_MonotonicClock_Monotonic);
BENCHMARK(BM_MonotonicClock_Tsc);

BENCHMARK_MAIN();
