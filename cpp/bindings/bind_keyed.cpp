// PartitionedLimiter.per_key: the per-key table lives in the engine; a Python key is encoded to
// bytes with its type ("7" and 7 differ) and looked up there, with no Python call per key.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "args.hpp"
#include "fastcall.hpp"
#include "lease_type.hpp"
#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/keyed.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "wait_handle.hpp"

namespace py = pybind11;

namespace permits::bind {
namespace {

constexpr int kMaxKeyDepth = 16;

void put_u32(std::string& out, std::size_t n) {
    const auto v = static_cast<std::uint32_t>(n);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Appends the key's type-tagged encoding; false with a Python error set for a key of another type.
// Lengths are written only inside tuples, where they keep the items apart: a top-level "user-42"
// is 8 bytes, short enough for the string's inline buffer (no heap block per key).
bool encode_key(PyObject* key, std::string& out, int depth) {
    if (PyUnicode_CheckExact(key) || PyUnicode_Check(key)) {
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(key, &size); // cached in the str object
        if (utf8 == nullptr) {
            return false;
        }
        out.push_back('s');
        if (depth > 0) {
            put_u32(out, static_cast<std::size_t>(size));
        }
        out.append(utf8, static_cast<std::size_t>(size));
        return true;
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow == 0) {
            out.push_back('i');
            out.append(reinterpret_cast<const char*>(&v), sizeof v);
            return true;
        }
        PyObject* text = PyObject_Str(key); // large ints: their decimal digits
        if (text == nullptr) {
            return false;
        }
        Py_ssize_t size = 0;
        const char* digits = PyUnicode_AsUTF8AndSize(text, &size);
        out.push_back('I');
        if (depth > 0) {
            put_u32(out, static_cast<std::size_t>(size));
        }
        out.append(digits, static_cast<std::size_t>(size));
        Py_DECREF(text);
        return true;
    }
    if (PyBytes_Check(key)) {
        out.push_back('b');
        if (depth > 0) {
            put_u32(out, static_cast<std::size_t>(PyBytes_GET_SIZE(key)));
        }
        out.append(PyBytes_AS_STRING(key), static_cast<std::size_t>(PyBytes_GET_SIZE(key)));
        return true;
    }
    if (PyTuple_Check(key)) {
        if (depth >= kMaxKeyDepth) {
            PyErr_Format(PyExc_ValueError, "a partition key may nest tuples at most %d deep", kMaxKeyDepth);
            return false;
        }
        out.push_back('t');
        put_u32(out, static_cast<std::size_t>(PyTuple_GET_SIZE(key)));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); ++i) {
            if (!encode_key(PyTuple_GET_ITEM(key, i), out, depth + 1)) {
                return false;
            }
        }
        return true;
    }
    PyErr_Format(PyExc_TypeError, "a partition key must be a str, bytes, int or a tuple of them, got %.100s",
                 Py_TYPE(key)->tp_name);
    return false;
}

std::string key_of(py::handle resource) {
    std::string key;
    if (!encode_key(resource.ptr(), key, 0)) {
        throw py::error_already_set();
    }
    return key;
}

// A lease for `o`; `owner` may be null (a request refused at the partition bound).
py::object to_lease(const Outcome& o, const std::shared_ptr<Limiter>& owner) {
    PyObject* lease = py_lease::from_outcome(o, owner);
    if (lease == nullptr) {
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(lease);
}

KeyedLimiter::Factory make_factory(std::shared_ptr<Clock> clock, const std::string& kind, py::tuple args,
                                   py::handle queue_limit, bool newest_first) {
    const QueueOptions q{int_arg(queue_limit, "queue_limit"),
                         newest_first ? QueueOrder::NewestFirst : QueueOrder::OldestFirst};
    auto arg = [&](std::size_t i, const char* name) { return int_arg(args[i], name); };
    KeyedLimiter::Factory f;
    if (kind == "token_bucket") {
        const auto limit = arg(0, "token_limit"), per = arg(1, "tokens_per_period"), period = arg(2, "period_ns");
        f = [=] { return std::make_shared<TokenBucket>(clock, limit, per, period, q, false); };
    } else if (kind == "fixed_window") {
        const auto limit = arg(0, "permit_limit"), window = arg(1, "window_ns");
        f = [=] { return std::make_shared<FixedWindow>(clock, limit, window, q, false); };
    } else if (kind == "sliding_window") {
        const auto limit = arg(0, "permit_limit"), window = arg(1, "window_ns"),
                   segments = arg(2, "segments_per_window");
        f = [=] { return std::make_shared<SlidingWindow>(clock, limit, window, segments, q, false); };
    } else if (kind == "sliding_window_counter") {
        const auto limit = arg(0, "permit_limit"), window = arg(1, "window_ns");
        f = [=] { return std::make_shared<SlidingWindowCounter>(clock, limit, window, q, false); };
    } else if (kind == "concurrency") {
        const auto limit = arg(0, "permit_limit");
        f = [=] { return std::make_shared<Concurrency>(clock, limit, q); };
    } else {
        throw py::value_error("no engine per-key limiter of kind " + kind);
    }
    f(); // builds one now, so that a bad option is a ValueError here rather than at first use
    return f;
}

// acquire(resource, permit_count=1) as a METH_FASTCALL method: the per-key hot path.
template <FastCall kind>
PyObject* keyed_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 1 || nargs + nkw > 2) {
        PyErr_SetString(PyExc_TypeError, "takes a resource and at most a permit_count");
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
        std::string key;
        if (!encode_key(args[0], key, 0)) {
            return nullptr;
        }
        const auto* keyed = holder_of<KeyedLimiter>(self);
        if (keyed == nullptr) {
            return nullptr;
        }
        std::shared_ptr<Limiter> owner;
        const auto result = (*keyed)->with(key, [&](Limiter& l) {
            owner = l.shared_from_this();
            if constexpr (kind == FastCall::Acquire) {
                return std::optional<Outcome>(l.acquire(n));
            } else {
                return l.try_now(n);
            }
        });
        if (!result) { // no room for a new key
            return to_lease(Outcome::failed(n, Reason::PartitionLimit), nullptr).release().ptr();
        }
        return *result ? py_lease::from_outcome(**result, owner) : Py_NewRef(Py_None);
    });
}

template <FastCall kind> void install(py::handle cls, const char* name, const char* doc) {
    static PyMethodDef def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&keyed_call<kind>)),
                              METH_FASTCALL | METH_KEYWORDS, doc};
    install_method(cls, def);
}

} // namespace

void bind_keyed(py::module_& m) {
    auto cls =
        py::class_<KeyedLimiter, std::shared_ptr<KeyedLimiter>>(m, "Keyed")
            .def(py::init([](std::shared_ptr<Clock> clock, const std::string& kind, py::tuple args,
                             py::handle queue_limit, bool newest_first, Nanos idle_timeout_ns,
                             std::int64_t max_partitions) {
                     auto factory = make_factory(clock, kind, args, queue_limit, newest_first);
                     return std::make_shared<KeyedLimiter>(std::move(clock), std::move(factory), idle_timeout_ns,
                                                           max_partitions);
                 }),
                 py::arg("clock"), py::arg("kind"), py::arg("args"), py::arg("queue_limit"), py::arg("newest_first"),
                 py::arg("idle_timeout_ns"), py::arg("max_partitions"))
            .def(
                "_enqueue",
                [](const std::shared_ptr<KeyedLimiter>& self, py::handle resource, py::handle n, Nanos timeout_ns,
                   std::shared_ptr<Notifier> notifier, std::uint64_t id) -> py::object {
                    const std::string key = key_of(resource);
                    std::shared_ptr<Limiter> owner;
                    auto q = self->with(key, [&](Limiter& l) {
                        owner = l.shared_from_this();
                        return l.enqueue(int_arg(n, "permit_count"), timeout_ns, std::move(notifier), id);
                    });
                    if (!q) {
                        return to_lease(Outcome::failed(int_arg(n, "permit_count"), Reason::PartitionLimit), nullptr);
                    }
                    if (!q->waiter) {
                        return to_lease(q->outcome, owner);
                    }
                    return py::cast(WaitHandle(owner, q->waiter));
                },
                py::arg("resource"), py::arg("permit_count"), py::arg("timeout_ns"), py::arg("notifier"), py::arg("id"))
            .def(
                "_limiter",
                [](const std::shared_ptr<KeyedLimiter>& self, py::handle resource) -> py::object {
                    auto l = self->limiter(key_of(resource));
                    return l ? py::cast(l) : py::none();
                },
                "The key's limiter (None at the partition bound).")
            .def_property_readonly("partition_count", &KeyedLimiter::size)
            .def("_totals",
                 [](KeyedLimiter& self) {
                     const Statistics s = self.totals();
                     return py::make_tuple(s.current_available_permits, s.current_queued_count,
                                           s.total_successful_leases, s.total_failed_leases);
                 })
            .def("evict_idle", &KeyedLimiter::evict_idle,
                 "Drops every partition idle for longer than the idle timeout now.")
            .def("close", &KeyedLimiter::close)
            .def_property_readonly("closed", &KeyedLimiter::closed);
    install<FastCall::Acquire>(cls, "acquire", "acquire(resource, permit_count=1) -> Lease");
    install<FastCall::TryNow>(cls, "_try_now", "_try_now(resource, permit_count=1) -> Lease | None");
}

} // namespace permits::bind
