#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <type_traits>

#include "args.hpp"
#include "engine_lease_wait.hpp"
#include "fastcall.hpp"
#include "lease_type.hpp"
#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/shm_limiters.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "self.hpp"
#include "spec.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace {

py::object to_lease(const Outcome& o, const std::shared_ptr<Limiter>& owner, py::handle self) {
    PyObject* lease = py_lease::from_outcome(o, owner.get(), self.ptr());
    if (lease == nullptr) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(lease);
}

py::object enqueue(py::handle self, py::handle n, Nanos timeout_ns, std::shared_ptr<Notifier> notifier) {
    const auto limiter = shared_self_of<Limiter>(self);
    auto q = limiter->enqueue(int_arg(n, "permit_count"), timeout_ns, std::move(notifier));
    if (!q.waiter) {
        return to_lease(q.outcome, limiter, self);
    }
    return py::cast(WaitHandle(limiter, q.waiter, py::reinterpret_borrow<py::object>(self)));
}

// Blocks with the GIL released; wakes every 50 ms to let Ctrl-C (and other signals) in.
py::object wait(py::handle self, py::handle n, Nanos timeout_ns) {
    const auto limiter = shared_self_of<Limiter>(self);
    auto q = limiter->enqueue(int_arg(n, "permit_count"), timeout_ns);
    if (!q.waiter) {
        return to_lease(q.outcome, limiter, self);
    }
    return WaitHandle(limiter, q.waiter, py::reinterpret_borrow<py::object>(self)).block();
}

py::tuple statistics(py::handle self) {
    const Statistics s = self_of<Limiter>(self).statistics();
    return py::make_tuple(s.current_available_permits, s.current_queued_count, s.total_successful_leases,
                          s.total_failed_leases);
}

// ---- acquire(): the hot path, as a METH_FASTCALL method on each limiter type (so are _try_now
// and wait_async) ----
// pybind11's generic dispatch costs more than the whole engine call; this entry point reads the
// C++ object straight from the pybind11 instance (its value and shared_ptr holder).
template <class T, FastCall kind>
PyObject* fast_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "takes at most one argument (permit_count)");
        return nullptr;
    }
    if (!only_permit_count_keyword(kwnames)) {
        return nullptr;
    }
    return guarded([&]() -> PyObject* {
        const std::int64_t n = nargs + nkw == 1 ? int_arg(args[0], "permit_count") : 1;
        const auto* holder = holder_of<T>(self);
        if (holder == nullptr) {
            return nullptr;
        }
        if constexpr (kind == FastCall::Acquire) {
            return py_lease::from_outcome((*holder)->acquire(n), holder->get(), self);
        } else if constexpr (kind == FastCall::TryNow) {
            const auto o = (*holder)->try_now(n);
            return o ? py_lease::from_outcome(*o, holder->get(), self) : Py_NewRef(Py_None);
        } else {
            // Both check now what acquire() would raise, and ask the engine only when stepped.
            detail::check_permit_count(n, (*holder)->max_permits()); // before "closed", as everywhere
            if ((*holder)->closed()) {
                throw ClosedError();
            }
            WaitTarget target;
            target.owner = Py_NewRef(self);
            target.limiter = holder->get();
            if constexpr (kind == FastCall::AcquireAsync) {
                return new_attempt_lease_wait(std::move(target), n);
            }
            return new_engine_lease_wait(std::move(target), n);
        }
    });
}

template <class T, FastCall kind> void install_fast(py::handle cls, const char* name, const char* doc) {
    static PyMethodDef def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_call<T, kind>)),
                              METH_FASTCALL | METH_KEYWORDS, doc};
    install_method(cls, def);
}

template <class T> void install_fast_acquire(py::handle cls) {
    install_fast<T, FastCall::Acquire>(cls, "acquire",
                                       "acquire($self, /, permit_count=1)\n--\n\nTakes permits now or returns a "
                                       "failed lease; never blocks or queues.");
    install_fast<T, FastCall::TryNow>(cls, "_try_now",
                                      "_try_now($self, /, permit_count=1)\n--\n\nA wait's immediate grant, or None.");
    install_fast<T, FastCall::AcquireAsync>(cls, "acquire_async",
                                            "acquire_async($self, /, permit_count=1)\n--\n\nThe attempt of "
                                            "acquire(), made when first awaited, as an awaitable returning its "
                                            "lease; also an async context manager releasing it on exit.");
    install_fast<T, FastCall::WaitAsync>(cls, "wait_async",
                                         "wait_async($self, /, permit_count=1)\n--\n\nWaits in the queue "
                                         "(asyncio); also an async context manager releasing the lease on exit.");
}

QueueOptions queue_options(py::handle queue_limit, bool newest_first) {
    return {queue_limit_arg(queue_limit), newest_first ? QueueOrder::NewestFirst : QueueOrder::OldestFirst};
}

// __init__(clock, spec, queue_limit, newest_first, manual): the engine class L from its spec's
// parameters P.
template <class L, class P>
std::shared_ptr<L> from_spec(std::shared_ptr<Clock> clock, py::handle spec, py::handle queue_limit, bool newest_first,
                             bool manual) {
    const P params = read_spec_as<P>(spec, py::type::of<L>());
    const QueueOptions q = queue_options(queue_limit, newest_first);
    if constexpr (std::is_same_v<P, SlidingWindowParams>) {
        return std::make_shared<L>(std::move(clock), params.permit_limit, params.window, params.segments, q, manual);
    } else {
        if (std::is_same_v<L, Concurrency> && manual) {
            throw std::invalid_argument("a concurrency limiter has no replenishment to do by hand");
        }
        return std::make_shared<L>(std::move(clock), params, q, manual);
    }
}

template <class L, class P> void def_init_from_spec(py::class_<L, Limiter, std::shared_ptr<L>>& cls) {
    cls.def(py::init(&from_spec<L, P>), py::arg("clock"), py::arg("spec"), py::arg("queue_limit"),
            py::arg("newest_first"), py::arg("manual"));
    cls.def(
        "_reconfigure_engine",
        [](py::handle self, py::handle spec, py::handle queue_limit, py::handle newest_first) {
            L& limiter = self_of<L>(self); // first: an instance never initialized says so
            const P params = read_spec_as<P>(spec, py::type::of<L>());
            const QueueOptions q = queue_options(queue_limit, bool_arg(newest_first, "newest_first"));
            if constexpr (std::is_same_v<P, SlidingWindowParams>) {
                limiter.reconfigure(params.permit_limit, params.window, params.segments, q);
            } else {
                limiter.reconfigure(params, q);
            }
        },
        py::arg("spec"), py::arg("queue_limit"), py::arg("newest_first"),
        "_reconfigure_engine(self, spec, queue_limit, newest_first)\n--\n\nThe spec's limit and these queue options "
        "from now on; the state kept.");
}

} // namespace

#if defined(__linux__)
void install_shared_fast_acquire(py::handle cls) {
    install_fast_acquire<shm::SharedLimiter>(cls);
}
#endif

void bind_limiters(py::module_& m) {
    // Signatures in the docstrings (name(...)\n--\n\n) give inspect.signature and help() what the
    // docs show.
    py::class_<Limiter, std::shared_ptr<Limiter>>(m, "Limiter")
        .def("_enqueue", &enqueue, py::arg("permit_count"), py::arg("timeout_ns"), py::arg("notifier"),
             "_enqueue(self, permit_count, timeout_ns, notifier)\n--\n\nA lease now, or a WaitHandle.")
        .def("_wait", &wait, py::arg("permit_count"), py::arg("timeout_ns"),
             "_wait(self, permit_count, timeout_ns)\n--\n\nWaits (GIL released) for a lease.")
        .def(
            "available_permits", [](py::handle self) { return self_of<Limiter>(self).available_permits(); },
            "available_permits(self, /)\n--\n\nAn estimate of the permits available now.")
        .def("_statistics", &statistics, "_statistics(self, /)\n--\n\nThe statistics as a tuple.")
        .def(
            "_idle_duration_ns", [](py::handle self) { return self_of<Limiter>(self).idle_duration(); },
            "_idle_duration_ns(self, /)\n--\n\nNanoseconds fully idle, or None while in use.")
        .def(
            "_reset", [](py::handle self) { return self_of<Limiter>(self).reset(); },
            "_reset(self, /)\n--\n\nForgets what a time-based limiter granted (full from now, its queue served); "
            "False when it cannot (concurrency, closed).")
        .def(
            "try_replenish", [](py::handle self) { return self_of<Limiter>(self).try_replenish(); },
            "try_replenish(self, /)\n--\n\nManual mode: applies the replenishment elapsed time allows and "
            "returns True; False in auto mode.")
        .def(
            "close", [](py::handle self) { self_of<Limiter>(self).close(); },
            "close(self, /)\n--\n\nFails queued requests with reason 'closed'; later calls raise.")
        .def_property_readonly("closed", [](py::handle self) { return self_of<Limiter>(self).closed(); })
        .def_property_readonly("_max_permits", [](py::handle self) { return self_of<Limiter>(self).max_permits(); })
        .def_property_readonly(
            "_amounts",
            [](py::handle self) {
                Limiter& limiter = self_of<Limiter>(self);
                limiter.catch_up(); // (a shared-memory limiter: what another process set, if it did)
                std::int64_t a[2] = {};
                limiter.amounts(a);
                return py::make_tuple(a[0], a[1]);
            },
            "(limit, rate or 0) as they hold now: for a shared-memory limiter, as any process last set them.")
        .def_property_readonly(
            "_queue", [](py::handle self) { return queue_tuple(self_of<Limiter>(self).queue_options()); },
            "(queue_limit or None for no bound, newest_first) as they are now.")
        .def_property_readonly(
            "_clock", [](py::handle self) { return self_of<Limiter>(self).clock(); }, "The clock the limiter runs on.");

    auto tokenbucket = py::class_<TokenBucket, Limiter, std::shared_ptr<TokenBucket>>(m, "TokenBucket");
    def_init_from_spec<TokenBucket, TokenBucketRule>(tokenbucket);
    auto fixedwindow = py::class_<FixedWindow, Limiter, std::shared_ptr<FixedWindow>>(m, "FixedWindow");
    def_init_from_spec<FixedWindow, FixedWindowRule>(fixedwindow);
    auto slidingwindow = py::class_<SlidingWindow, Limiter, std::shared_ptr<SlidingWindow>>(m, "SlidingWindow");
    def_init_from_spec<SlidingWindow, SlidingWindowParams>(slidingwindow);
    auto slidingwindowcounter =
        py::class_<SlidingWindowCounter, Limiter, std::shared_ptr<SlidingWindowCounter>>(m, "SlidingWindowCounter");
    def_init_from_spec<SlidingWindowCounter, SlidingWindowCounterRule>(slidingwindowcounter);
    auto concurrency = py::class_<Concurrency, Limiter, std::shared_ptr<Concurrency>>(m, "Concurrency");
    def_init_from_spec<Concurrency, ConcurrencyRule>(concurrency);

    install_fast_acquire<TokenBucket>(tokenbucket);
    install_fast_acquire<FixedWindow>(fixedwindow);
    install_fast_acquire<SlidingWindow>(slidingwindow);
    install_fast_acquire<SlidingWindowCounter>(slidingwindowcounter);
    install_fast_acquire<Concurrency>(concurrency);
}

} // namespace permits::bind
