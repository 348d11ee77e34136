#include <pybind11/pybind11.h>

#include <pthread.h>
#include <string>
#include <thread>

#include "gil.hpp"
#include "permits/clock.hpp"
#include "self.hpp"

namespace permits::bind {
namespace {

// The real-time clock calibrates the TSC against CLOCK_MONOTONIC once per process, sleeping ~10 ms
// (up to 200 ms on a noisy machine). Done on a thread of its own from import, so that the first
// limiter does not wait for it with the GIL held (every thread of the process would stall, an event
// loop with them); a caller that comes before it is done waits without the GIL.
void calibrate_in_background() {
    // A fork during the calibration would leave the child's clock half made (its initialization
    // guard held by a thread the child does not have): the fork waits for it instead.
    ::pthread_atfork([] { MonotonicClock::instance(); }, nullptr, nullptr);
    std::thread([] { MonotonicClock::instance(); }).detach();
}

std::shared_ptr<MonotonicClock> monotonic_clock() {
    return without_gil([] { return MonotonicClock::instance(); });
}

} // namespace

void bind_clock(py::module_& m) {
    calibrate_in_background();
    py::class_<Clock, std::shared_ptr<Clock>>(m, "Clock")
        .def(
            "now_ns", [](py::handle self) { return self_of<Clock>(self).now(); },
            "now_ns(self, /)\n--\n\nThe clock's time, in integer nanoseconds.");
    py::class_<MonotonicClock, Clock, std::shared_ptr<MonotonicClock>>(m, "MonotonicClock")
        .def(py::init(&monotonic_clock), "__init__(self, /)\n--\n\nThe process's one real-time clock.")
        .def(py::init([](const std::string& source) {
                 if (source != "monotonic") {
                     throw py::value_error("source must be 'monotonic'");
                 }
                 return std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
             }),
             py::arg("source"),
             "__init__(self, source)\n--\n\nA clock on CLOCK_MONOTONIC itself, as every process reads it alike.")
        .def_property_readonly(
            "source",
            [](py::handle self) {
                return self_of<MonotonicClock>(self).source() == MonotonicClock::Source::Tsc ? "tsc" : "monotonic";
            },
            "'tsc' (the CPU's time-stamp counter) or 'monotonic' (clock_gettime(CLOCK_MONOTONIC)).");
    py::class_<ManualClock, Clock, std::shared_ptr<ManualClock>>(m, "ManualClock")
        .def(py::init<Nanos>(), py::arg("start_ns") = 0, "__init__(self, start_ns=0)\n--\n\n")
        .def(
            "advance_ns", [](py::handle self, Nanos delta) { self_of<ManualClock>(self).advance(delta); },
            py::arg("delta_ns"),
            "advance_ns(self, delta_ns)\n--\n\nMoves time forward and runs, in this thread, every timer that "
            "came due.")
        .def(
            "pending_timers", [](py::handle self) { return self_of<ManualClock>(self).pending(); },
            "pending_timers(self, /)\n--\n\nTimers waiting on this clock.");
}

} // namespace permits::bind
