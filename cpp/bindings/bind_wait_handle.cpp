// A queued request as Python sees it (WaitHandle: the blocking waits of partitioned limiters and
// the waits of permits._foreign), and the Notifier pipe a foreign wait watches for its completion.
#include <pybind11/pybind11.h>

#include "gil.hpp"
#include "key_encoding.hpp"
#include "lease_type.hpp"
#include "permits/cancel_scope.hpp"
#include "permits/limiter.hpp"
#include "self.hpp"
#include "wait_handle.hpp"

namespace permits::bind {

py::object WaitHandle::lease() {
    if (!lease_) {
        if (waiter_->state() != Waiter::Completed) {
            throw py::value_error("the request has not completed");
        }
        PyObject* lease = per_key_ && waiter_->outcome().acquired
                              ? py_lease::from_per_key_outcome(waiter_->outcome(), *per_key_, key_.ptr())
                              : py_lease::from_outcome(waiter_->outcome(), owner_.get(), source_.ptr());
        lease_ = py::reinterpret_steal<py::object>(lease);
        if (!lease_) {
            throw py::error_already_set();
        }
    }
    return lease_;
}

bool WaitHandle::cancel() {
    const bool cancelled = owner_->cancel(*waiter_);
    if (cancelled && per_key_) {
        per_key_->recheck(key_of(key_)); // its queue may be empty now: when is the key idle?
    }
    return cancelled;
}

py::object WaitHandle::block() {
    constexpr Nanos kSlice = 50'000'000;             // wakes every 50 ms to let signals in
    const CancelScope::Watch watch(owner_, waiter_); // a scope this thread entered may end it
    for (;;) {
        const bool done = without_gil([&] { return waiter_->wait_for(kSlice); });
        if (done) {
            return lease();
        }
        if (waiter_->state() == Waiter::Cancelled) { // by a scope: its owner closed
            if (per_key_) {
                per_key_->recheck(key_of(key_)); // its queue may be empty now: when is the key idle?
            }
            PyObject* closed =
                py_lease::from_outcome(Outcome::failed(waiter_->permits(), Reason::Closed), nullptr, source_.ptr());
            if (closed == nullptr) {
                throw py::error_already_set();
            }
            return py::reinterpret_steal<py::object>(closed);
        }
        if (PyErr_CheckSignals() != 0) {
            if (!cancel() && waiter_->state() == Waiter::Completed) {
                // Granted in the meantime: give the permits back, the caller never sees them.
                const Outcome& o = waiter_->outcome();
                if (o.acquired) {
                    owner_->give_back(o.permits, o.tag);
                }
            }
            throw py::error_already_set();
        }
    }
}

void bind_wait_handle(py::module_& m) {
    // An asyncio loop's notifier lives in its LoopBridge (loop_bridge.hpp); a wait queued under another
    // async library (permits._foreign) has a notifier of its own, whose fd that library watches.
    py::class_<Notifier, std::shared_ptr<Notifier>>(m, "Notifier")
        .def(py::init<>(), "__init__(self, /)\n--\n\nA pipe (a socket on Windows) the engine writes a byte to when it "
                           "completes a request.")
        .def_property_readonly("fd", [](py::handle self) { return self_of<Notifier>(self).fd(); })
        .def(
            "drain", [](py::handle self) { self_of<Notifier>(self).drain(); },
            "drain(self, /)\n--\n\nEmpties the pipe and forgets the completed requests.");

    // A chain's blocking wait enters one around its members' waits; its close() cancels it.
    py::class_<CancelScope, std::shared_ptr<CancelScope>>(m, "CancelScope")
        .def(py::init<>(), "__init__(self, /)\n--\n\nA scope whose cancel() ends the blocking waits made in it.")
        .def(
            "cancel", [](py::handle self) { self_of<CancelScope>(self).cancel(); },
            "cancel(self, /)\n--\n\nEnds the waits made in the scope, now and from now on; idempotent.")
        .def_property_readonly("cancelled", [](py::handle self) { return self_of<CancelScope>(self).cancelled(); })
        .def(
            "__enter__",
            [](py::handle self) {
                self_of<CancelScope>(self).enter();
                return self;
            },
            "__enter__(self, /)\n--\n\nThis thread's blocking waits are the scope's until __exit__.")
        .def(
            "__exit__",
            [](py::handle self, const py::args&) {
                self_of<CancelScope>(self).leave();
                return false;
            },
            "__exit__(self, *exc_info)\n--\n\nLeaves the scope.");
    m.def(
        "_cancelled_here", [] { return CancelScope::cancelled_here(); },
        "_cancelled_here()\n--\n\nTrue when a scope entered on this thread is cancelled.");

    py::class_<WaitHandle>(m, "WaitHandle")
        .def(
            "done", [](py::handle self) { return !self_of<WaitHandle>(self).waiter()->pending(); },
            "done(self, /)\n--\n\nTrue once the request completed or was cancelled.")
        .def(
            "cancel", [](py::handle self) { return self_of<WaitHandle>(self).cancel(); },
            "cancel(self, /)\n--\n\nLeaves the queue; False if the request had already completed.")
        .def(
            "lease", [](py::handle self) { return self_of<WaitHandle>(self).lease(); },
            "lease(self, /)\n--\n\nThe completed request's lease (the same object each time).")
        .def(
            "block", [](py::handle self) { return self_of<WaitHandle>(self).block(); },
            "block(self, /)\n--\n\nWaits (GIL released) for the request's lease.");
}

} // namespace permits::bind
