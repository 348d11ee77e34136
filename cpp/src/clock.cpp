#include "permits/clock.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#if defined(__x86_64__) && defined(__linux__)
#include <x86intrin.h>
#elif defined(__APPLE__)
#include <time.h> // NOLINT(modernize-deprecated-headers): clock_gettime_nsec_np is not in <ctime>
#elif defined(_WIN32)
#include "permits/windows.hpp"
#endif

namespace permits {

namespace {

// The platform's monotonic clock, in nanoseconds: the fallback source, and the reference the TSC
// is calibrated against.
#if defined(__APPLE__)
// Mach absolute time (CLOCK_UPTIME_RAW): like Linux's CLOCK_MONOTONIC, it stops in sleep.
Nanos steady_now() noexcept {
    return static_cast<Nanos>(::clock_gettime_nsec_np(CLOCK_UPTIME_RAW));
}
#elif defined(_WIN32)
Nanos steady_now() noexcept {
    // The frequency is fixed at boot. Whole seconds and the remainder apart, so that ticks * 10**9
    // does not overflow (at 10 MHz it would after 29 years of uptime; at 3 GHz after 3 seconds).
    static const std::int64_t freq = [] {
        LARGE_INTEGER f;
        ::QueryPerformanceFrequency(&f);
        return static_cast<std::int64_t>(f.QuadPart);
    }();
    LARGE_INTEGER c;
    ::QueryPerformanceCounter(&c);
    const auto ticks = static_cast<std::int64_t>(c.QuadPart);
    return (ticks / freq) * 1'000'000'000 + (ticks % freq) * 1'000'000'000 / freq;
}
#else
// CLOCK_MONOTONIC where the C++ library is glibc's or musl's.
Nanos steady_now() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
#endif

#if defined(__x86_64__) && defined(__linux__)
constexpr bool kHaveTsc = true;

std::uint64_t read_tsc() noexcept {
    return __rdtsc();
}

/// The first line of `path` that starts with `prefix` (the whole first line for ""), or "".
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

/// One reading of the TSC with CLOCK_MONOTONIC around it; the narrowest of a few brackets, so a
/// preemption or an interrupt between the reads does not count.
struct Sample {
    std::uint64_t tsc = 0;
    Nanos ns = 0;     // the bracket's middle
    Nanos width = -1; // the bracket's width
};

Sample sample() {
    Sample best;
    for (int i = 0; i < 32; ++i) {
        const Nanos before = steady_now();
        _mm_lfence(); // calibration only: the TSC read between the two clock reads
        const std::uint64_t tsc = __rdtsc();
        _mm_lfence();
        const Nanos after = steady_now();
        if (best.width < 0 || after - before < best.width) {
            best = {tsc, before + (after - before) / 2, after - before};
        }
    }
    return best;
}

/// The TSC's rate against CLOCK_MONOTONIC, over at least 10 ms and longer (up to 200 ms) until the
/// brackets' widths make less than 20 ppm of it; nullopt if the counter does not move forward.
std::optional<TscScale> calibrate() {
    constexpr Nanos kWindow = 10'000'000;
    constexpr Nanos kMaxWindow = 200'000'000;
    constexpr Nanos kPpm = 20;
    const Sample start = sample();
    Sample end;
    do {
        std::this_thread::sleep_for(std::chrono::nanoseconds(kWindow));
        end = sample();
    } while ((start.width + end.width) * (1'000'000 / kPpm) > end.ns - start.ns && end.ns - start.ns < kMaxWindow);
    if (end.tsc <= start.tsc || end.ns <= start.ns) {
        return std::nullopt;
    }
    const u128 mult = (static_cast<u128>(end.ns - start.ns) << TscScale::kShift) / (end.tsc - start.tsc);
    // A counter slower than 10 MHz (over 100 ns a tick) is not a TSC to trust.
    if (mult == 0 || mult > (u128{100} << TscScale::kShift)) {
        return std::nullopt;
    }
    return TscScale{start.tsc, start.ns, static_cast<std::uint64_t>(mult)};
}

bool tsc_trusted_here() {
    return tsc_is_trusted(first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", ""),
                          first_line("/proc/cpuinfo", "flags"));
}
#else
constexpr bool kHaveTsc = false;
std::uint64_t read_tsc() noexcept {
    return 0;
}
std::optional<TscScale> calibrate() {
    return std::nullopt;
}
bool tsc_trusted_here() {
    return false;
}
#endif

} // namespace

bool tsc_is_trusted(const std::string& clocksource, const std::string& cpu_flags) {
    std::istringstream words(cpu_flags);
    bool constant = false;
    bool nonstop = false;
    for (std::string w; words >> w;) {
        constant = constant || w == "constant_tsc";
        nonstop = nonstop || w == "nonstop_tsc";
    }
    const auto end = clocksource.find_last_not_of(" \n");
    return clocksource.substr(0, end == std::string::npos ? 0 : end + 1) == "tsc" && constant && nonstop;
}

std::shared_ptr<MonotonicClock> MonotonicClock::instance() {
    static const auto clock = [] {
        // Read once, before any limiter exists.
        const char* env = std::getenv("PERMITS_CLOCK"); // NOLINT(concurrency-mt-unsafe)
        const bool steady = env != nullptr && std::string(env) == "monotonic";
        return std::make_shared<MonotonicClock>(steady ? Source::Monotonic : Source::Tsc);
    }();
    return clock;
}

MonotonicClock::MonotonicClock(Source wanted) {
    if (kHaveTsc && wanted == Source::Tsc && tsc_trusted_here()) {
        if (const auto scale = calibrate()) {
            use_tsc(*scale);
        }
    }
}

MonotonicClock::MonotonicClock(const TscScale& scale) {
    if (kHaveTsc && scale.mult != 0) {
        use_tsc(scale);
    }
}

void MonotonicClock::use_tsc(const TscScale& scale) noexcept {
    scale_ = scale;
    // A millisecond in ticks (mult is nanoseconds per tick, times 2**kShift).
    const u128 ms = (u128{1'000'000} << TscScale::kShift) / scale_.mult;
    reset_below_ = scale_.tsc0 > ms ? scale_.tsc0 - static_cast<std::uint64_t>(ms) : 0;
    tsc_.store(true);
}

Nanos MonotonicClock::now() const noexcept {
    if (tsc_.load(std::memory_order_relaxed)) {
        // rdtsc + multiply: about half of clock_gettime's cost (benchmarks/cpp/bench_clock.cpp; figures in
        // benchmarks/RESULTS.md, "Figures behind choices in the code").
        const std::uint64_t tsc = read_tsc();
        if (tsc < reset_below_) [[unlikely]] {
            return tsc_reset();
        }
        return scale_.to_nanos(tsc);
    }
    return steady_now();
}

Nanos MonotonicClock::tsc_reset() const noexcept {
    tsc_.store(false);
    return steady_now();
}

ManualClock::ManualClock(Nanos start) : now_(start) {
    if (start < 0 || start > kMaxTime) {
        throw std::invalid_argument("a ManualClock starts between 0 and 2**63 - 2**60 ns");
    }
}

void ManualClock::schedule(std::weak_ptr<TimerTarget> target, Nanos when) {
    const TimerTarget* raw = target.lock().get(); // not under mu_: this reference may be the last
    std::lock_guard<std::mutex> lock(mu_);
    heap_.push(when, std::move(target), raw);
}

std::size_t ManualClock::cancel(const TimerTarget* target) {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.remove(target);
}

void ManualClock::advance(Nanos delta) {
    std::lock_guard<std::mutex> order(advance_mu_);
    if (delta < 0 || delta > kMaxTime - now_.load()) {
        throw std::invalid_argument("a ManualClock moves forward, and at most to 2**63 - 2**60 ns");
    }
    now_.fetch_add(delta);
    // Timers may schedule more timers that are already due: keep going until none is.
    for (;;) {
        std::weak_ptr<TimerTarget> due;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!heap_.pop_due(now_.load(), due)) {
                return;
            }
        }
        if (auto target = due.lock()) {
            target->on_timer(now_.load());
        }
    }
}

void ManualClock::run_due() {
    advance(0);
}

std::size_t ManualClock::pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.size();
}

} // namespace permits
