#include "spec.hpp"

#include <string>

#include "args.hpp"
#include "permits/sliding_window.hpp"

namespace permits::bind {

EngineSpec read_spec(py::handle spec) {
    const py::object engine = py::getattr(spec, "_engine", py::none());
    auto get = [&](const char* name) { return int_arg(spec.attr(name), name); };
    if (engine.is(py::type::of<TokenBucket>())) {
        return TokenBucketRule(get("token_limit"), get("tokens_per_period"), get("_period_ns"));
    }
    if (engine.is(py::type::of<FixedWindow>())) {
        return FixedWindowRule(get("permit_limit"), get("_window_ns"));
    }
    if (engine.is(py::type::of<SlidingWindow>())) {
        // (the sliding log's segments are below zero: sliding_window.hpp)
        return SlidingWindowParams{get("permit_limit"), get("_window_ns"), get("_engine_segments")};
    }
    if (engine.is(py::type::of<SlidingWindowCounter>())) {
        return SlidingWindowCounterRule(get("permit_limit"), get("_window_ns"));
    }
    if (engine.is(py::type::of<Concurrency>())) {
        return ConcurrencyRule(get("permit_limit"));
    }
    throw py::type_error(std::string("spec must be a permits.specs spec (TokenBucket, FixedWindow, ...), got ") +
                         Py_TYPE(spec.ptr())->tp_name);
}

} // namespace permits::bind
