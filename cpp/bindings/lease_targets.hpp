// Where a lease that does not own its limiter sends a refund: a registry of limiters and per-key
// tables by id, holding weak references. A time-based lease only needs its limiter for a refund
// (a chain giving back), which is rare; owning it (a shared_ptr) would cost two atomic operations
// per acquire once the process has a second thread (benchmarks/bench_acquire.py). Used with the GIL
// held.
#pragma once

#include <cstdint>
#include <memory>

#include "permits/limiter.hpp"
#include "permits/per_key.hpp"

#if defined(__linux__)
#include "permits/shm_keyed.hpp"
#endif

namespace permits::bind {

/// The id of `limiter` in the registry, registering it on first use.
std::uint64_t target_of(Limiter& limiter);
std::uint64_t target_of(PerKeyLimiter& per_key);
#if defined(__linux__)
std::uint64_t target_of(shm::KeyedLimiter& keyed);
#endif

struct Target {
    std::shared_ptr<Limiter> limiter;       ///< set for a limiter's id
    std::shared_ptr<PerKeyLimiter> per_key; ///< set for a per-key table's id
#if defined(__linux__)
    std::shared_ptr<shm::KeyedLimiter> shm_keyed; ///< set for a shared per-key table's (this process's side)
#endif
};
/// What `id` names, or an empty Target once it is gone.
Target find_target(std::uint64_t id);

} // namespace permits::bind
