#include "permits/concurrency.hpp"

#include <algorithm>

namespace permits {

ConcurrencyRule::ConcurrencyRule(std::int64_t permit_limit) : limit_(permit_limit), base_(permit_limit) {
    detail::check_limit("permit_limit", permit_limit);
}

bool ConcurrencyRule::take(Pair s, Nanos /*anchor*/, std::int64_t n, Nanos /*now*/, Pair& next,
                           std::int64_t& tag) const noexcept {
    if (s.a - base_ + limit_ < n) {
        return false;
    }
    next = {s.a - n, s.b};
    tag = 0;
    return true;
}

Nanos ConcurrencyRule::time_until(Pair s, Nanos /*anchor*/, std::int64_t needed, Nanos /*now*/) const noexcept {
    return s.a - base_ + limit_ >= needed ? 0 : kNever; // only a release brings permits back
}

bool ConcurrencyRule::give_back(Pair s, Nanos /*anchor*/, std::int64_t n, std::int64_t /*tag*/, Nanos now,
                                Pair& next) const noexcept {
    const std::int64_t available = std::min(base_, s.a + n);
    next = {available, available >= base_ ? now : s.b}; // idle from the release that brought all back
    return true;
}

const char* ConcurrencyRule::cannot_follow(const Rule& before) const noexcept {
    return dynamic_cast<const ConcurrencyRule*>(&before) == nullptr ? "a limiter keeps its kind" : nullptr;
}

void ConcurrencyRule::adopt(const Rule& next) noexcept {
    limit_.set(next.max_permits()); // the base stays: the states count from it
}

} // namespace permits
