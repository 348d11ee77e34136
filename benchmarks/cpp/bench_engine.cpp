// The engine's check against its floor (an uncontended compare-and-swap plus a clock read), one
// thread and two, on one limiter and on separate limiters. Google Benchmark; see README.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

using namespace permits;

namespace {

constexpr std::int64_t kHuge = 2147483647;

// The floor: what any lock-free limiter must do per check.
// The floor reads the clock the limiters read (the engine's MonotonicClock: the TSC where the
// kernel trusts it, else CLOCK_MONOTONIC), so that the ratio compares like with like.
void BM_Floor_ClockPlusCas(benchmark::State& state) {
    static std::atomic<std::int64_t> word{0};
    const std::shared_ptr<Clock> clock = MonotonicClock::instance(); // called as the limiters call it
    for (auto _ : state) {
        const auto now = clock->now();
        std::int64_t seen = word.load(std::memory_order_relaxed);
        word.compare_exchange_strong(seen, seen + (now & 1) + 1);
        benchmark::DoNotOptimize(seen);
    }
}

template <class L> std::shared_ptr<Limiter> make();
template <> std::shared_ptr<Limiter> make<TokenBucket>() {
    return std::make_shared<TokenBucket>(MonotonicClock::instance(), kHuge, kHuge, 1'000'000'000, QueueOptions{},
                                         false);
}
template <> std::shared_ptr<Limiter> make<FixedWindow>() {
    return std::make_shared<FixedWindow>(MonotonicClock::instance(), kHuge, 1'000'000'000, QueueOptions{}, false);
}
template <> std::shared_ptr<Limiter> make<SlidingWindow>() {
    return std::make_shared<SlidingWindow>(MonotonicClock::instance(), kHuge, 1'000'000'000, 10, QueueOptions{}, false);
}
template <> std::shared_ptr<Limiter> make<SlidingWindowCounter>() {
    return std::make_shared<SlidingWindowCounter>(MonotonicClock::instance(), kHuge, 1'000'000'000, QueueOptions{},
                                                  false);
}

// One limiter shared by every benchmark thread.
template <class L> void BM_Shared(benchmark::State& state) {
    static std::shared_ptr<Limiter> limiter;
    if (state.thread_index() == 0) {
        limiter = make<L>();
    }
    for (auto _ : state) {
        benchmark::DoNotOptimize(limiter->acquire(1));
    }
}

// A limiter per thread: nothing shared, so two threads should take twice the checks.
template <class L> void BM_Separate(benchmark::State& state) {
    auto limiter = make<L>();
    for (auto _ : state) {
        benchmark::DoNotOptimize(limiter->acquire(1));
    }
}

void BM_Concurrency_AcquireRelease(benchmark::State& state) {
    auto limiter = std::make_shared<Concurrency>(MonotonicClock::instance(), kHuge, QueueOptions{});
    for (auto _ : state) {
        const Outcome o = limiter->acquire(1);
        limiter->give_back(1, o.tag);
    }
}

// Per-key checks over N keys, as the bindings pass them ('s' + the str's UTF-8).
std::vector<std::string> keyed_keys(std::int64_t n) {
    std::vector<std::string> keys;
    for (std::int64_t i = 0; i < n; ++i) {
        keys.push_back("suser-" + std::to_string(i));
    }
    return keys;
}

// The keys in a shuffled order, repeated to at least 200,000 checks (a real key mix misses the
// caches). Keys are created in their own order, not this one, as bench_per_key.py does: records
// created in the order they are then visited would be read one after the other.
std::vector<std::string> keyed_order(const std::vector<std::string>& keys) {
    std::vector<std::string> order;
    const std::size_t repeats = std::max<std::size_t>(1, (200'000 + keys.size() - 1) / keys.size());
    for (std::size_t r = 0; r < repeats; ++r) {
        order.insert(order.end(), keys.begin(), keys.end());
    }
    std::shuffle(order.begin(), order.end(), std::mt19937_64(keys.size()));
    return order;
}

void BM_Keyed_TokenBucket(benchmark::State& state) {
    const auto keys = keyed_keys(state.range(0));
    const auto order = keyed_order(keys);
    auto clock = std::make_shared<ManualClock>();
    const auto tmpl = PerKeyTemplate::of<TokenBucket>(clock, TokenBucketRule(kHuge, kHuge, 1'000'000'000), {});
    auto keyed = std::make_shared<PerKeyLimiter>(clock, tmpl, 1'000'000'000, 0);
    for (const auto& key : keys) {
        keyed->acquire(key, 1);
    }
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(keyed->acquire(order[i], 1));
        i = i + 1 == order.size() ? 0 : i + 1;
    }
}

// The per-key floor: a standard hash map's find over the same keys.
void BM_Floor_UnorderedMapFind(benchmark::State& state) {
    const auto keys = keyed_keys(state.range(0));
    const auto order = keyed_order(keys);
    std::unordered_map<std::string, std::int64_t> map;
    for (const auto& key : keys) {
        map.emplace(key, 1);
    }
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(map.find(order[i]));
        i = i + 1 == order.size() ? 0 : i + 1;
    }
}

} // namespace

BENCHMARK(BM_Floor_ClockPlusCas)->Threads(1);
BENCHMARK(BM_Shared<TokenBucket>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Separate<TokenBucket>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Shared<FixedWindow>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Separate<FixedWindow>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Separate<SlidingWindow>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Separate<SlidingWindowCounter>)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Concurrency_AcquireRelease)->Threads(1);
BENCHMARK(BM_Floor_UnorderedMapFind)->Arg(1)->Arg(100'000)->Arg(1'000'000);
BENCHMARK(BM_Keyed_TokenBucket)->Arg(1)->Arg(100'000)->Arg(1'000'000);

BENCHMARK_MAIN();
