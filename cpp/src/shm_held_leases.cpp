// SharedLimiter's keeping of this process's concurrency leases (shm_limiters.hpp): what it does when
// the segment forgot a holding whose process still lives (paused past lease_ttl, judged dead, its
// holder slot reclaimed and its permits given to others).
#include "permits/shm_limiters.hpp"

#if defined(__linux__)

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <thread>

namespace permits::shm {

class SharedLimiter::Guard {
public:
    explicit Guard(SharedLimiter& l) : l_(l) {
        const std::uint64_t me = current_pid();
        for (;;) {
            std::uint64_t seen = 0;
            if (l_.lock_.compare_exchange_weak(seen, me, std::memory_order_acquire)) {
                break;
            }
            // Held by another pid: a thread of the parent this forked child does not have.
            if (seen != 0 && seen != me && l_.lock_.compare_exchange_strong(seen, me, std::memory_order_acquire)) {
                break;
            }
            std::this_thread::yield();
        }
        if (l_.groups_pid_ != me) {
            // Another process's groups (the parent's, maybe torn mid-change): none of them is ours.
            for (auto& g : l_.groups_) {
                g = Group{};
            }
            l_.groups_pid_ = me;
        }
    }
    ~Guard() { l_.lock_.store(0, std::memory_order_release); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

private:
    SharedLimiter& l_;
};

SharedLimiter::Group* SharedLimiter::find_locked(std::int64_t origin) noexcept {
    for (auto& g : groups_) {
        if (g.leases > 0 && g.origin == origin) {
            return &g;
        }
    }
    return nullptr;
}

bool SharedLimiter::keep_locked(Group& g) {
    if (g.lost) {
        return false;
    }
    if (still_held(g.now, g.permits)) {
        return true;
    }
    let_go(g.now, g.permits);
    // Taken again, as a new grant would be (never beyond the limit): the leases go on under it.
    std::int64_t tag = 0;
    if (take_held(g.permits, state_now(), tag)) {
        g.now = tag;
        return true;
    }
    g.lost = true;
    lost_leases_.fetch_add(g.leases);
    told_lost(g.leases);
    return false;
}

bool SharedLimiter::take(std::int64_t n, Nanos now, std::int64_t& tag) {
    for (;;) {
        if (!take_held(n, now, tag)) {
            return false;
        }
        if (!releases_permits()) {
            return true;
        }
        Guard guard(*this);
        if (!still_held(tag, n)) {
            // Judged dead as it took (a stalled process): what it took went back with its holding. A
            // lease is never tracked under a holding already forgotten, whose group may have been
            // taken back to another holding since (joining it would count permits not held there).
            continue;
        }
        if (Group* g = find_locked(tag)) {
            g->permits += n;
            ++g->leases;
        } else {
            for (auto& free : groups_) {
                if (free.leases == 0) {
                    free = Group{tag, tag, n, 1, false};
                    break;
                }
            }
            // (none free: kGroups holdings with leases at once, after as many take-backs; the lease
            // goes untracked, given back under its own holding, as before there was any tracking)
        }
        return true;
    }
}

void SharedLimiter::give_back_at(std::int64_t n, std::int64_t tag, Nanos now) {
    give_back_tracked(n, tag, now);
}

bool SharedLimiter::give_back_lease(std::int64_t n, std::int64_t tag) {
    if (n <= 0) {
        return false;
    }
    // As Limiter::give_back: after close() the permits still go back (other processes count on them).
    const bool was_lost = give_back_tracked(n, tag, state_now());
    if (!closed()) {
        recheck();
    }
    return was_lost;
}

bool SharedLimiter::give_back_part(std::int64_t n, std::int64_t tag) {
    if (n <= 0) {
        return false;
    }
    const bool was_lost = give_back_tracked(n, tag, state_now(), false);
    if (!closed()) {
        recheck();
    }
    return was_lost;
}

bool SharedLimiter::give_back_tracked(std::int64_t n, std::int64_t tag, Nanos now, bool ends) {
    if (!releases_permits()) {
        give_back_held(n, tag, now);
        return false;
    }
    Guard guard(*this);
    Group* g = find_locked(tag);
    if (g == nullptr) {
        give_back_held(n, tag, now); // untracked: a forked child's copy (gives nothing back), or no room
        return false;
    }
    const bool held = keep_locked(*g);
    const std::int64_t to = g->now;
    g->permits -= n;
    if ((ends && --g->leases <= 0) || g->permits <= 0) {
        *g = Group{};
    }
    if (held) {
        give_back_held(n, to, now); // (under the guard: a take-back meanwhile would count them twice)
    }
    return !held;
}

bool SharedLimiter::lost(std::int64_t tag) {
    if (!releases_permits()) {
        return false;
    }
    Guard guard(*this);
    Group* g = find_locked(tag);
    return g != nullptr && !keep_locked(*g);
}

void SharedLimiter::renew() {
    if (!releases_permits()) {
        return;
    }
    Guard guard(*this);
    for (auto& g : groups_) {
        if (g.leases > 0) {
            keep_locked(g);
        }
    }
}

void Store::note_lost() noexcept {
    lost_seq_.fetch_add(1);
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&lost_seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
              0);
}

void Store::wait_lost(std::uint32_t seen, Nanos timeout) const noexcept {
    timespec ts{static_cast<time_t>(timeout / 1000000000), static_cast<long>(timeout % 1000000000)};
    ::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&lost_seq_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

} // namespace permits::shm

#endif // __linux__
