// What the engine tests share: time units and a manual clock at 0.
#pragma once

#include <memory>

#include "permits/clock.hpp"
#include "permits/time.hpp"

namespace permits::testing {

inline constexpr Nanos kMs = 1'000'000;
inline constexpr Nanos kSec = 1'000'000'000;

inline std::shared_ptr<ManualClock> make_clock() {
    return std::make_shared<ManualClock>(0);
}

} // namespace permits::testing
