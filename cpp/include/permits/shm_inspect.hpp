// A look at a shared-memory segment from outside (`python -m permits shm show`): its sizes, each
// named slot's limiter (kind, parameters, permits available now), the processes holding concurrency
// permits and whether the engine would judge them alive.
//
// Read-only: the segment is opened without O_CREAT (a missing name stays missing), nothing is
// settled, reclaimed or repaired, and state words are read as every process reads them (a
// compare-and-swap that writes back what it found). Other processes go on changing it meanwhile: a
// view may be slightly stale, never torn within one state word. A damaged header or holder table is
// refused as Segment::open refuses it; a damaged slot is reported (SlotInfo::damage), never followed.
#pragma once

#if defined(__linux__)

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "permits/shm_segment.hpp"

namespace permits::shm {

/// A process holding permits: a holder slot of the segment, or its share of one limiter.
struct HolderInfo {
    std::uint32_t index = 0;    ///< the holder slot
    std::uint64_t pid = 0;      ///< never 0 (a slot freed meanwhile is left out); kReclaimingPid: being reclaimed
    std::int64_t permits = 0;   ///< in a limiter: the permits it holds; in the segment: its uses (-1: being freed)
    bool alive = false;         ///< as holder_dead() judges it now
    bool same_namespace = true; ///< its pid is of our pid namespace (else its heartbeat alone decides)
};

struct ParamInfo {
    std::string name;
    std::int64_t value = 0;
    bool duration = false; ///< value is in nanoseconds
};

/// One named slot: a limiter, or a per-key table ("partitioned").
struct SlotInfo {
    std::string name;
    std::string kind;     ///< "token_bucket", "fixed_window", "sliding_window", "sliding_window_counter",
                          ///< "concurrency" or "partitioned"
    std::string key_kind; ///< a per-key table's keys' kind; else empty
    std::vector<ParamInfo> params;
    std::uint64_t bytes = 0;
    /// Permits a request could take now; nullopt when that is not known here (a per-key table, or
    /// a time-based kind on a segment of a ManualClock with no time given).
    std::optional<std::int64_t> available;
    std::optional<std::int64_t> limit; ///< the most permits: permit_limit or token_limit
    std::vector<HolderInfo> holders;   ///< concurrency (and concurrency keys): who holds permits, how many
    std::optional<std::int64_t> keys;  ///< a per-key table: its keys now
    std::string damage; ///< non-empty: what is wrong with the slot (then only its name and kind are read)
};

struct SegmentInfo {
    std::string name;
    std::uint64_t size = 0;        ///< bytes the segment maps
    std::uint64_t capacity = 0;    ///< room for keys it was made with
    std::uint64_t arena_bytes = 0; ///< room for limiters' and tables' data
    std::uint64_t used_bytes = 0;  ///< of which taken
    ClockKind clock = ClockKind::Monotonic;
    std::vector<SlotInfo> slots;
    std::vector<HolderInfo> holders; ///< the holder slots in use
    std::int64_t holder_slots = 0;   ///< how many there are
};

/// Reads segment `name`. `now` is the time on the segment's clock that availability is computed at:
/// nullopt takes CLOCK_MONOTONIC for a segment of the real clock; a ManualClock's time is each
/// process's own, so a segment of one has time-based availability only when `now` is given.
/// std::invalid_argument for a bad name or a foreign or damaged file; std::system_error for what
/// the OS refuses (ENOENT: no such segment; EACCES: another user's).
SegmentInfo describe(const std::string& name, std::optional<Nanos> now = std::nullopt);

/// A kind's name as the slots' messages use it ("token_bucket"...); "kind N" for an unknown one.
std::string kind_name(Kind kind);

} // namespace permits::shm

#endif // __linux__
