// A queued request as Python sees it: cancel it, or take its lease once completed.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "permits/limiter.hpp"
#include "permits/per_key.hpp"

namespace permits::bind {

class WaitHandle {
public:
    /// `source`: the Python limiter, whose name a failed lease carries.
    WaitHandle(std::shared_ptr<Limiter> owner, std::shared_ptr<Waiter> waiter, pybind11::object source)
        : owner_(std::move(owner)), waiter_(std::move(waiter)), source_(std::move(source)) {}
    /// A request queued in a per-key table's key: its lease goes back through the table, and a
    /// cancellation tells it, so the key is evicted on time once idle.
    WaitHandle(std::shared_ptr<Limiter> owner, std::shared_ptr<Waiter> waiter, pybind11::object source,
               std::shared_ptr<PerKeyLimiter> per_key, pybind11::object key)
        : owner_(std::move(owner)), waiter_(std::move(waiter)), source_(std::move(source)),
          per_key_(std::move(per_key)), key_(std::move(key)) {}
    const std::shared_ptr<Waiter>& waiter() const { return waiter_; }
    /// Leaves the queue; false if the request had already completed.
    bool cancel();
    /// Built once, so a lease reaches its caller exactly once whichever path asks first.
    pybind11::object lease();
    /// Blocks until the request completes, with the GIL released; a signal (Ctrl-C) takes the
    /// request out of the queue and raises.
    pybind11::object block();

private:
    std::shared_ptr<Limiter> owner_;
    std::shared_ptr<Waiter> waiter_;
    pybind11::object source_;
    std::shared_ptr<PerKeyLimiter> per_key_;
    pybind11::object key_;
    pybind11::object lease_;
};

} // namespace permits::bind
