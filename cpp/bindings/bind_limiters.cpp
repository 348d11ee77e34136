#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "args.hpp"
#include "async_wait.hpp"
#include "fastcall.hpp"
#include "lease_type.hpp"
#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace {

py::object to_lease(const Outcome& o, const std::shared_ptr<Limiter>& owner) {
    PyObject* lease = py_lease::from_outcome(o, owner.get());
    if (lease == nullptr) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(lease);
}

py::object acquire(const std::shared_ptr<Limiter>& self, py::handle n) {
    return to_lease(self->acquire(int_arg(n, "permit_count")), self);
}

py::object enqueue(const std::shared_ptr<Limiter>& self, py::handle n, Nanos timeout_ns,
                   std::shared_ptr<Notifier> notifier, std::uint64_t id) {
    auto q = self->enqueue(int_arg(n, "permit_count"), timeout_ns, std::move(notifier), id);
    if (!q.waiter) {
        return to_lease(q.outcome, self);
    }
    return py::cast(WaitHandle(self, q.waiter));
}

// Blocks with the GIL released; wakes every 50 ms to let Ctrl-C (and other signals) in.
py::object wait(const std::shared_ptr<Limiter>& self, py::handle n, Nanos timeout_ns) {
    auto q = self->enqueue(int_arg(n, "permit_count"), timeout_ns);
    if (!q.waiter) {
        return to_lease(q.outcome, self);
    }
    return WaitHandle(self, q.waiter).block();
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
            return py_lease::from_outcome((*holder)->acquire(n), holder->get());
        } else if constexpr (kind == FastCall::TryNow) {
            const auto o = (*holder)->try_now(n);
            return o ? py_lease::from_outcome(*o, holder->get()) : Py_NewRef(Py_None);
        } else {
            detail::check_permit_count(n, (*holder)->max_permits()); // before "closed", as everywhere
            if ((*holder)->closed()) {
                throw ClosedError();
            }
            WaitTarget target;
            target.owner = Py_NewRef(self);
            target.limiter = holder->get();
            return new_async_wait(std::move(target), n);
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
                                       "acquire(permit_count=1) -> Lease: takes permits now or returns a failed "
                                       "lease; never blocks or queues.");
    install_fast<T, FastCall::TryNow>(cls, "_try_now",
                                      "_try_now(permit_count=1) -> Lease | None: a wait's immediate grant, or None.");
    install_fast<T, FastCall::WaitAsync>(cls, "wait_async",
                                         "wait_async(permit_count=1) -> AsyncWait: waits in the queue (asyncio); "
                                         "also an async context manager releasing the lease on exit.");
}

QueueOptions queue_options(py::handle queue_limit, bool newest_first) {
    return {int_arg(queue_limit, "queue_limit"), newest_first ? QueueOrder::NewestFirst : QueueOrder::OldestFirst};
}

} // namespace

void bind_limiters(py::module_& m) {
    py::class_<Limiter, std::shared_ptr<Limiter>>(m, "Limiter")
        .def("acquire", &acquire, py::arg("permit_count") = 1,
             "Takes permits now or returns a failed lease; never blocks or queues.")
        .def(
            "_try_now",
            [](const std::shared_ptr<Limiter>& self, py::handle n) -> py::object {
                const auto o = self->try_now(int_arg(n, "permit_count"));
                return o ? to_lease(*o, self) : py::none();
            },
            py::arg("permit_count") = 1)
        .def("_enqueue", &enqueue, py::arg("permit_count"), py::arg("timeout_ns"), py::arg("notifier"), py::arg("id"))
        .def("_wait", &wait, py::arg("permit_count"), py::arg("timeout_ns"))
        .def("available_permits", &Limiter::available_permits, "An estimate of the permits available now.")
        .def("_statistics",
             [](Limiter& l) {
                 const Statistics s = l.statistics();
                 return py::make_tuple(s.current_available_permits, s.current_queued_count, s.total_successful_leases,
                                       s.total_failed_leases);
             })
        .def("_idle_duration_ns", &Limiter::idle_duration)
        .def("try_replenish", &Limiter::try_replenish,
             "Manual mode: applies the replenishment elapsed time allows and returns True; False in auto mode.")
        .def("close", &Limiter::close, "Fails queued requests with reason 'closed'; later calls raise.")
        .def_property_readonly("closed", &Limiter::closed)
        .def_property_readonly("_max_permits", &Limiter::max_permits)
        .def_property_readonly("_clock", &Limiter::clock, "The clock the limiter runs on.");

    auto tokenbucket = py::class_<TokenBucket, Limiter, std::shared_ptr<TokenBucket>>(m, "TokenBucket");
    tokenbucket.def(py::init([](std::shared_ptr<Clock> clock, py::handle token_limit, py::handle tokens_per_period,
                                Nanos period, py::handle queue_limit, bool newest_first, bool manual) {
                        return std::make_shared<TokenBucket>(std::move(clock), int_arg(token_limit, "token_limit"),
                                                             int_arg(tokens_per_period, "tokens_per_period"), period,
                                                             queue_options(queue_limit, newest_first), manual);
                    }),
                    py::arg("clock"), py::arg("token_limit"), py::arg("tokens_per_period"), py::arg("period_ns"),
                    py::arg("queue_limit"), py::arg("newest_first"), py::arg("manual"));

    auto fixedwindow = py::class_<FixedWindow, Limiter, std::shared_ptr<FixedWindow>>(m, "FixedWindow");
    fixedwindow.def(py::init([](std::shared_ptr<Clock> clock, py::handle permit_limit, Nanos window,
                                py::handle queue_limit, bool newest_first, bool manual) {
                        return std::make_shared<FixedWindow>(std::move(clock), int_arg(permit_limit, "permit_limit"),
                                                             window, queue_options(queue_limit, newest_first), manual);
                    }),
                    py::arg("clock"), py::arg("permit_limit"), py::arg("window_ns"), py::arg("queue_limit"),
                    py::arg("newest_first"), py::arg("manual"));

    auto slidingwindow = py::class_<SlidingWindow, Limiter, std::shared_ptr<SlidingWindow>>(m, "SlidingWindow");
    slidingwindow.def(py::init([](std::shared_ptr<Clock> clock, py::handle permit_limit, Nanos window,
                                  py::handle segments, py::handle queue_limit, bool newest_first, bool manual) {
                          return std::make_shared<SlidingWindow>(std::move(clock),
                                                                 int_arg(permit_limit, "permit_limit"), window,
                                                                 int_arg(segments, "segments_per_window"),
                                                                 queue_options(queue_limit, newest_first), manual);
                      }),
                      py::arg("clock"), py::arg("permit_limit"), py::arg("window_ns"), py::arg("segments_per_window"),
                      py::arg("queue_limit"), py::arg("newest_first"), py::arg("manual"));

    auto slidingwindowcounter =
        py::class_<SlidingWindowCounter, Limiter, std::shared_ptr<SlidingWindowCounter>>(m, "SlidingWindowCounter");
    slidingwindowcounter.def(py::init([](std::shared_ptr<Clock> clock, py::handle permit_limit, Nanos window,
                                         py::handle queue_limit, bool newest_first, bool manual) {
                                 return std::make_shared<SlidingWindowCounter>(
                                     std::move(clock), int_arg(permit_limit, "permit_limit"), window,
                                     queue_options(queue_limit, newest_first), manual);
                             }),
                             py::arg("clock"), py::arg("permit_limit"), py::arg("window_ns"), py::arg("queue_limit"),
                             py::arg("newest_first"), py::arg("manual"));

    auto concurrency = py::class_<Concurrency, Limiter, std::shared_ptr<Concurrency>>(m, "Concurrency");
    concurrency.def(
        py::init([](std::shared_ptr<Clock> clock, py::handle permit_limit, py::handle queue_limit, bool newest_first) {
            return std::make_shared<Concurrency>(std::move(clock), int_arg(permit_limit, "permit_limit"),
                                                 queue_options(queue_limit, newest_first));
        }),
        py::arg("clock"), py::arg("permit_limit"), py::arg("queue_limit"), py::arg("newest_first"));

    install_fast_acquire<TokenBucket>(tokenbucket);
    install_fast_acquire<FixedWindow>(fixedwindow);
    install_fast_acquire<SlidingWindow>(slidingwindow);
    install_fast_acquire<SlidingWindowCounter>(slidingwindowcounter);
    install_fast_acquire<Concurrency>(concurrency);
}

} // namespace permits::bind
