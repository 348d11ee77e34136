// What a shared concurrency limiter's acquire and release cost in the engine, and how much of it is
// the holder slot's pin and unpin (shm_segment.cpp: one 16-byte compare-and-swap each while the
// process keeps its slot; a claim and a release of the slot when it held nothing before). Linux only.
// Google Benchmark:
//   build/bench/bench_shm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <memory>
#include <string>

#include "permits/atomic_pair.hpp"
#include "permits/concurrency.hpp"
#include "permits/shm_limiters.hpp"
#include "permits/shm_segment.hpp"

using namespace permits;
using namespace permits::shm;

namespace {

constexpr std::int64_t kHuge = 2'147'483'647;
constexpr Nanos kHour = 3600LL * 1'000'000'000;

std::shared_ptr<Store> open_store() {
    static std::shared_ptr<Store> store = [] {
        const std::string name = "bench-shm-cpp-" + std::to_string(::getpid());
        auto segment = Segment::open(name, {64, 0600, ClockKind::Monotonic});
        Segment::unlink(name); // mapped here until exit, gone from /dev/shm at once
        return std::make_shared<Store>(std::move(segment), MonotonicClock::instance());
    }();
    return store;
}

// The floor: one uncontended 16-byte compare-and-swap.
void BM_Floor_Cas16(benchmark::State& state) {
    AtomicPair word(Pair{0, 0});
    Pair seen = word.load();
    for (auto _ : state) {
        word.compare_exchange(seen, Pair{seen.a + 1, seen.b});
    }
    benchmark::DoNotOptimize(word.load());
}

// pin + unpin while the process keeps its slot (another of its permits held): a CAS each.
void BM_Shm_PinUnpin_SlotKept(benchmark::State& state) {
    Segment& seg = open_store()->segment();
    Holding kept;
    if (!seg.pin(1, kHour, kept)) {
        state.SkipWithError("no holder slot");
        return;
    }
    for (auto _ : state) {
        Holding h;
        seg.pin(1, kHour, h);
        seg.unpin(h, 1);
    }
    seg.unpin(kept, 1);
}

// pin + unpin holding nothing else: the slot claimed and freed each time.
void BM_Shm_PinUnpin_SlotClaimedAndFreed(benchmark::State& state) {
    Segment& seg = open_store()->segment();
    for (auto _ : state) {
        Holding h;
        seg.pin(1, kHour, h);
        seg.unpin(h, 1);
    }
}

// The named concurrency state's own protocol, without the slot: take and give back.
void BM_Shm_ConcurrencyState_TakeGiveBack(benchmark::State& state) {
    auto storage = std::make_unique<AtomicPair[]>(ConcurrencyView::bytes() / sizeof(AtomicPair) + 1);
    const ConcurrencyView view = ConcurrencyView::over(reinterpret_cast<char*>(storage.get()), kHuge);
    view.init(0);
    for (auto _ : state) {
        view.take(0, 1);
        view.give_back(0, 1, 0);
    }
}

// The whole of a named shared concurrency limiter's acquire and release (as a lease's release
// calls it), holding nothing else or with another lease held.
void shared_acquire_release(benchmark::State& state, bool keep_one) {
    auto lim = open_store()->concurrency(keep_one ? "kept" : "alone", kHuge, kHour, QueueOptions{});
    Outcome kept;
    if (keep_one) {
        kept = lim->acquire(1);
    }
    for (auto _ : state) {
        const Outcome o = lim->acquire(1);
        lim->give_back_lease(1, o.tag);
    }
    if (keep_one) {
        lim->give_back_lease(1, kept.tag);
    }
}
void BM_Shm_Concurrency_AcquireRelease(benchmark::State& state) {
    shared_acquire_release(state, false);
}
void BM_Shm_Concurrency_AcquireRelease_SlotKept(benchmark::State& state) {
    shared_acquire_release(state, true);
}

// The in-process limiter, the same.
void BM_Concurrency_AcquireRelease(benchmark::State& state) {
    auto limiter = std::make_shared<Concurrency>(MonotonicClock::instance(), kHuge, QueueOptions{});
    for (auto _ : state) {
        const Outcome o = limiter->acquire(1);
        limiter->give_back(1, o.tag);
    }
}

} // namespace

BENCHMARK(BM_Floor_Cas16);
BENCHMARK(BM_Shm_PinUnpin_SlotKept);
BENCHMARK(BM_Shm_PinUnpin_SlotClaimedAndFreed);
BENCHMARK(BM_Shm_ConcurrencyState_TakeGiveBack);
BENCHMARK(BM_Shm_Concurrency_AcquireRelease);
BENCHMARK(BM_Shm_Concurrency_AcquireRelease_SlotKept);
BENCHMARK(BM_Concurrency_AcquireRelease);

BENCHMARK_MAIN();
