// The per-key limiter's idle eviction: an idle partition dropped to make room for a new key, the
// timer's checks that drop the keys idle for longer than the idle timeout, and the shards' locks
// around a fork (per_key.cpp has the rest of PerKeyLimiter).
#include "permits/per_key.hpp"

#include "per_key_shard.hpp"

#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <mutex>
#include <vector>

namespace permits {

bool PerKeyLimiter::drop_an_idle_locked(Shard& shard, Nanos now, int& examined) {
    for (std::uint32_t i = 0; i < shard.table.used() && examined < 32; ++i) {
        Record& r = shard.table.at(i);
        if (!r.live()) {
            continue;
        }
        ++examined;
        bool poll = false;
        if (full_at_locked(r, poll) <= now) {
            drop_locked(shard, i);
            return true;
        }
    }
    return false;
}

bool PerKeyLimiter::free_a_place_locked(Shard& shard, Nanos now, std::uint64_t& busy) {
    // A fully idle partition, however briefly idle, gives its place. At most 32 are examined,
    // this shard's first; other shards only if their lock is free right now (try_lock: holding
    // this shard's lock, waiting for another could deadlock with a thread doing the same).
    static_assert(kShards <= 64, "the busy shards are bits of one 64-bit word");
    int examined = 0;
    if (drop_an_idle_locked(shard, now, examined)) {
        return true;
    }
    const auto first = static_cast<std::size_t>(&shard - shards_->data());
    for (std::size_t k = 1; k < kShards && examined < 32; ++k) {
        const std::size_t index = (first + k) % kShards;
        std::unique_lock<std::mutex> lock((*shards_)[index].mu, std::try_to_lock);
        if (!lock.owns_lock()) {
            busy |= std::uint64_t{1} << index;
        } else if (drop_an_idle_locked((*shards_)[index], now, examined)) {
            return true;
        }
    }
    return false;
}

bool PerKeyLimiter::free_a_place_in(std::uint64_t busy, Nanos now) {
    int examined = 0;
    for (std::size_t index = 0; index < kShards && examined < 32; ++index) {
        if ((busy >> index & 1U) != 0) {
            Shard& shard = (*shards_)[index];
            std::lock_guard<std::mutex> lock(shard.mu);
            if (drop_an_idle_locked(shard, now, examined)) {
                return true;
            }
        }
    }
    return false;
}

void PerKeyLimiter::drop_locked(Shard& shard, std::uint32_t i) {
    // Idle: nothing is held and nothing waits, so dropping it loses no state worth keeping.
    Record& r = shard.table.at(i);
    std::int64_t successful = r.successful;
    std::int64_t failed = r.failed;
    if (r.promoted()) {
        const Statistics s = r.limiter()->statistics();
        successful += s.total_successful_leases;
        failed += s.total_failed_leases;
    }
    dropped_successful_.fetch_add(successful);
    dropped_failed_.fetch_add(failed);
    shard.table.remove(i);
    size_.fetch_sub(1);
}

void PerKeyLimiter::check_locked(Shard& shard, std::uint32_t i, Nanos now, std::int64_t& evicted) {
    Record& r = shard.table.at(i);
    if (r.promoted() && r.limiter()->queued_requests() > 0) {
        // Its queue changes when its own timer runs: check right after that (same time, later in
        // the timer heap), so the key is evicted on time once its queue is served.
        const Nanos next = r.limiter()->next_timer();
        check_at_locked(shard, i, next == kNever ? sat_add(now, sat_add(idle_timeout_, 1)) : std::max(next, now));
        return;
    }
    bool poll = false;
    const Nanos at = full_at_locked(r, poll);
    if (at != kNever && at <= now && now - at > idle_timeout_) {
        drop_locked(shard, i);
        ++evicted;
        return;
    }
    if (at != kNever) {
        check_at_locked(shard, i,
                        sat_add(at, sat_add(idle_timeout_, 1))); // exactly when it will have been idle long enough
    } else if (poll) {
        check_at_locked(shard, i, sat_add(now, sat_add(idle_timeout_, 1)));
    }
}

std::int64_t PerKeyLimiter::evict_due(Nanos now) {
    std::int64_t evicted = 0;
    std::vector<std::uint32_t> due;
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        // The checks due now, taken first: a check may set another one for now (a full limiter whose
        // timer is due), which is the next timer run's, after that limiter's own.
        due.clear();
        for (std::uint32_t i = shard.table.pop_due_check(now); i != detail::kNoRecord;
             i = shard.table.pop_due_check(now)) {
            due.push_back(i);
        }
        for (const std::uint32_t i : due) {
            // Only checks of these records run meanwhile: each may drop its own, and the last one
            // dropped lets the shard's memory go.
            if (shard.table.live(i)) {
                check_locked(shard, i, now, evicted);
            }
        }
    }
#if defined(__GLIBC__)
    if (evicted >= 4096) {
        ::malloc_trim(0); // many blocks freed at once: hand the memory back to the system
    }
#endif
    return evicted;
}

bool PerKeyLimiter::fork_try_lock() noexcept {
    for (std::size_t i = 0; i < kShards; ++i) {
        if (!(*shards_)[i].mu.try_lock()) {
            while (i > 0) {
                (*shards_)[--i].mu.unlock();
            }
            return false;
        }
    }
    return true;
}

void PerKeyLimiter::fork_unlock() noexcept {
    for (auto& shard : *shards_) {
        shard.mu.unlock();
    }
}

void PerKeyLimiter::fork_reset_child(bool timers_cleared, TimerHeap& engine) {
    if (!timers_cleared || closed_.load()) {
        return; // a manual clock's timers are still there
    }
    Nanos next = kNever;
    for (auto& shard : *shards_) {
        next = std::min(next, shard.table.next_check());
    }
    scheduled_at_.store(next);
    if (next != kNever) {
        engine.push(next, weak_from_this(), this);
    }
}

void PerKeyLimiter::on_timer(Nanos now) {
    scheduled_at_.store(kNever);
    if (closed_.load()) {
        return;
    }
    evict_due(now);
    Nanos next = kNever;
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        next = std::min(next, shard.table.next_check());
    }
    if (next != kNever) {
        schedule(next);
    }
}

} // namespace permits
