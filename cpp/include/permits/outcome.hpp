// What an acquisition attempt produced: the engine's side of a lease.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "permits/time.hpp"

namespace permits {

/// Why a lease failed (docs/design.md, Reasons). None for successful leases.
// ProcessLimit: permits are free, but this process cannot hold them now (a shared-memory segment's
// bound on processes holding permits at the same moment, or on one key's holders).
enum class Reason : std::uint8_t {
    None,
    LimitReached,
    QueueFull,
    Evicted,
    Closed,
    Timeout,
    PartitionLimit,
    ProcessLimit
};

/// The name Python shows for a reason (Lease.reason); "" for None.
inline const char* reason_name(Reason r) noexcept {
    switch (r) {
    case Reason::None: return "";
    case Reason::LimitReached: return "limit_reached";
    case Reason::QueueFull: return "queue_full";
    case Reason::Evicted: return "evicted";
    case Reason::Closed: return "closed";
    case Reason::Timeout: return "timeout";
    case Reason::PartitionLimit: return "partition_limit";
    case Reason::ProcessLimit: return "process_limit";
    }
    return "";
}

struct Outcome {
    bool acquired = false;
    Reason reason = Reason::None;
    Nanos retry_after = -1;    ///< -1: none; saturates at kNever (292 years)
    std::int64_t permits = 0;  ///< permits requested (held, when acquired)
    std::int64_t tag = 0;      ///< where the permits were taken (their window's start in clock time), for refunds
    double retry_seconds = -1; ///< retry_after in seconds, exact even past kNever

    static Outcome granted(std::int64_t n, std::int64_t tag) { return {true, Reason::None, -1, n, tag, -1}; }
    static Outcome failed(std::int64_t n, Reason r) { return {false, r, -1, n, 0, -1}; }
    /// A failed outcome that can be retried after `wait` nanoseconds (wait < 0: not by time).
    static Outcome failed(std::int64_t n, Reason r, i128 wait) {
        Outcome o = failed(n, r);
        if (wait >= 0) {
            o.retry_after = sat_nanos(wait);
            o.retry_seconds = static_cast<double>(wait) / 1e9;
        }
        return o;
    }
};

/// Thrown by every call on a closed limiter.
class ClosedError : public std::runtime_error {
public:
    ClosedError() : std::runtime_error("the limiter is closed") {}
};

} // namespace permits
