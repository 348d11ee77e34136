// permits.shm: a store opens a shared-memory segment; its limiters are the engine's own classes on
// state words in the segment (constructed through one more __init__ overload of each), a shared
// concurrency limiter, and the per-key table whose keys' limiters this process makes on demand.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "args.hpp"
#include "fastcall.hpp"
#include "gil.hpp"
#include "key_encoding.hpp"
#include "lease_type.hpp"
#include "self.hpp"
#include "spec.hpp"

#if defined(__linux__)
#include "permits/shm_inspect.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_keyed.hpp"
#include "permits/shm_limiters.hpp"
#endif

namespace permits::bind {

#if defined(__linux__)
void install_shared_fast_acquire(py::handle cls);

namespace {

QueueOptions queue_of(py::handle queue_limit, bool newest_first) {
    return {queue_limit_arg(queue_limit), newest_first ? QueueOrder::NewestFirst : QueueOrder::OldestFirst};
}

/// What the OS refused, as the OSError subclass Python raises for that errno (PermissionError...).
[[noreturn]] void raise_os_error(const std::system_error& e) {
    errno = e.code().value();
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, e.what());
    throw py::error_already_set();
}

template <class F> auto os_call(F&& f) {
    try {
        return f();
    } catch (const std::system_error& e) {
        raise_os_error(e);
    }
}

template <class L> py::class_<L, Limiter, std::shared_ptr<L>> existing(py::module_& m, const char* name) {
    return py::reinterpret_borrow<py::class_<L, Limiter, std::shared_ptr<L>>>(m.attr(name));
}

shm::Params template_params(const EngineSpec& spec, Nanos lease_ttl) {
    return std::visit(
        Overloaded{
            [](const TokenBucketRule& r) { return shm::params_of(r); },
            [](const FixedWindowRule& r) { return shm::params_of(r); },
            [](const SlidingWindowCounterRule& r) { return shm::params_of(r); },
            [](const SlidingWindowParams& p) { return shm::params_of_sliding(p.permit_limit, p.window, p.segments); },
            [&](const ConcurrencyRule& r) { return shm::params_of_concurrency(r.permit_limit(), lease_ttl); },
        },
        spec);
}

py::tuple statistics_tuple(const Statistics& s) {
    return py::make_tuple(s.current_available_permits, s.current_queued_count, s.total_successful_leases,
                          s.total_failed_leases);
}

// The lease of a shared key's outcome: the key's Limiter's when it decided, else the record's.
PyObject* lease_of(const shm::KeyedLimiter::Result& r, shm::KeyedLimiter& keyed, PyObject* key, PyObject* self) {
    if (r.limiter) {
        return py_lease::from_outcome(r.outcome, r.limiter.get(), self);
    }
    return py_lease::from_shm_key_outcome(r.outcome, keyed, key, self);
}

// acquire(resource, permit_count=1) and _try_now on a shared per-key table, as METH_FASTCALL
// methods: a time-based key's grant from its record, with no Python call and no Limiter per key.
// Checked in the order SharedKeyedLimiter always checked: closed, the key, the count.
template <FastCall kind>
PyObject* keyed_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
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
        const auto* keyed = holder_of<shm::KeyedLimiter>(self);
        if (keyed == nullptr) {
            return nullptr;
        }
        if ((*keyed)->closed()) {
            throw ClosedError();
        }
        KeyBuffer key;
        if (!encode_key(args[0], key)) {
            return nullptr;
        }
        const std::int64_t n = nargs + nkw == 2 ? int_arg(args[1], "permit_count") : 1;
        if constexpr (kind == FastCall::Acquire) {
            return lease_of((*keyed)->acquire(key.view(), n), **keyed, args[0], self);
        } else {
            const auto r = (*keyed)->try_now(key.view(), n);
            return r ? lease_of(*r, **keyed, args[0], self) : Py_NewRef(Py_None);
        }
    });
}

template <FastCall kind> void install_keyed(py::handle cls, const char* name, const char* doc) {
    static PyMethodDef def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&keyed_call<kind>)),
                              METH_FASTCALL | METH_KEYWORDS, doc};
    install_method(cls, def);
}

py::dict holder_dict(const shm::HolderInfo& h) {
    py::dict d;
    d["index"] = h.index;
    d["pid"] = h.pid;
    d["permits"] = h.permits;
    d["alive"] = h.alive;
    d["same_namespace"] = h.same_namespace;
    return d;
}

py::list holders_list(const std::vector<shm::HolderInfo>& holders) {
    py::list out;
    for (const auto& h : holders) {
        out.append(holder_dict(h));
    }
    return out;
}

template <class T> py::object optional_of(const std::optional<T>& v) {
    return v ? py::cast(*v) : py::none();
}

// shm::describe as plain dicts, lists and tuples (the CLI prints them, or dumps them as JSON).
py::dict describe_dict(const shm::SegmentInfo& info) {
    py::list slots;
    for (const auto& s : info.slots) {
        py::dict d;
        d["name"] = s.name;
        d["kind"] = s.kind;
        d["key_kind"] = s.key_kind.empty() ? py::none() : py::cast(s.key_kind);
        py::list params;
        for (const auto& p : s.params) {
            params.append(py::make_tuple(p.name, p.value, p.duration));
        }
        d["params"] = params;
        d["bytes"] = s.bytes;
        d["available"] = optional_of(s.available);
        d["limit"] = optional_of(s.limit);
        d["keys"] = optional_of(s.keys);
        d["holders"] = holders_list(s.holders);
        d["damage"] = s.damage.empty() ? py::none() : py::cast(s.damage);
        slots.append(d);
    }
    py::dict d;
    d["name"] = info.name;
    d["size"] = info.size;
    d["capacity"] = info.capacity;
    d["arena_bytes"] = info.arena_bytes;
    d["used_bytes"] = info.used_bytes;
    d["clock"] = info.clock == shm::ClockKind::Manual ? "manual" : "monotonic";
    d["limiters"] = slots;
    d["holders"] = holders_list(info.holders);
    d["holder_slots"] = info.holder_slots;
    return d;
}

} // namespace

void bind_shm(py::module_& m) {
    using shm::Store;
    py::class_<Store, std::shared_ptr<Store>>(m, "ShmStore")
        .def(py::init([](const std::string& name, std::uint64_t capacity, unsigned mode, std::shared_ptr<Clock> clock) {
                 const auto kind = dynamic_cast<ManualClock*>(clock.get()) != nullptr ? shm::ClockKind::Manual
                                                                                      : shm::ClockKind::Monotonic;
                 auto segment = os_call([&] {
                     return without_gil([&] { return shm::Segment::open(name, {capacity, mode, kind}); });
                 });
                 return std::make_shared<Store>(std::move(segment), std::move(clock));
             }),
             py::arg("name"), py::arg("capacity"), py::arg("mode"), py::arg("clock"),
             "__init__(self, name, capacity, mode, clock)\n--\n\nOpens (or creates) the segment.")
        .def_static(
            "unlink", [](const std::string& name) { return os_call([&] { return shm::Segment::unlink(name); }); },
            py::arg("name"), "unlink(name)\n--\n\nRemoves the segment's name; False if it did not exist.")
        .def_static(
            "describe",
            [](const std::string& name, std::optional<Nanos> now) {
                const auto info = os_call([&] { return without_gil([&] { return shm::describe(name, now); }); });
                return describe_dict(info);
            },
            py::arg("name"), py::arg("now_ns") = py::none(),
            "describe(name, now_ns=None)\n--\n\nReads segment ``name`` without creating or changing it: a dict of "
            "its sizes, limiters and holders (FileNotFoundError when absent, ValueError when foreign or damaged).")
        .def_static("check_name", &shm::Segment::check_name, py::arg("name"),
                    "check_name(name)\n--\n\nValueError unless `name` can name a segment.")
        .def_property_readonly("size", [](py::handle self) { return self_of<Store>(self).segment().size(); })
        .def_property_readonly("capacity",
                               [](py::handle self) { return self_of<Store>(self).segment().header().capacity; })
        .def_property_readonly("used_bytes",
                               [](py::handle self) { return self_of<Store>(self).segment().header().arena_used; })
        .def_property_readonly("clock", [](py::handle self) { return self_of<Store>(self).clock(); })
        .def_property_readonly("_lost_seq", [](py::handle self) { return self_of<Store>(self).lost_seq(); })
        .def(
            "_wait_lost",
            [](py::handle self, py::handle seen_arg, py::handle timeout_arg) {
                const auto store = shared_self_of<Store>(self); // (kept alive while waiting)
                const auto seen = py::cast<std::uint32_t>(seen_arg);
                const auto timeout = py::cast<Nanos>(timeout_arg);
                without_gil([&] {
                    store->wait_lost(seen, timeout);
                    return 0;
                });
                return store->lost_seq();
            },
            py::arg("seen"), py::arg("timeout_ns"),
            "_wait_lost(self, seen, timeout_ns)\n--\n\nWaits (GIL released) until leases are found lost after `seen` "
            "(a _lost_seq), at most timeout_ns; the _lost_seq then.");

    // Each engine class also builds on a store's slot: __init__(store, name, spec, queue_limit, newest_first).
    existing<TokenBucket>(m, "TokenBucket")
        .def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                         py::handle queue_limit, bool newest_first) {
            const auto rule = read_spec_as<TokenBucketRule>(spec, py::type::of<TokenBucket>());
            return store->token_bucket(name, rule, queue_of(queue_limit, newest_first));
        }));
    existing<FixedWindow>(m, "FixedWindow")
        .def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                         py::handle queue_limit, bool newest_first) {
            const auto rule = read_spec_as<FixedWindowRule>(spec, py::type::of<FixedWindow>());
            return store->fixed_window(name, rule, queue_of(queue_limit, newest_first));
        }));
    existing<SlidingWindowCounter>(m, "SlidingWindowCounter")
        .def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                         py::handle queue_limit, bool newest_first) {
            const auto rule = read_spec_as<SlidingWindowCounterRule>(spec, py::type::of<SlidingWindowCounter>());
            return store->sliding_window_counter(name, rule, queue_of(queue_limit, newest_first));
        }));
    existing<SlidingWindow>(m, "SlidingWindow")
        .def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                         py::handle queue_limit, bool newest_first) {
            const auto p = read_spec_as<SlidingWindowParams>(spec, py::type::of<SlidingWindow>());
            return store->sliding_window(name, p.permit_limit, p.window, p.segments,
                                         queue_of(queue_limit, newest_first));
        }));

    auto shared = py::class_<shm::SharedLimiter, Limiter, std::shared_ptr<shm::SharedLimiter>>(m, "SharedLimiter");
    shared.def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                           py::handle queue_limit, bool newest_first, Nanos lease_ttl) {
                   const auto rule = read_spec_as<ConcurrencyRule>(spec, py::type::of<Concurrency>());
                   return store->concurrency(name, rule.permit_limit(), lease_ttl, queue_of(queue_limit, newest_first));
               }),
               "__init__(self, store, name, spec, queue_limit, newest_first, lease_ttl_ns)\n--\n\n"
               "A named concurrency limiter of the store.");
    shared.def(py::init([](const std::shared_ptr<shm::KeyedLimiter>& keyed, py::handle resource) {
                   return keyed->limiter(key_of(resource));
               }),
               "__init__(self, keyed, resource)\n--\n\nThis process's limiter for one key of a per-key table (the "
               "one its requests queue in, made on first need).");
    shared.def_property_readonly(
        "_lost_leases", [](py::handle self) { return self_of<shm::SharedLimiter>(self).lost_leases(); },
        "Leases of this limiter found lost in this process so far.");
    shared.def(
        "_reconfigure_engine",
        [](py::handle self, py::handle spec, py::handle queue_limit, py::handle newest_first) {
            shm::SharedLimiter& limiter = self_of<shm::SharedLimiter>(self);
            const auto rule = read_spec_as<ConcurrencyRule>(spec, py::type::of<Concurrency>());
            limiter.reconfigure_limit(rule.permit_limit(),
                                      queue_of(queue_limit, bool_arg(newest_first, "newest_first")));
        },
        py::arg("spec"), py::arg("queue_limit"), py::arg("newest_first"),
        "_reconfigure_engine(self, spec, queue_limit, newest_first)\n--\n\nA named concurrency limiter's limit "
        "from the spec on, for every process; these queue options for this process.");
    install_shared_fast_acquire(shared);

    py::class_<shm::KeyTable, std::shared_ptr<shm::KeyTable>>(m, "ShmKeyTable")
        .def(py::init([](const std::shared_ptr<Store>& store, const std::string& name, py::handle spec,
                         py::handle queue_limit, bool newest_first, std::int64_t max_partitions, Nanos idle_timeout,
                         Nanos lease_ttl) {
                 shm::KeyTable::Template t;
                 t.params = template_params(read_spec(spec), lease_ttl);
                 t.queue = queue_of(queue_limit, newest_first);
                 t.lease_ttl = lease_ttl;
                 return shm::KeyTable::open(store, name, t, max_partitions, idle_timeout);
             }),
             "__init__(self, store, name, spec, queue_limit, newest_first, max_partitions, idle_timeout_ns, "
             "lease_ttl_ns)\n--\n\nOpens (or creates) a per-key table.")
        .def_property_readonly("size", [](py::handle self) { return self_of<shm::KeyTable>(self).size(); })
        .def_property_readonly("max_partitions",
                               [](py::handle self) { return self_of<shm::KeyTable>(self).max_partitions(); })
        .def_property_readonly("bytes", [](py::handle self) { return self_of<shm::KeyTable>(self).bytes(); })
        .def_property_readonly("bytes_per_key",
                               [](py::handle self) { return self_of<shm::KeyTable>(self).bytes_per_key(); })
        .def_property_readonly("_lost_leases",
                               [](py::handle self) { return self_of<shm::KeyTable>(self).lost_leases(); })
        .def(
            "evict_idle", [](py::handle self) { return self_of<shm::KeyTable>(self).evict_idle(); },
            "evict_idle(self, /)\n--\n\nDrops every key idle for longer than the idle timeout; how many.");

    auto keyed =
        py::class_<shm::KeyedLimiter, std::shared_ptr<shm::KeyedLimiter>>(m, "ShmKeyed")
            .def(py::init([](const std::shared_ptr<shm::KeyTable>& table) {
                     return std::make_shared<shm::KeyedLimiter>(table);
                 }),
                 py::arg("table"), "__init__(self, table)\n--\n\nThis process's side of a per-key table.")
            .def(
                "_statistics",
                [](py::handle self, py::handle resource) {
                    return statistics_tuple(self_of<shm::KeyedLimiter>(self).statistics(key_of(resource)));
                },
                "_statistics(self, resource, /)\n--\n\nThe key's statistics tuple.")
            .def(
                "_reset",
                [](py::handle self, py::handle resource) {
                    return self_of<shm::KeyedLimiter>(self).reset(key_of(resource));
                },
                "_reset(self, resource, /)\n--\n\nForgets the key's time-based state for every process; False when "
                "there was nothing to forget.")
            .def(
                "_totals", [](py::handle self) { return statistics_tuple(self_of<shm::KeyedLimiter>(self).totals()); },
                "_totals(self, /)\n--\n\nThe statistics over the keys this process keeps, with those it dropped.")
            .def(
                "_close", [](py::handle self) { self_of<shm::KeyedLimiter>(self).close(); },
                "_close(self, /)\n--\n\nFails every key's queued requests with reason 'closed'; later calls raise.")
            .def(
                "_reconfigure_engine",
                [](py::handle self, py::handle spec, py::handle queue_limit, py::handle newest_first) {
                    shm::KeyedLimiter& keyed = self_of<shm::KeyedLimiter>(self);
                    const shm::Params params = template_params(read_spec(spec), keyed.table().tmpl().lease_ttl);
                    keyed.reconfigure(params, queue_of(queue_limit, bool_arg(newest_first, "newest_first")));
                },
                py::arg("spec"), py::arg("queue_limit"), py::arg("newest_first"),
                "_reconfigure_engine(self, spec, queue_limit, newest_first)\n--\n\nEvery key's limit from the spec on, "
                "for every process; these queue options for this process's keys.")
            .def_property_readonly(
                "_amounts",
                [](py::handle self) {
                    shm::KeyTable& table = self_of<shm::KeyedLimiter>(self).table();
                    table.catch_up(); // (what another process set, if it did)
                    std::int64_t a[2] = {};
                    table.amounts(a);
                    return py::make_tuple(a[0], a[1]);
                },
                "(limit, rate or 0) of every key as they hold now: as any process last set them.")
            .def_property_readonly(
                "_queue", [](py::handle self) { return queue_tuple(self_of<shm::KeyedLimiter>(self).queue_options()); },
                "(queue_limit or None for no bound, newest_first) of this process's keys.")
            .def_property_readonly("closed", [](py::handle self) { return self_of<shm::KeyedLimiter>(self).closed(); })
            .def_property_readonly("_keys_kept",
                                   [](py::handle self) { return self_of<shm::KeyedLimiter>(self).kept(); })
            .def_property_readonly("_key_limiters",
                                   [](py::handle self) { return self_of<shm::KeyedLimiter>(self).limiters(); });
    install_keyed<FastCall::Acquire>(keyed, "acquire",
                                     "acquire($self, resource, /, permit_count=1)\n--\n\nTakes ``permit_count`` of "
                                     "``resource``'s permits now, or returns a failed lease (reason "
                                     "``\"limit_reached\"``, ``\"partition_limit\"`` when there is no room for a "
                                     "new key, or ``\"process_limit\"`` when a concurrency key has as many holding "
                                     "processes as it records); never waits. Raises ``TypeError`` for a key that is "
                                     "not a ``str``, ``bytes``, ``int`` or a tuple of them, ``ValueError`` for a bad "
                                     "``permit_count``, ``LimiterClosedError`` after ``close()``.");
    install_keyed<FastCall::TryNow>(keyed, "_try_now",
                                    "_try_now($self, resource, /, permit_count=1)\n--\n\nA wait's immediate grant, "
                                    "or None.");
}
#else
void bind_shm(py::module_&) {} // Linux only: permits.shm says so
#endif

} // namespace permits::bind
