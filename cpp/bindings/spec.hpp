// permits.specs values (TokenBucket(...), FixedWindow(...), ...) as the engine's parameters.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <variant>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/time.hpp"
#include "permits/token_bucket.hpp"

namespace permits::bind {

namespace py = pybind11;

/// The sliding window is no rule-driven limiter: its parameters as the constructor takes them.
struct SlidingWindowParams {
    std::int64_t permit_limit;
    Nanos window;
    std::int64_t segments;
};

/// One algorithm's limits: the rule for the rule-driven limiters.
using EngineSpec =
    std::variant<TokenBucketRule, FixedWindowRule, SlidingWindowParams, SlidingWindowCounterRule, ConcurrencyRule>;

/// The one place that reads a spec object: its class's `_engine` (the engine class) says which
/// algorithm, its attributes the limits (durations in integer ns). TypeError for anything else;
/// a bad limit is a ValueError, as the engine's constructors check them.
EngineSpec read_spec(py::handle spec);

/// The alternative P of `spec`, for the engine class `engine`; a TypeError naming the spec class
/// expected (it has the engine class's name) when the spec is of another algorithm.
template <class P> P read_spec_as(py::handle spec, py::handle engine) {
    EngineSpec s = read_spec(spec);
    if (auto* p = std::get_if<P>(&s)) {
        return *p;
    }
    throw py::type_error("spec must be a permits.specs." + std::string(py::str(engine.attr("__name__"))) + ", got " +
                         Py_TYPE(spec.ptr())->tp_name);
}

/// std::visit over lambdas, one per alternative.
template <class... F> struct Overloaded : F... { using F::operator()...; };
template <class... F> Overloaded(F...) -> Overloaded<F...>;

} // namespace permits::bind
