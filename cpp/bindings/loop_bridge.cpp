// One event loop's side of the engine (LoopBridge, declared in async_wait.hpp): it drains the
// waits the engine completed into its notifier, resolves their awaitables and wakes their tasks
// in one loop callback per batch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "async_wait.hpp"

namespace py = pybind11;

namespace permits::bind {

void LoopBridge::hold(std::uint64_t id, PyObject* awaitable) {
    waiting_.emplace(id, Py_NewRef(awaitable));
}

void LoopBridge::forget(std::uint64_t id) {
    auto it = waiting_.find(id);
    if (it != waiting_.end()) {
        PyObject* obj = it->second;
        waiting_.erase(it);
        Py_DECREF(obj);
    }
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
        auto it = waiting_.find(w->id());
        if (it == waiting_.end()) {
            continue; // withdrawn: whoever withdrew it gave back what it was granted
        }
        PyObject* obj = it->second; // the bridge's reference, handed on to wakeups_ or dropped
        waiting_.erase(it);
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
            PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
            PyErr_Fetch(&type, &value, &tb);
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
            PyErr_Restore(type, value, tb);
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
    auto wakeups = std::move(wakeups_);
    wakeups_.clear();
    for (const auto& w : wakeups) {
        release(w); // those tasks are never woken: their loop is gone
    }
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& [id, obj] : waiting) {
        abandon_wait(obj);
        Py_DECREF(obj);
    }
}

int LoopBridge::traverse(visitproc visit, void* arg) const {
    for (const auto& [id, obj] : waiting_) {
        Py_VISIT(obj);
    }
    for (const auto& w : wakeups_) {
        Py_VISIT(w.awaitable);
        Py_VISIT(w.fn);
        Py_VISIT(w.context);
    }
    return 0;
}

} // namespace permits::bind
