// PartitionedLimiter.per_key: the per-key table lives in the engine; a Python key is encoded to
// bytes with its type ("7" and 7 differ) and looked up there, with no Python call per key.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <variant>

#include "args.hpp"
#include "engine_lease_wait.hpp"
#include "fastcall.hpp"
#include "key_encoding.hpp"
#include "lease_type.hpp"
#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "self.hpp"
#include "spec.hpp"
#include "wait_handle.hpp"

namespace permits::bind {
namespace {

// A lease for a per-key outcome: its permits go back through the table, which tells the key's
// record or full limiter and notes when the key will be idle (exact eviction).
PyObject* lease_of(const Outcome& o, PerKeyLimiter& per_key, PyObject* resource, PyObject* self) {
    if (!o.acquired) {
        return py_lease::from_outcome(o, nullptr, self);
    }
    return py_lease::from_per_key_outcome(o, per_key, resource);
}

py::object steal(PyObject* obj) {
    if (obj == nullptr) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(obj);
}

PerKeyTemplate make_template(const std::shared_ptr<Clock>& clock, py::handle spec, py::handle queue_limit,
                             bool newest_first) {
    const QueueOptions q{queue_limit_arg(queue_limit),
                         newest_first ? QueueOrder::NewestFirst : QueueOrder::OldestFirst};
    detail::check_queue(q);
    return std::visit(Overloaded{
                          [&](const TokenBucketRule& rule) { return PerKeyTemplate::of<TokenBucket>(clock, rule, q); },
                          [&](const FixedWindowRule& rule) { return PerKeyTemplate::of<FixedWindow>(clock, rule, q); },
                          [&](const SlidingWindowCounterRule& rule) {
                              return PerKeyTemplate::of<SlidingWindowCounter>(clock, rule, q);
                          },
                          [&](const ConcurrencyRule& rule) { return PerKeyTemplate::of<Concurrency>(clock, rule, q); },
                          [&](const SlidingWindowParams& p) {
                              // Each key a compact record; a bad option is a ValueError here rather than at first use.
                              return PerKeyTemplate::sliding_window(clock, p.permit_limit, p.window, p.segments, q);
                          },
                      },
                      read_spec(spec));
}

// acquire(resource, permit_count=1) (and _try_now, wait_async) as a METH_FASTCALL method: the
// per-key hot path.
template <FastCall kind>
PyObject* per_key_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 1 || nargs + nkw > 2) {
        // "key": the word users of a per-key limiter have for what they pass first.
        PyErr_Format(PyExc_TypeError, "%s() takes a key and at most a permit_count: %s(key, permit_count=1)",
                     fast_call_name(kind), fast_call_name(kind));
        return nullptr;
    }
    if (!only_permit_count_keyword(kwnames)) {
        return nullptr;
    }
    return guarded([&]() -> PyObject* {
        const std::int64_t n = nargs + nkw == 2 ? int_arg(args[1], "permit_count") : 1;
        if (n < 0) { // before the key: a bad count creates no partition
            throw std::invalid_argument("permit_count must not be negative, got " + std::to_string(n));
        }
        KeyBuffer key;
        if (!encode_key(args[0], key)) {
            return nullptr;
        }
        const auto* per_key = holder_of<PerKeyLimiter>(self);
        if (per_key == nullptr) {
            return nullptr;
        }
        if constexpr (kind == FastCall::Acquire) {
            return lease_of((*per_key)->acquire(key.view(), n).outcome, **per_key, args[0], self);
        } else if constexpr (kind == FastCall::TryNow) {
            const auto r = (*per_key)->try_now(key.view(), n);
            return r ? lease_of(r->outcome, **per_key, args[0], self) : Py_NewRef(Py_None);
        } else {
            if ((*per_key)->closed()) {
                throw ClosedError();
            }
            WaitTarget target;
            target.owner = Py_NewRef(self);
            target.per_key = per_key->get();
            target.key = Py_NewRef(args[0]);
            target.encoded = std::string(key.view());
            if constexpr (kind == FastCall::AcquireAsync) {
                return new_attempt_lease_wait(std::move(target), n); // asks the table when stepped
            }
            return new_engine_lease_wait(std::move(target), n);
        }
    });
}

// _available(resource): the key's available permits (0 at the partition bound), as an int: what a
// response's RateLimit headers read on every request (without the statistics tuple).
PyObject* per_key_available(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "_available() takes one key");
        return nullptr;
    }
    return guarded([&]() -> PyObject* {
        KeyBuffer key;
        if (!encode_key(args[0], key)) {
            return nullptr;
        }
        const auto* per_key = holder_of<PerKeyLimiter>(self);
        if (per_key == nullptr) {
            return nullptr;
        }
        const auto s = (*per_key)->statistics(key.view());
        return PyLong_FromLongLong(s ? s->current_available_permits : 0);
    });
}

template <FastCall kind> void install(py::handle cls, const char* name, const char* doc) {
    static PyMethodDef def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&per_key_call<kind>)),
                              METH_FASTCALL | METH_KEYWORDS, doc};
    install_method(cls, def);
}

} // namespace

void bind_per_key(py::module_& m) {
    auto cls =
        py::class_<PerKeyLimiter, std::shared_ptr<PerKeyLimiter>>(m, "PerKey")
            .def(py::init([](std::shared_ptr<Clock> clock, py::handle spec, py::handle queue_limit, bool newest_first,
                             Nanos idle_timeout_ns, std::int64_t max_partitions) {
                     auto tmpl = make_template(clock, spec, queue_limit, newest_first);
                     return std::make_shared<PerKeyLimiter>(std::move(clock), std::move(tmpl), idle_timeout_ns,
                                                            max_partitions);
                 }),
                 py::arg("clock"), py::arg("spec"), py::arg("queue_limit"), py::arg("newest_first"),
                 py::arg("idle_timeout_ns"), py::arg("max_partitions"))
            .def(
                "_enqueue",
                [](py::handle self_obj, py::handle resource, py::handle n, Nanos timeout_ns,
                   std::shared_ptr<Notifier> notifier) -> py::object {
                    const auto self = shared_self_of<PerKeyLimiter>(self_obj);
                    const std::string key = key_of(resource);
                    auto q = self->enqueue(key, int_arg(n, "permit_count"), timeout_ns, std::move(notifier));
                    if (q.enqueued.waiter) {
                        return py::cast(WaitHandle(q.owner, q.enqueued.waiter,
                                                   py::reinterpret_borrow<py::object>(self_obj), self,
                                                   py::reinterpret_borrow<py::object>(resource)));
                    }
                    return steal(lease_of(q.enqueued.outcome, *self, resource.ptr(), self_obj.ptr()));
                },
                py::arg("resource"), py::arg("permit_count"), py::arg("timeout_ns"), py::arg("notifier"),
                "_enqueue(self, resource, permit_count, timeout_ns, notifier)\n--\n\nA lease now, or a "
                "WaitHandle.")
            .def(
                "_reconfigure_engine",
                [](py::handle self, py::handle spec, py::handle queue_limit, py::handle newest_first) {
                    PerKeyLimiter& limiter = self_of<PerKeyLimiter>(self); // first: uninitialized says so
                    const bool newest = bool_arg(newest_first, "newest_first");
                    limiter.reconfigure(make_template(limiter.clock(), spec, queue_limit, newest));
                },
                py::arg("spec"), py::arg("queue_limit"), py::arg("newest_first"),
                "_reconfigure_engine(self, spec, queue_limit, newest_first)\n--\n\nEvery key's limit and queue "
                "options from now on, present and future; each key's state kept.")
            .def_property_readonly(
                "_queue", [](py::handle self) { return queue_tuple(self_of<PerKeyLimiter>(self).queue_options()); },
                "(queue_limit or None for no bound, newest_first) as they are now.")
            .def(
                "_reset",
                [](py::handle self, py::handle resource) {
                    return self_of<PerKeyLimiter>(self).reset(key_of(resource));
                },
                "_reset(self, resource, /)\n--\n\nForgets the key's time-based usage; False when there was nothing to "
                "forget.")
            .def(
                "_statistics",
                [](py::handle self, py::handle resource) -> py::object {
                    const auto s = self_of<PerKeyLimiter>(self).statistics(key_of(resource));
                    if (!s) {
                        return py::none();
                    }
                    return py::make_tuple(s->current_available_permits, s->current_queued_count,
                                          s->total_successful_leases, s->total_failed_leases);
                },
                "_statistics(self, resource, /)\n--\n\nThe key's statistics tuple (None at the partition bound).")
            .def_property_readonly("partition_count",
                                   [](py::handle self) { return self_of<PerKeyLimiter>(self).size(); })
            .def(
                "_totals",
                [](py::handle self) {
                    const Statistics s = self_of<PerKeyLimiter>(self).totals();
                    return py::make_tuple(s.current_available_permits, s.current_queued_count,
                                          s.total_successful_leases, s.total_failed_leases);
                },
                "_totals(self, /)\n--\n\nThe statistics over every key, as a tuple.")
            .def(
                "_memory",
                [](py::handle self) {
                    const auto m = self_of<PerKeyLimiter>(self).memory();
                    return py::make_tuple(m.bytes, m.key_bytes);
                },
                "_memory(self, /)\n--\n\n(bytes the table has allocated, of which key bytes); full limiters not "
                "counted.")
            .def(
                "evict_idle", [](py::handle self) { return self_of<PerKeyLimiter>(self).evict_idle(); },
                "evict_idle(self, /)\n--\n\nDrops every partition idle for longer than the idle timeout now; "
                "returns how many.")
            .def(
                "close", [](py::handle self) { self_of<PerKeyLimiter>(self).close(); },
                "close(self, /)\n--\n\nFails every key's queued requests with reason 'closed'; later calls raise.")
            .def_property_readonly("closed", [](py::handle self) { return self_of<PerKeyLimiter>(self).closed(); });
    static PyMethodDef available_def = {
        "_available", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&per_key_available)), METH_FASTCALL,
        "_available($self, resource, /)\n--\n\nThe resource's available permits now (0 at the partition bound)."};
    install_method(cls, available_def);
    install<FastCall::Acquire>(cls, "acquire",
                               "acquire($self, resource, /, permit_count=1)\n--\n\nTakes permits of the "
                               "resource's partition now or returns a failed lease; never blocks or queues.");
    install<FastCall::TryNow>(cls, "_try_now",
                              "_try_now($self, resource, /, permit_count=1)\n--\n\nA wait's immediate grant, or "
                              "None.");
    install<FastCall::AcquireAsync>(cls, "acquire_async",
                                    "acquire_async($self, resource, /, permit_count=1)\n--\n\nThe attempt of "
                                    "acquire(), made when first awaited, as an awaitable of its lease (it never "
                                    "queues); also an async context manager releasing the lease on exit.");
    install<FastCall::WaitAsync>(cls, "wait_async",
                                 "wait_async($self, resource, /, permit_count=1)\n--\n\nWaits in the resource's "
                                 "queue (asyncio); also an async context manager releasing the lease on exit.");
}

} // namespace permits::bind
