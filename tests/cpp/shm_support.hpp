// What the shared-memory tests share (Linux): a segment name no other test or run uses, and a
// segment opened twice, as two processes map it.
#pragma once

#if defined(__linux__)

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "permits/shm_limiters.hpp"
#include "support.hpp"

namespace permits::testing {

inline std::string unique_name(const char* what) {
    static std::atomic<int> n{0};
    return std::string("ctest-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n.fetch_add(1));
}

/// A segment opened twice (two mappings, as two processes have), on a manual clock, its name
/// removed at once.
struct Two {
    std::shared_ptr<ManualClock> clock = make_clock();
    std::string name;
    std::shared_ptr<shm::Store> a;
    std::shared_ptr<shm::Store> b;
    explicit Two(const char* what, std::uint64_t capacity = 64) : name(unique_name(what)) {
        const shm::Segment::Options opts{capacity, 0600, shm::ClockKind::Manual};
        a = std::make_shared<shm::Store>(shm::Segment::open(name, opts), clock);
        b = std::make_shared<shm::Store>(shm::Segment::open(name, opts), clock);
        shm::Segment::unlink(name);
    }
};

/// A segment on a manual clock that keeps its name while the test runs (for what opens it by name,
/// as an inspector does), removed at the end.
struct Named {
    std::shared_ptr<ManualClock> clock = make_clock();
    std::string name;
    std::shared_ptr<shm::Store> store;
    explicit Named(const char* what, std::uint64_t capacity = 64) : name(unique_name(what)) {
        store = std::make_shared<shm::Store>(shm::Segment::open(name, {capacity, 0600, shm::ClockKind::Manual}), clock);
    }
    ~Named() { shm::Segment::unlink(name); }
    /// A second mapping of the segment, as another process opening it later.
    std::shared_ptr<shm::Store> reopen() const {
        return std::make_shared<shm::Store>(shm::Segment::open(name, {64, 0600, shm::ClockKind::Manual}), clock);
    }
    Named(const Named&) = delete;
    Named& operator=(const Named&) = delete;
};

} // namespace permits::testing

#endif // __linux__
