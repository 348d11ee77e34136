// permits._core.Meter: an instrumented limiter's lease counts, active leases and lease durations,
// kept as atomics and read when an exporter collects (meter_type.cpp). A granted lease stamped
// with a meter ends itself there on release: no Python call per lease.
#pragma once

#include <Python.h>

#include <cstdint>

namespace permits::py_meter {

/// Adds the type to the module `m` (after the Clock type: a meter reads one); false with an error set.
bool register_type(PyObject* m);
/// A stamped lease's end: the lease is no longer active; `used` (a release, not a refund) observes
/// its duration since `start_ns` on the meter's clock.
void end(PyObject* meter, std::int64_t start_ns, bool used) noexcept;

} // namespace permits::py_meter
