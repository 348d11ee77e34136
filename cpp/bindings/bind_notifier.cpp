#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "lease_type.hpp"
#include "permits/limiter.hpp"
#include "wait_handle.hpp"

namespace py = pybind11;

namespace permits::bind {

py::object WaitHandle::lease() {
    if (!lease_) {
        if (waiter_->state() != Waiter::Completed) {
            throw py::value_error("the request has not completed");
        }
        lease_ = py::reinterpret_steal<py::object>(py_lease::from_outcome(waiter_->outcome(), owner_));
        if (!lease_) {
            throw py::error_already_set();
        }
    }
    return lease_;
}

void bind_notifier(py::module_& m) {
    py::class_<Notifier, std::shared_ptr<Notifier>>(m, "Notifier")
        .def(py::init<>())
        .def_property_readonly("fd", &Notifier::fd)
        .def_property_readonly("wakeups", &Notifier::wakeups)
        .def(
            "drain",
            [](Notifier& n) {
                std::vector<std::uint64_t> ids;
                for (const auto& w : n.drain()) {
                    ids.push_back(w->id());
                }
                return ids;
            },
            "Ids of the waiters completed since the last drain.");

    py::class_<WaitHandle>(m, "WaitHandle")
        .def_property_readonly("id", [](const WaitHandle& h) { return h.waiter()->id(); })
        .def("done", [](const WaitHandle& h) { return !h.waiter()->pending(); })
        .def(
            "cancel", [](WaitHandle& h) { return h.owner()->cancel(*h.waiter()); },
            "Leaves the queue; False if the request had already completed.")
        .def("lease", &WaitHandle::lease, "The completed request's lease (the same object each time).");
}

} // namespace permits::bind
