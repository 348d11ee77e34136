#include "meter_type.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "free_threading.hpp"
#include "lease_object.hpp"
#include "permits/clock.hpp"
#include "raised_error.hpp"

namespace permits::py_meter {
namespace {

namespace py = pybind11;
using py_lease::detail::LeaseObject;
using py_lease::detail::LeaseType;

// Distinct results (a refusal's reason, "acquired") one meter counts in C; a meter asked for more
// says so (count() returns False) and its exporter counts the rest itself.
constexpr std::size_t kResults = 32;

struct Result {
    std::atomic<PyObject*> name{nullptr}; // a str, owned; set once, under State::adding
    std::atomic<std::uint64_t> count{0};
};

// Relaxed atomics throughout: totals read for reporting, as prometheus-client's own values.
struct State {
    std::shared_ptr<Clock> clock;
    std::vector<std::int64_t> bounds_ns;                   // ascending; +Inf after them
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets; // bounds_ns.size() + 1, not cumulative
    std::atomic<std::int64_t> sum_ns{0};
    std::atomic<std::uint64_t> acquired{0};
    std::atomic<std::int64_t> active{0};
    Result results[kResults];
    std::mutex adding;
    // Durations (ns) held for `record` until flush(), at most pending_limit of them: an exporter
    // whose histogram takes one value per call (OpenTelemetry's) is fed when it collects, not on
    // the lease's release. A lease that finds them full records its own at once.
    std::size_t pending_limit = 0;
    std::mutex pending_lock;
    std::vector<std::int64_t> pending;
};

struct MeterObject {
    PyObject_HEAD State* state;
    // Called with each used lease's duration in seconds, or nullptr: an exporter that takes no
    // counts kept for it (OpenTelemetry's API has no asynchronous histogram).
    PyObject* record;
};

PyTypeObject MeterType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyObject* limit_reached = nullptr; // interned: a refusal without a reason counts as this

State& state_of(PyObject* self) {
    return *reinterpret_cast<MeterObject*>(self)->state;
}

void observe_ns(State& s, std::int64_t ns) noexcept {
    ns = std::max<std::int64_t>(ns, 0);
    const auto at = std::lower_bound(s.bounds_ns.begin(), s.bounds_ns.end(), ns); // le: ns <= bound
    s.buckets[static_cast<std::size_t>(at - s.bounds_ns.begin())].fetch_add(1, std::memory_order_relaxed);
    s.sum_ns.fetch_add(ns, std::memory_order_relaxed);
}

// The slot counting `name`, made when new; nullptr when every slot is taken, or with an error set
// (a comparison that raised: only a str subclass's could).
Result* result_of(State& s, PyObject* name, bool& failed) {
    failed = false;
    for (Result& r : s.results) { // the common case: the very str counted before (interned reasons)
        PyObject* known = r.name.load(std::memory_order_acquire);
        if (known == name) {
            return &r;
        }
        if (known == nullptr) {
            break;
        }
    }
    std::lock_guard<std::mutex> lock(s.adding);
    for (Result& r : s.results) {
        PyObject* known = r.name.load(std::memory_order_acquire);
        if (known == nullptr) {
            Py_INCREF(name);
            r.name.store(name, std::memory_order_release);
            return &r;
        }
        const int same = PyUnicode_Compare(known, name) == 0;
        if (PyErr_Occurred() != nullptr) {
            failed = true;
            return nullptr;
        }
        if (same != 0) {
            return &r;
        }
    }
    return nullptr;
}

// Counts one `name` result: True, False when every slot is taken, nullptr with an error set.
PyObject* count_result(State& s, PyObject* name) {
    bool failed = false;
    Result* r = result_of(s, name, failed);
    if (failed) {
        return nullptr;
    }
    if (r == nullptr) {
        Py_RETURN_FALSE;
    }
    r->count.fetch_add(1, std::memory_order_relaxed);
    Py_RETURN_TRUE;
}

PyObject* meter_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    static const char* names[] = {"clock", "bounds", "record", "pending_limit", nullptr};
    PyObject* clock_obj = nullptr;
    PyObject* bounds_obj = nullptr;
    PyObject* record = Py_None;
    PyObject* limit_obj = nullptr;
    if (PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OO:Meter", const_cast<char**>(names), &clock_obj, &bounds_obj,
                                    &record, &limit_obj) == 0) {
        return nullptr;
    }
    if (record != Py_None && PyCallable_Check(record) == 0) {
        PyErr_Format(PyExc_TypeError, "record must be callable or None, got %s", Py_TYPE(record)->tp_name);
        return nullptr;
    }
    long long pending_limit = 0;
    if (limit_obj != nullptr) {
        if (!PyLong_Check(limit_obj) || PyBool_Check(limit_obj)) {
            PyErr_Format(PyExc_TypeError, "pending_limit must be an int, got %s", Py_TYPE(limit_obj)->tp_name);
            return nullptr;
        }
        pending_limit = PyLong_AsLongLong(limit_obj);
        if (pending_limit == -1 && PyErr_Occurred() != nullptr) {
            PyErr_Clear();
            pending_limit = -1; // (too large: refused below)
        }
        if (pending_limit < 0 || pending_limit > (1LL << 24)) {
            PyErr_SetString(PyExc_ValueError, "pending_limit must be between 0 and 16777216");
            return nullptr;
        }
        if (pending_limit > 0 && record == Py_None) {
            PyErr_SetString(PyExc_ValueError, "pending_limit needs record: the durations it holds are for record");
            return nullptr;
        }
    }
    std::shared_ptr<Clock> clock;
    try {
        clock = py::cast<std::shared_ptr<Clock>>(py::handle(clock_obj));
    } catch (const py::cast_error&) {
        PyErr_Format(PyExc_TypeError, "clock must be a permits clock, got %s", Py_TYPE(clock_obj)->tp_name);
        return nullptr;
    }
    PyObject* seq = PySequence_Fast(bounds_obj, "bounds must be a sequence of numbers");
    if (seq == nullptr) {
        return nullptr;
    }
    std::vector<std::int64_t> bounds;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; ++i) {
        const double b = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (b == -1.0 && PyErr_Occurred() != nullptr) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "bounds must be a sequence of numbers");
            return nullptr;
        }
        if (std::isinf(b) && b > 0 && i == n - 1) {
            break; // a trailing +Inf: the last bucket, always there
        }
        if (!std::isfinite(b) || b < 0 || b > 9.2e9 || (!bounds.empty() && std::llround(b * 1e9) <= bounds.back())) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "bounds must be ascending, finite seconds >= 0 (a trailing inf allowed)");
            return nullptr;
        }
        bounds.push_back(std::llround(b * 1e9));
    }
    Py_DECREF(seq);
    PyObject* self = type->tp_alloc(type, 0);
    if (self == nullptr) {
        return nullptr;
    }
    auto* s = new State();
    s->clock = std::move(clock);
    s->buckets = std::make_unique<std::atomic<std::uint64_t>[]>(bounds.size() + 1);
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
        s->buckets[i].store(0, std::memory_order_relaxed);
    }
    s->bounds_ns = std::move(bounds);
    s->pending_limit = static_cast<std::size_t>(pending_limit);
    reinterpret_cast<MeterObject*>(self)->state = s;
    if (record != Py_None) {
        Py_INCREF(record);
        reinterpret_cast<MeterObject*>(self)->record = record;
    }
    return self;
}

int meter_traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(reinterpret_cast<MeterObject*>(self)->record);
    return 0;
}

int meter_clear(PyObject* self) {
    Py_CLEAR(reinterpret_cast<MeterObject*>(self)->record);
    return 0;
}

void meter_dealloc(PyObject* self) {
    PyObject_GC_UnTrack(self);
    meter_clear(self);
    State* s = reinterpret_cast<MeterObject*>(self)->state;
    if (s != nullptr) {
        for (Result& r : s->results) {
            Py_XDECREF(r.name.load(std::memory_order_relaxed));
        }
        delete s;
    }
    Py_TYPE(self)->tp_free(self);
}

// stamp(lease): counts the lease's outcome; a granted lease is stamped, to end itself here when
// released. False when it cannot be done here (not a plain Lease, stamped or released already, a
// result too many): the caller observes the lease itself.
PyObject* meter_stamp(PyObject* self, PyObject* arg) {
    if (Py_TYPE(arg) != &LeaseType) {
        Py_RETURN_FALSE;
    }
    auto* lease = reinterpret_cast<LeaseObject*>(arg);
    State& s = state_of(self);
    if (!lease->acquired) {
        PyObject* reason = lease->reason; // (none or empty: counted as the exporters always did)
        if (reason == nullptr || PyUnicode_GET_LENGTH(reason) == 0) {
            reason = limit_reached;
        }
        return count_result(s, reason);
    }
    if (bind::load_shared(lease->released)) {
        Py_RETURN_FALSE;
    }
    PyObject* none = nullptr;
    if (!std::atomic_ref<PyObject*>(lease->meter).compare_exchange_strong(none, self, std::memory_order_acq_rel)) {
        Py_RETURN_FALSE; // another meter's (a limiter instrumented twice over by hand)
    }
    Py_INCREF(self);
    lease->meter_start = s.clock->now();
    s.acquired.fetch_add(1, std::memory_order_relaxed);
    s.active.fetch_add(1, std::memory_order_relaxed);
    Py_RETURN_TRUE;
}

// count(result): one outcome told by an exporter observing a lease itself. False: too many results.
PyObject* meter_count(PyObject* self, PyObject* arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "result must be a str, got %s", Py_TYPE(arg)->tp_name);
        return nullptr;
    }
    State& s = state_of(self);
    if (PyUnicode_CompareWithASCIIString(arg, "acquired") == 0) {
        s.acquired.fetch_add(1, std::memory_order_relaxed);
        Py_RETURN_TRUE;
    }
    return count_result(s, arg);
}

PyObject* meter_add_active(PyObject* self, PyObject* arg) {
    const long long delta = PyLong_AsLongLong(arg);
    if (delta == -1 && PyErr_Occurred() != nullptr) {
        return nullptr;
    }
    state_of(self).active.fetch_add(delta, std::memory_order_relaxed);
    Py_RETURN_NONE;
}

PyObject* meter_observe(PyObject* self, PyObject* arg) {
    const double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred() != nullptr) {
        return nullptr;
    }
    const double ns = std::isfinite(seconds) ? std::clamp(seconds * 1e9, 0.0, 9.2e18) : 0.0;
    observe_ns(state_of(self), std::llround(ns));
    Py_RETURN_NONE;
}

// results(): {result: count} of every result counted so far ("acquired" once one was).
PyObject* meter_results(PyObject* self, PyObject*) {
    State& s = state_of(self);
    PyObject* out = PyDict_New();
    if (out == nullptr) {
        return nullptr;
    }
    auto put = [out](const char* name, PyObject* key, std::uint64_t n) {
        PyObject* value = PyLong_FromUnsignedLongLong(n);
        if (value == nullptr) {
            return false;
        }
        const int rc = key != nullptr ? PyDict_SetItem(out, key, value) : PyDict_SetItemString(out, name, value);
        Py_DECREF(value);
        return rc == 0;
    };
    const std::uint64_t acquired = s.acquired.load(std::memory_order_relaxed);
    if (acquired != 0 && !put("acquired", nullptr, acquired)) {
        Py_DECREF(out);
        return nullptr;
    }
    for (Result& r : s.results) {
        PyObject* name = r.name.load(std::memory_order_acquire);
        if (name == nullptr) {
            break;
        }
        if (!put(nullptr, name, r.count.load(std::memory_order_relaxed))) {
            Py_DECREF(out);
            return nullptr;
        }
    }
    return out;
}

// durations(): ([count per bucket, +Inf last; not cumulative], sum in seconds).
PyObject* meter_durations(PyObject* self, PyObject*) {
    State& s = state_of(self);
    const std::size_t n = s.bounds_ns.size() + 1;
    PyObject* counts = PyList_New(static_cast<Py_ssize_t>(n));
    if (counts == nullptr) {
        return nullptr;
    }
    for (std::size_t i = 0; i < n; ++i) {
        PyObject* c = PyLong_FromUnsignedLongLong(s.buckets[i].load(std::memory_order_relaxed));
        if (c == nullptr) {
            Py_DECREF(counts);
            return nullptr;
        }
        PyList_SET_ITEM(counts, static_cast<Py_ssize_t>(i), c);
    }
    const double sum = static_cast<double>(s.sum_ns.load(std::memory_order_relaxed)) / 1e9;
    return Py_BuildValue("(Nd)", counts, sum);
}

// Calls `record` with one duration in ns; its failure is reported, never raised (nor lost from an
// error already set, as in a lease's deallocation).
void record_ns(PyObject* record, std::int64_t ns) noexcept {
    bind::RaisedError kept = bind::RaisedError::take();
    Py_INCREF(record);
    PyObject* seconds = PyFloat_FromDouble(static_cast<double>(std::max<std::int64_t>(ns, 0)) / 1e9);
    PyObject* r = seconds != nullptr ? PyObject_CallOneArg(record, seconds) : nullptr;
    Py_XDECREF(seconds);
    if (r == nullptr) {
#if PY_VERSION_HEX >= 0x030D0000
        const bool finalizing = Py_IsFinalizing() != 0;
#else
        const bool finalizing = _Py_IsFinalizing() != 0;
#endif
        if (finalizing) {
            PyErr_Clear(); // a lease collected at exit, its exporter gone before it: nothing to tell
        } else {
            PyErr_WriteUnraisable(record);
        }
    }
    Py_XDECREF(r);
    Py_DECREF(record);
    kept.restore();
}

// True when the duration is held for flush(); false: the caller records it itself.
bool hold(State& s, std::int64_t ns) noexcept {
    if (s.pending_limit == 0) {
        return false;
    }
    const std::lock_guard<std::mutex> lock(s.pending_lock);
    if (s.pending.size() >= s.pending_limit) {
        return false;
    }
    try {
        s.pending.push_back(ns);
    } catch (const std::bad_alloc&) {
        return false;
    }
    return true;
}

// flush(): calls record with every duration held, in the order held; returns how many. Taken out
// under the lock and recorded outside it: a release on another thread is never kept waiting on
// Python, and a record that releases a lease of this meter cannot deadlock.
PyObject* meter_flush(PyObject* self, PyObject*) {
    State& s = state_of(self);
    PyObject* record = reinterpret_cast<MeterObject*>(self)->record;
    std::vector<std::int64_t> taken;
    {
        const std::lock_guard<std::mutex> lock(s.pending_lock);
        taken.swap(s.pending);
    }
    if (record != nullptr) {
        Py_INCREF(record); // (a record that clears this meter keeps its callable to the end)
        for (const std::int64_t ns : taken) {
            record_ns(record, ns);
        }
        Py_DECREF(record);
    }
    return PyLong_FromSize_t(taken.size());
}

PyObject* meter_pending(PyObject* self, void*) {
    State& s = state_of(self);
    const std::lock_guard<std::mutex> lock(s.pending_lock);
    return PyLong_FromSize_t(s.pending.size());
}

PyObject* meter_active(PyObject* self, void*) {
    return PyLong_FromLongLong(state_of(self).active.load(std::memory_order_relaxed));
}

PyMethodDef meter_methods[] = {
    {"stamp", meter_stamp, METH_O,
     "stamp($self, lease, /)\n--\n\nCounts a lease's outcome; a granted one is stamped and ends itself here "
     "when released. False: not done (the caller observes the lease itself)."},
    {"count", meter_count, METH_O,
     "count($self, result, /)\n--\n\nCounts one outcome. False: too many distinct results."},
    {"add_active", meter_add_active, METH_O, "add_active($self, delta, /)\n--\n\nAdds to the active leases."},
    {"observe", meter_observe, METH_O, "observe($self, seconds, /)\n--\n\nObserves one lease's duration."},
    {"results", meter_results, METH_NOARGS, "results($self, /)\n--\n\nEach result's count so far."},
    {"flush", meter_flush, METH_NOARGS,
     "flush($self, /)\n--\n\nCalls record with each duration held for it; returns how many."},
    {"durations", meter_durations, METH_NOARGS,
     "durations($self, /)\n--\n\n(Each bucket's count, +Inf last, not cumulative; their sum in seconds)."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef meter_getset[] = {{"active", meter_active, nullptr, "Leases granted and not yet ended.", nullptr},
                              {"pending", meter_pending, nullptr, "Durations held for record until flush().", nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

} // namespace

void end(PyObject* meter, std::int64_t start_ns, bool used) noexcept {
    State& s = state_of(meter);
    s.active.fetch_sub(1, std::memory_order_relaxed);
    if (!used) {
        return;
    }
    const std::int64_t ns = s.clock->now() - start_ns;
    observe_ns(s, ns);
    PyObject* record = reinterpret_cast<MeterObject*>(meter)->record;
    if (record == nullptr || hold(s, ns)) {
        return;
    }
    record_ns(record, ns);
}

bool register_type(PyObject* m) {
    limit_reached = PyUnicode_InternFromString("limit_reached");
    if (limit_reached == nullptr) {
        return false;
    }
    MeterType.tp_name = "permits._core.Meter";
    MeterType.tp_basicsize = sizeof(MeterObject);
    MeterType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    MeterType.tp_doc =
        "Meter(clock, bounds, *, record=None, pending_limit=0)\n--\n\nAn instrumented limiter's lease counts, active "
        "leases and lease durations (buckets with these upper bounds, in seconds), kept as atomics; "
        "record(seconds), when given, is called with each used lease's duration as it ends, or "
        "when flush() is called for up to pending_limit durations held until then.";
    MeterType.tp_new = meter_new;
    MeterType.tp_dealloc = meter_dealloc;
    MeterType.tp_traverse = meter_traverse;
    MeterType.tp_clear = meter_clear;
    MeterType.tp_methods = meter_methods;
    MeterType.tp_getset = meter_getset;
    if (PyType_Ready(&MeterType) < 0) {
        return false;
    }
    Py_INCREF(&MeterType);
    if (PyModule_AddObject(m, "Meter", reinterpret_cast<PyObject*>(&MeterType)) < 0) {
        Py_DECREF(&MeterType);
        return false;
    }
    return true;
}

} // namespace permits::py_meter
