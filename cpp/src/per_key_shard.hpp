// A per-key limiter's shard and a key's place in it: what per_key.cpp and per_key_eviction.cpp share
// (internal to the engine's sources).
#pragma once

#include "permits/key_table.hpp"
#include "permits/per_key.hpp"

#include <cstdint>
#include <mutex>

namespace permits {

struct PerKeyLimiter::Shard {
    std::mutex mu; // guards the table; held for a lookup and one non-blocking decision
    detail::KeyTable table;
};

struct PerKeyLimiter::Located {
    Shard& shard;
    std::unique_lock<std::mutex> lock;
    std::uint32_t index = detail::kNoRecord;
    bool found() const noexcept { return index != detail::kNoRecord; }
};

} // namespace permits
