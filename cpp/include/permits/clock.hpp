// Clocks: the real-time clock and the manual clock of tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "permits/scheduler.hpp"
#include "permits/time.hpp"

namespace permits {

class Clock {
public:
    virtual ~Clock() = default;
    virtual Nanos now() const noexcept = 0;
    virtual Scheduler& scheduler() noexcept = 0;
};

/// The time-stamp counter's conversion to nanoseconds: ns0 + (tsc - tsc0) * mult / 2**kShift,
/// calibrated once against CLOCK_MONOTONIC.
struct TscScale {
    static constexpr unsigned kShift = 32;
    std::uint64_t tsc0 = 0;
    Nanos ns0 = 0;
    std::uint64_t mult = 0; // nanoseconds per tick, times 2**kShift
    Nanos to_nanos(std::uint64_t tsc) const noexcept {
        const std::uint64_t ticks = tsc > tsc0 ? tsc - tsc0 : 0;
        return ns0 + static_cast<Nanos>(mul_shift(ticks, mult, kShift));
    }
};

/// Whether the time-stamp counter is as good a clock as the kernel's: the kernel keeps time with
/// it (`clocksource` is the current clocksource's name) and it ticks at a constant rate, also in
/// deep sleep states (`cpu_flags` has constant_tsc and nonstop_tsc).
bool tsc_is_trusted(const std::string& clocksource, const std::string& cpu_flags);

/// The process's real-time clock, in nanoseconds since the origin of the platform's monotonic
/// clock: CLOCK_MONOTONIC on Linux, CLOCK_UPTIME_RAW on macOS, QueryPerformanceCounter on Windows,
/// std::chrono::steady_clock elsewhere (Source::Monotonic stands for whichever it is).
///
/// Source::Tsc reads the CPU's time-stamp counter (rdtsc) and scales it to nanoseconds with a
/// rate measured against CLOCK_MONOTONIC over about 10 ms when the clock is made: a read costs
/// about half what clock_gettime does. It is used only where tsc_is_trusted() says so for this
/// machine (x86-64 Linux only), else the clock is Source::Monotonic. Environment variable PERMITS_CLOCK=monotonic makes
/// the process's instance() Source::Monotonic.
///
/// Times from the TSC follow the counter, not the kernel's clock: they are not slewed by NTP, so
/// they drift from CLOCK_MONOTONIC by parts per million (calibration error and NTP's frequency
/// correction; 0.1 ppm, 5.5 us a minute, where this was written), and a thread's reads are not
/// ordered with its memory accesses (the engine already tolerates a `now` older than the state it
/// updates). A counter found below its calibration point by more than a millisecond (reset by a
/// resume from suspend) switches the clock to Source::Monotonic for good; a reset found later is
/// not detected (PERMITS_CLOCK=monotonic on machines that suspend).
class MonotonicClock final : public Clock {
public:
    enum class Source { Tsc, Monotonic };
    /// The one clock of the process's limiters: Source::Tsc when trusted, unless PERMITS_CLOCK=monotonic.
    static std::shared_ptr<MonotonicClock> instance();
    /// A clock on `wanted`, or on Source::Monotonic when the TSC is not trusted here.
    explicit MonotonicClock(Source wanted);
    /// For tests: the TSC with this scale, where the CPU has one (else Source::Monotonic).
    explicit MonotonicClock(const TscScale& scale);
    Nanos now() const noexcept override;
    Scheduler& scheduler() noexcept override { return EngineThread::instance(); }
    Source source() const noexcept { return tsc_.load(std::memory_order_relaxed) ? Source::Tsc : Source::Monotonic; }
    const TscScale& tsc_scale() const noexcept { return scale_; }

private:
    void use_tsc(const TscScale& scale) noexcept;
    Nanos tsc_reset() const noexcept;
    mutable std::atomic<bool> tsc_{false}; // cleared, for good, by tsc_reset()
    TscScale scale_;
    std::uint64_t reset_below_ = 0; // a millisecond's ticks below scale_.tsc0
};

/// Time that moves only when told. advance() runs, in the calling thread, every timer that
/// has come due, so tests of waiting need no sleeps.
class ManualClock final : public Clock, public Scheduler {
public:
    explicit ManualClock(Nanos start = 0);
    Nanos now() const noexcept override { return now_.load(); }
    Scheduler& scheduler() noexcept override { return *this; }
    void schedule(std::weak_ptr<TimerTarget> target, Nanos when) override;
    std::size_t cancel(const TimerTarget* target) override;
    /// Moves time forward by `delta` (>= 0) and runs the timers due.
    void advance(Nanos delta);
    /// Runs the timers due at the current time (advance(0)).
    void run_due();
    std::size_t pending() const;

private:
    std::atomic<Nanos> now_;
    mutable std::mutex mu_; // guards heap_ only; never held while a timer runs
    TimerHeap heap_;
    std::mutex advance_mu_; // one advance at a time, so timers run in time order
};

} // namespace permits
