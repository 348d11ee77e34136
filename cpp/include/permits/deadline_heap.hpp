// The deadlines of a limiter's timed waiters, earliest first: the next deadline and the expiries
// cost O(log n) however many requests are queued (a scan of the queue per enqueue and cancel made
// one timed waiter beside a flood of untimed ones quadratic).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "permits/time.hpp"
#include "permits/waiter.hpp"

namespace permits::detail {

/// A min-heap of (deadline, arrival) with lazy deletion: a waiter that left the queue (granted,
/// cancelled) keeps its entry until the entry reaches the top or stale entries outnumber live ones.
/// Used under its limiter's lock.
class DeadlineHeap {
public:
    void push(std::shared_ptr<Waiter> w);
    /// The earliest deadline of a pending waiter; kNever when none. Drops stale entries on top.
    Nanos next();
    /// Takes out the pending waiter with the earliest deadline if that deadline is `now` or earlier
    /// (the earlier arrival first on a tie); nullptr when none is due.
    std::shared_ptr<Waiter> pop_due(Nanos now);
    /// `live` waiters are pending: rebuilds without the stale entries once they dominate, so
    /// memory stays proportional to the queue through any storm of cancellations.
    void compact(std::size_t live);
    /// Forgets every entry and lets their memory go.
    void clear() noexcept { heap_ = {}; }
    std::size_t size() const noexcept { return heap_.size(); }

private:
    struct Entry {
        Nanos when;
        std::uint64_t seq;
        std::shared_ptr<Waiter> waiter;
    };
    struct Later {
        bool operator()(const Entry& a, const Entry& b) const {
            return a.when != b.when ? a.when > b.when : a.seq > b.seq;
        }
    };
    void drop_stale_top();
    std::vector<Entry> heap_;
    std::uint64_t seq_ = 0;
};

} // namespace permits::detail
