// What an acquisition attempt produced: the engine's side of a lease.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "permits/time.hpp"

namespace permits {

/// Why a lease failed (semantics.md item 7). None for successful leases.
enum class Reason : std::uint8_t { None, LimitReached, QueueFull, Evicted, Closed, Timeout, PartitionLimit };

const char* reason_name(Reason r) noexcept;

struct Outcome {
    bool acquired = false;
    Reason reason = Reason::None;
    Nanos retry_after = -1;   ///< -1: none
    std::int64_t permits = 0; ///< permits requested (held, when acquired)
    std::int64_t tag = 0;     ///< where the permits were taken (window/segment index), for refunds

    static Outcome granted(std::int64_t n, std::int64_t tag) { return {true, Reason::None, -1, n, tag}; }
    static Outcome failed(std::int64_t n, Reason r, Nanos retry_after = -1) { return {false, r, retry_after, n, 0}; }
};

/// Thrown by every call on a closed limiter.
class ClosedError : public std::runtime_error {
public:
    ClosedError() : std::runtime_error("the limiter is closed") {}
};

}  // namespace permits
