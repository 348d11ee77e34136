// What the engine tests share: time units, a manual clock at 0, and taking a limiter's permits.
#pragma once

#include <memory>

#include "permits/clock.hpp"
#include "permits/limiter.hpp"
#include "permits/time.hpp"

namespace permits::testing {

inline constexpr Nanos kMs = 1'000'000;
inline constexpr Nanos kSec = 1'000'000'000;

inline std::shared_ptr<ManualClock> make_clock() {
    return std::make_shared<ManualClock>(0);
}

/// Acquires one permit at a time until refused: how many were granted.
inline int take_all(Limiter& l) {
    int granted = 0;
    while (l.acquire(1).acquired) {
        ++granted;
    }
    return granted;
}

} // namespace permits::testing
