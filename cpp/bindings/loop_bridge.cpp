// One event loop's side of the engine (loop_bridge.hpp): it drains the waits the engine completed
// into its notifier, resolves their awaitables and wakes their tasks in one loop callback per batch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine_lease_wait.hpp"
#include "loop_bridge.hpp"
#include "raised_error.hpp"
#include "self.hpp" // and the namespace alias py

namespace permits::bind {

namespace {

// permits._asyncio._bridge, registered by that module when it is imported (permits imports it).
PyObject* g_bridge_factory = nullptr;

// The bridge of the running loop. The last one found by this thread is remembered with a weak
// reference to its loop, so a wait that queues calls into Python (permits._asyncio) only when the
// loop changes. Per thread: a loop runs on one thread, and threads each running their own loop
// (without the GIL, at the same time) never see each other's. A bridge let go of by its loop
// leaves the cache of the thread letting it go (forget_cached), so a thread that ran one loop
// (asyncio.run) and ends keeps nothing.
struct BridgeCache {
    PyObject* loop_ref = nullptr; // weak reference
    LoopBridge* bridge = nullptr;
};
thread_local BridgeCache t_bridge_cache;

void forget_cached(const LoopBridge* bridge) {
    BridgeCache& cache = t_bridge_cache;
    if (cache.bridge == bridge) {
        Py_CLEAR(cache.loop_ref);
        cache.bridge = nullptr;
    }
}

// Whether the weak reference still points at `loop`. (PyWeakref_GetObject, a borrowed reference, is
// deprecated from 3.13; its successor returns a strong one.)
bool refers_to(PyObject* ref, PyObject* loop) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* target = nullptr;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return false;
    }
    const bool same = target == loop;
    Py_XDECREF(target);
    return same;
#else
    return PyWeakref_GetObject(ref) == loop;
#endif
}

} // namespace

LoopBridge* bridge_of(PyObject* loop) {
    BridgeCache& cache = t_bridge_cache;
    if (cache.loop_ref != nullptr && refers_to(cache.loop_ref, loop)) {
        return cache.bridge;
    }
    if (g_bridge_factory == nullptr) {
        throw py::import_error("permits._asyncio is not imported: import permits first");
    }
    py::object bridge = py::reinterpret_steal<py::object>(PyObject_CallOneArg(g_bridge_factory, loop));
    if (!bridge) {
        throw py::error_already_set();
    }
    auto* b = bridge.cast<LoopBridge*>(); // kept alive by the loop (permits._asyncio) while it lives
    PyObject* ref = PyWeakref_NewRef(loop, nullptr);
    if (ref == nullptr) {
        throw py::error_already_set();
    }
    Py_XSETREF(cache.loop_ref, ref);
    cache.bridge = b;
    return b;
}

void LoopBridge::hold(std::uint64_t id, PyObject* awaitable) {
    waiting_.put(id, Py_NewRef(awaitable));
}

void LoopBridge::forget(std::uint64_t id) {
    Py_XDECREF(waiting_.take(id));
}

void LoopBridge::drain() {
    // The bridge's own buffer, unless a drain is already under way (a loop calling back in).
    std::vector<std::shared_ptr<Waiter>> own;
    auto& batch = draining_ ? own : batch_;
    struct Done {
        LoopBridge& b;
        std::vector<std::shared_ptr<Waiter>>& batch;
        bool outer;
        ~Done() {
            batch.clear();
            if (outer) {
                b.draining_ = false;
            }
        }
    } done{*this, batch, !std::exchange(draining_, true)};
    notifier_->drain_into(batch);
    const bool scheduled = !wakeups_.empty(); // a resume() is already due
    PyObject* loop = nullptr;
    for (const auto& w : batch) {
        PyObject* obj = waiting_.take(w->id()); // the bridge's reference, handed on to wakeups_ or dropped
        if (obj == nullptr) {
            continue; // withdrawn: whoever withdrew it gave back what it was granted
        }
        loop = wait_loop(obj);
        for (const auto& cb : resolve_wait(obj)) {
            wakeups_.push_back({Py_NewRef(obj), cb.fn, cb.context}); // the callback's references move
        }
        Py_DECREF(obj);
    }
    if (!scheduled && !wakeups_.empty()) {
        // One loop callback wakes the whole batch's tasks, in the order the engine completed them.
        py::object resume = py::cast(this).attr(resume_name());
        if (!schedule_on(loop, resume.ptr(), Py_None, nullptr)) {
            throw py::error_already_set();
        }
    }
}

void LoopBridge::resume(py::handle /*unused*/) {
    std::vector<Wakeup> run;
    run.swap(wakeups_);
    for (std::size_t k = 0; k < run.size(); ++k) {
        const Wakeup& w = run[k];
        PyObject* r = nullptr;
        if (w.context == nullptr || PyContext_Enter(w.context) == 0) {
            r = PyObject_CallOneArg(w.fn, w.awaitable);
            if (w.context != nullptr && PyContext_Exit(w.context) != 0) {
                Py_CLEAR(r);
            }
        }
        if (r == nullptr && PyErr_ExceptionMatches(PyExc_Exception) == 0) {
            // KeyboardInterrupt or SystemExit out of a task: it stops the loop. The other tasks
            // still wake, one loop callback each, whenever the loop runs again.
            RaisedError kept = RaisedError::take();
            for (std::size_t j = k + 1; j < run.size(); ++j) {
                const Wakeup& rest = run[j];
                PyObject* loop = wait_loop(rest.awaitable);
                if (!schedule_on(loop != nullptr ? loop : Py_None, rest.fn, rest.awaitable, rest.context)) {
                    PyErr_WriteUnraisable(rest.fn);
                }
            }
            for (std::size_t j = k; j < run.size(); ++j) {
                release(run[j]);
            }
            kept.restore();
            throw py::error_already_set();
        }
        if (r == nullptr) {
            PyErr_WriteUnraisable(w.fn); // a task's wake-up does not raise Exception: report it
        }
        Py_XDECREF(r);
        release(w);
    }
}

void LoopBridge::release(const Wakeup& w) {
    Py_DECREF(w.awaitable);
    Py_DECREF(w.fn);
    Py_XDECREF(w.context);
}

LoopBridge::~LoopBridge() {
    abandon();
}

void LoopBridge::abandon() {
    forget_cached(this);
    auto wakeups = std::move(wakeups_);
    wakeups_.clear();
    for (const auto& w : wakeups) {
        release(w); // those tasks are never woken: their loop is gone
    }
    for (PyObject* obj : waiting_.take_all()) {
        abandon_wait(obj);
        Py_DECREF(obj);
    }
}

int LoopBridge::traverse(visitproc visit, void* arg) const {
    int visited = 0;
    waiting_.each([&](PyObject* obj) {
        if (visited == 0 && obj != nullptr) {
            visited = visit(obj, arg);
        }
    });
    if (visited != 0) {
        return visited;
    }
    for (const auto& w : wakeups_) {
        Py_VISIT(w.awaitable);
        Py_VISIT(w.fn);
        Py_VISIT(w.context);
    }
    return 0;
}

void bind_loop_bridge(py::module_& m) {
    // GC-aware: a bridge holds its queued waits, which hold their loop, which holds the bridge
    // (permits._asyncio): collecting that cycle abandons the waits, giving their permits back.
    auto setup = [](PyHeapTypeObject* heap_type) {
        auto* type = &heap_type->ht_type;
        type->tp_flags |= Py_TPFLAGS_HAVE_GC;
        type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
            Py_VISIT(Py_TYPE(self));
            if (!py::detail::is_holder_constructed(self)) {
                return 0;
            }
            return py::cast<const LoopBridge&>(py::handle(self)).traverse(visit, arg);
        };
        type->tp_clear = [](PyObject* self) -> int {
            if (py::detail::is_holder_constructed(self)) {
                py::cast<LoopBridge&>(py::handle(self)).abandon();
            }
            return 0;
        };
    };
    py::class_<LoopBridge, std::shared_ptr<LoopBridge>>(m, "LoopBridge", py::custom_type_setup(setup))
        .def(py::init<bool>(), py::arg("socket") = false,
             "__init__(self, socket=False)\n--\n\nA new bridge, with its own wake-up pipe the loop watches, or "
             "with socket=True a socket pair, for a loop that receives from it (take_reader()). On Windows always a "
             "socket pair.")
        .def_property_readonly(
            "fd", [](py::handle self) { return self_of<LoopBridge>(self).notifier()->fd(); },
            "The wake-up pipe or socket the loop watches (-1 once taken).")
        .def(
            "take_reader", [](py::handle self) { return self_of<LoopBridge>(self).notifier()->take_reader(); },
            "take_reader(self, /)\n--\n\nHands the wake-up socket over, for a loop that receives from it itself "
            "(the caller reads and closes it from now on; drain() no longer reads it). -1 if already taken, or "
            "if it is a pipe.")
        .def_property_readonly("wakeups",
                               [](py::handle self) { return self_of<LoopBridge>(self).notifier()->wakeups(); })
        .def_property_readonly(
            "pending", [](py::handle self) { return self_of<LoopBridge>(self).pending(); },
            "Waits queued from this loop, not yet resolved.")
        .def(
            "drain", [](py::handle self) { self_of<LoopBridge>(self).drain(); },
            "drain(self, /)\n--\n\nResolves the waits the engine completed; their tasks wake in resume().")
        .def(
            "resume", [](py::handle self, py::handle unused) { self_of<LoopBridge>(self).resume(unused); },
            py::arg("unused") = py::none(),
            "resume(self, unused=None)\n--\n\nWakes the tasks of the waits drain() resolved (a loop callback "
            "drain() schedules).")
        .def(
            "abandon", [](py::handle self) { self_of<LoopBridge>(self).abandon(); },
            "abandon(self, /)\n--\n\nThe loop is closed or gone: its queued waits leave their queues and their "
            "permits go back.");
    m.def(
        "_set_bridge_factory", [](py::object factory) { Py_XSETREF(g_bridge_factory, factory.release().ptr()); },
        "_set_bridge_factory(factory, /)\n--\n\nRegisters permits._asyncio._bridge(loop) -> LoopBridge (called "
        "once, by that module).");
}

} // namespace permits::bind
