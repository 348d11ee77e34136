// The extension module: the only C++ that knows Python. Conversions and the GIL, nothing else.
#include <pybind11/pybind11.h>

#include "args.hpp"
#include "asgi_gate.hpp"
#include "handoff_type.hpp"
#include "key_encoding.hpp"
#include "lease_type.hpp"
#include "meter_type.hpp"
#include "permits/clock.hpp"
#include "permits/outcome.hpp"
#include "permits/scheduler.hpp"
#include "tally_type.hpp"
#include "wsgi_gate.hpp"

namespace py = pybind11;

namespace permits::bind {
void bind_clock(py::module_& m);
void bind_limiters(py::module_& m);
void bind_wait_handle(py::module_& m);
void bind_per_key(py::module_& m);
void bind_engine_lease_wait(py::module_& m);
void bind_loop_bridge(py::module_& m);
void bind_shm(py::module_& m);
} // namespace permits::bind

PYBIND11_MODULE(_core, m, py::mod_gil_not_used()) {
    // Declared safe without the GIL (free-threaded CPython): free_threading.hpp is what the GIL guarded.
    // Imported in the main interpreter only: permits/_interpreter.py says why (a subinterpreter is
    // refused before this module is loaded; on 3.12+ pybind11's module slot refuses it too).
    // Every docstring starts with its signature (name(...)\n--\n\n), which inspect.signature and
    // help() read: pybind11's own signature line would hide it.
    py::options options;
    options.disable_function_signatures();
    m.doc() = "permits' engine (private: use the names exported by the permits package).";
    if (!permits::py_lease::register_type(m.ptr()) || !permits::py_tally::register_type(m.ptr()) ||
        !permits::py_handoff::register_type(m.ptr()) || !permits::py_wsgi_gate::register_type(m.ptr()) ||
        !permits::py_asgi_gate::register_types(m.ptr())) {
        throw py::error_already_set();
    }
    m.def("_lease_allocations", &permits::py_lease::allocations,
          "_lease_allocations()\n--\n\nLeases allocated so far rather than reused from the freelist (for tests).");
    permits::bind::g_closed_error =
        py::register_exception<permits::ClosedError>(m, "LimiterClosedError", PyExc_RuntimeError).inc_ref().ptr();
    permits::bind::bind_clock(m);
    if (!permits::py_meter::register_type(m.ptr())) {
        throw py::error_already_set();
    }
    permits::bind::bind_limiters(m);
    permits::bind::bind_wait_handle(m);
    permits::bind::bind_per_key(m);
    permits::bind::bind_engine_lease_wait(m);
    permits::bind::bind_loop_bridge(m);
    permits::bind::bind_shm(m);
    // Every platform: the stores (shared memory, Redis, PostgreSQL) name a key's state by it.
    m.def(
        "_key_bytes", [](py::handle resource) { return py::bytes(permits::bind::key_of(resource)); },
        py::arg("resource"),
        "_key_bytes(resource)\n--\n\nA partition key as the engine encodes it (its type included).");
    m.def(
        "_engine_pending_timers", [] { return permits::EngineThread::instance().pending(); },
        "Timers the engine thread holds (for tests).");
    // A forked child has no engine thread: the per-key tables' eviction timers, set again by the
    // fork handlers, need one before any new timer would start it.
    py::module_::import("os").attr("register_at_fork")(
        py::arg("after_in_child") = py::cpp_function([] { permits::EngineThread::instance().resume(); }));
}
