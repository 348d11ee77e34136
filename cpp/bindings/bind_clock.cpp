#include <pybind11/pybind11.h>

#include "permits/clock.hpp"

namespace py = pybind11;

namespace permits::bind {

void bind_clock(py::module_& m) {
    py::class_<Clock, std::shared_ptr<Clock>>(m, "Clock").def("now_ns", &Clock::now);
    py::class_<MonotonicClock, Clock, std::shared_ptr<MonotonicClock>>(m, "MonotonicClock")
        .def(py::init([] { return MonotonicClock::instance(); }))
        .def_property_readonly(
            "source",
            [](const MonotonicClock& c) { return c.source() == MonotonicClock::Source::Tsc ? "tsc" : "monotonic"; },
            "'tsc' (the CPU's time-stamp counter) or 'monotonic' (clock_gettime(CLOCK_MONOTONIC)).");
    py::class_<ManualClock, Clock, std::shared_ptr<ManualClock>>(m, "ManualClock")
        .def(py::init<Nanos>(), py::arg("start_ns") = 0)
        .def("advance_ns", &ManualClock::advance, py::arg("delta_ns"),
             "Moves time forward and runs, in this thread, every timer that came due.")
        .def("pending_timers", &ManualClock::pending);
}

} // namespace permits::bind
