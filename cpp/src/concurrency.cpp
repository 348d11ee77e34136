#include "permits/concurrency.hpp"

#include <stdexcept>

namespace permits {

Concurrency::Concurrency(std::shared_ptr<Clock> clock, std::int64_t permit_limit, QueueOptions queue)
    : Limiter(std::move(clock), permit_limit, queue, false), limit_(permit_limit), available_(permit_limit),
      idle_since_(state_now()) {
    detail::check_limit("permit_limit", permit_limit);
}

bool Concurrency::take(std::int64_t n, Nanos /*now*/, std::int64_t& tag) {
    std::int64_t a = available_.load();
    while (a >= n) {
        if (available_.compare_exchange_weak(a, a - n)) {
            tag = 0;
            return true;
        }
    }
    return false;
}

std::int64_t Concurrency::available_at(Nanos /*now*/) const {
    return available_.load();
}

Nanos Concurrency::time_until(std::int64_t needed, Nanos /*now*/) const {
    return available_.load() >= needed ? 0 : kNever; // only a release brings permits back
}

void Concurrency::put_back(std::int64_t n, std::int64_t /*tag*/, Nanos now) {
    if (available_.fetch_add(n) + n >= limit_) {
        idle_since_.store(now);
    }
}

Nanos Concurrency::full_since(Nanos /*now*/) const {
    return available_.load() >= limit_ ? idle_since_.load() : kNever;
}

std::unique_ptr<Projection> Concurrency::project() const {
    return nullptr;
} // only releases bring permits

} // namespace permits
