#include "permits/keyed.hpp"

#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>

namespace permits {

KeyedLimiter::KeyedLimiter(std::shared_ptr<Clock> clock, Factory factory, Nanos idle_timeout,
                           std::int64_t max_partitions)
    : clock_(std::move(clock)), factory_(std::move(factory)), idle_timeout_(idle_timeout),
      max_partitions_(max_partitions) {
    if (idle_timeout < 0) {
        throw std::invalid_argument("idle_timeout must not be negative");
    }
    if (max_partitions < 0) {
        throw std::invalid_argument("max_partitions must be >= 1");
    }
}

std::shared_ptr<Limiter> KeyedLimiter::find_or_create_locked(Shard& shard, std::string_view key) {
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
        return it->second.limiter;
    }
    const Nanos now = clock_->now();
    // Reserve the new partition's place first: shards insert concurrently, the bound is global.
    if (!reserve_place() && !(free_a_place_locked(shard, now) && reserve_place())) {
        return nullptr;
    }
    std::shared_ptr<Limiter> limiter;
    try {
        limiter = factory_();
    } catch (...) {
        size_.fetch_sub(1);
        throw;
    }
    const std::uint64_t generation = generations_.fetch_add(1);
    shard.map.emplace(std::string(key), Entry{limiter, generation});
    look_again_at(sat_add(now, sat_add(idle_timeout_, 1)), generation, std::string(key));
    return limiter;
}

bool KeyedLimiter::reserve_place() noexcept {
    std::int64_t size = size_.load();
    do {
        if (max_partitions_ > 0 && size >= max_partitions_) {
            return false;
        }
    } while (!size_.compare_exchange_weak(size, size + 1));
    return true;
}

bool KeyedLimiter::free_a_place_locked(Shard& shard, Nanos /*now*/) {
    // A fully idle partition, however briefly idle, gives its place. At most 32 are examined,
    // this shard's first; other shards only if their lock is free right now (try_lock: a new key
    // never waits on, nor deadlocks with, another shard).
    int looked = 0;
    auto search = [&](Shard& s) {
        for (auto it = s.map.begin(); it != s.map.end() && looked < 32; ++it, ++looked) {
            if (it->second.limiter->idle_duration()) {
                drop_locked(s, it);
                return true;
            }
        }
        return false;
    };
    if (search(shard)) {
        return true;
    }
    const auto first = static_cast<std::size_t>(&shard - shards_.data());
    for (std::size_t i = 1; i < kShards && looked < 32; ++i) {
        Shard& other = shards_[(first + i) % kShards];
        std::unique_lock<std::mutex> lock(other.mu, std::try_to_lock);
        if (lock.owns_lock() && search(other)) {
            return true;
        }
    }
    return false;
}

void KeyedLimiter::drop_locked(Shard& shard, Map::iterator it) {
    // Idle: nothing is held and nothing waits, so dropping it loses no state worth keeping.
    const Statistics s = it->second.limiter->statistics();
    dropped_successful_.fetch_add(s.total_successful_leases);
    dropped_failed_.fetch_add(s.total_failed_leases);
    shard.map.erase(it);
    size_.fetch_sub(1);
}

void KeyedLimiter::look_again_at(Nanos when, std::uint64_t generation, std::string key) {
    bool schedule = false;
    {
        std::lock_guard<std::mutex> lock(due_mu_);
        due_.push_back({when, generation, std::move(key)});
        std::push_heap(due_.begin(), due_.end(), std::greater<>{});
        if (when < scheduled_at_) {
            scheduled_at_ = when;
            schedule = true;
        }
    }
    if (schedule) {
        clock_->scheduler().schedule(weak_from_this(), when);
    }
}

Outcome KeyedLimiter::acquire(std::string_view key, std::int64_t n) {
    auto o = with(key, [n](Limiter& l) { return l.acquire(n); });
    if (!o) {
        return Outcome::failed(n, Reason::PartitionLimit);
    }
    return *o;
}

Limiter::Enqueued KeyedLimiter::enqueue(std::string_view key, std::int64_t n, Nanos timeout,
                                        std::shared_ptr<Notifier> notifier, std::uint64_t id) {
    auto q = with(key, [&](Limiter& l) { return l.enqueue(n, timeout, std::move(notifier), id); });
    if (!q) {
        return {Outcome::failed(n, Reason::PartitionLimit), nullptr};
    }
    return std::move(*q);
}

std::shared_ptr<Limiter> KeyedLimiter::limiter(std::string_view key) {
    if (closed_.load()) {
        throw ClosedError();
    }
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mu);
    return find_or_create_locked(shard, key);
}

std::int64_t KeyedLimiter::evict_due(Nanos now) {
    std::int64_t evicted = 0;
    for (;;) {
        Due due;
        {
            std::lock_guard<std::mutex> lock(due_mu_);
            if (due_.empty() || due_.front().when > now) {
                break;
            }
            std::pop_heap(due_.begin(), due_.end(), std::greater<>{});
            due = std::move(due_.back());
            due_.pop_back();
        }
        Shard& shard = shard_of(due.key);
        std::lock_guard<std::mutex> lock(shard.mu);
        auto it = shard.map.find(due.key);
        if (it == shard.map.end() || it->second.generation != due.generation) {
            continue; // dropped already (to make room), perhaps created again since
        }
        const auto idle = it->second.limiter->idle_duration();
        if (idle && *idle > idle_timeout_) {
            drop_locked(shard, it);
            ++evicted;
            continue;
        }
        // Idle, but not for long enough: look exactly when it will have been; in use: later.
        const Nanos wait = idle ? idle_timeout_ - *idle + 1 : sat_add(idle_timeout_, 1);
        look_again_at(sat_add(now, wait), due.generation, std::move(due.key));
    }
    // Looks pending for partitions dropped to make room pile up only so far. (The shards are
    // locked with due_mu_ released: a shard's lock is never taken while due_mu_ is held.)
    std::vector<Due> pending;
    {
        std::lock_guard<std::mutex> lock(due_mu_);
        if (due_.size() > 2 * static_cast<std::size_t>(size_.load()) + 64) {
            pending.swap(due_);
        }
    }
    if (!pending.empty()) {
        std::erase_if(pending, [this](const Due& d) {
            Shard& shard = shard_of(d.key);
            std::lock_guard<std::mutex> lock(shard.mu);
            auto it = shard.map.find(d.key);
            return it == shard.map.end() || it->second.generation != d.generation;
        });
        std::lock_guard<std::mutex> lock(due_mu_);
        for (auto& d : pending) {
            due_.push_back(std::move(d));
        }
        std::make_heap(due_.begin(), due_.end(), std::greater<>{});
    }
#if defined(__GLIBC__)
    if (evicted >= 4096) {
        ::malloc_trim(0); // many small blocks freed at once: hand the memory back to the system
    }
#endif
    return evicted;
}

void KeyedLimiter::on_timer(Nanos now) {
    {
        std::lock_guard<std::mutex> lock(due_mu_);
        scheduled_at_ = kNever;
    }
    if (closed_.load()) {
        return;
    }
    evict_due(now);
    Nanos next = kNever;
    {
        std::lock_guard<std::mutex> lock(due_mu_);
        if (!due_.empty() && due_.front().when < scheduled_at_) {
            next = scheduled_at_ = due_.front().when;
        }
    }
    if (next != kNever) {
        clock_->scheduler().schedule(weak_from_this(), next);
    }
}

Statistics KeyedLimiter::totals() {
    if (closed_.load()) {
        throw ClosedError();
    }
    Statistics total{0, 0, dropped_successful_.load(), dropped_failed_.load()};
    for (auto& shard : shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        for (auto& [key, entry] : shard.map) {
            const Statistics s = entry.limiter->statistics();
            total.current_available_permits += s.current_available_permits;
            total.current_queued_count += s.current_queued_count;
            total.total_successful_leases += s.total_successful_leases;
            total.total_failed_leases += s.total_failed_leases;
        }
    }
    return total;
}

void KeyedLimiter::close() {
    if (closed_.exchange(true)) {
        return;
    }
    for (auto& shard : shards_) {
        Map map;
        {
            std::lock_guard<std::mutex> lock(shard.mu);
            map.swap(shard.map);
        }
        for (auto& [key, entry] : map) {
            entry.limiter->close(); // queued requests complete with reason "closed"
        }
    }
    size_.store(0);
    std::lock_guard<std::mutex> lock(due_mu_);
    due_.clear();
}

} // namespace permits
