// Per-key limits in the engine: one limiter per key, created on first use, dropped once fully
// idle for longer than the idle timeout. Keys are byte strings (the bindings encode Python keys
// with their type, so "7" and 7 differ). No Python here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "permits/limiter.hpp"

namespace permits {

class KeyedLimiter final : public TimerTarget, public std::enable_shared_from_this<KeyedLimiter> {
public:
    using Factory = std::function<std::shared_ptr<Limiter>()>;

    /// `max_partitions` 0: no bound.
    KeyedLimiter(std::shared_ptr<Clock> clock, Factory factory, Nanos idle_timeout, std::int64_t max_partitions);

    /// The key's limiter runs `op` under its shard's lock, so an eviction can never slip between
    /// finding a limiter and using it (a request granted by a dropped limiter would escape the
    /// limit). nullopt: max_partitions leaves no room for a new key.
    template <class Op>
    auto with(std::string_view key, Op&& op) -> std::optional<decltype(op(std::declval<Limiter&>()))>;

    Outcome acquire(std::string_view key, std::int64_t n);
    Limiter::Enqueued enqueue(std::string_view key, std::int64_t n, Nanos timeout,
                              std::shared_ptr<Notifier> notifier = nullptr, std::uint64_t id = 0);
    /// The key's limiter (created if absent), or nullptr at the bound.
    std::shared_ptr<Limiter> limiter(std::string_view key);

    std::int64_t size() const noexcept { return size_.load(); }
    /// Every partition's counts added up, with those of evicted partitions.
    Statistics totals();
    /// Drops every partition idle for longer than the idle timeout; returns how many.
    std::int64_t evict_due(Nanos now);
    std::int64_t evict_idle() { return evict_due(clock_->now()); }
    void close();
    bool closed() const noexcept { return closed_.load(); }
    void on_timer(Nanos now) override;

private:
    struct Entry {
        std::shared_ptr<Limiter> limiter;
        std::uint64_t generation; // tells a pending look at this partition from one at an earlier one
    };
    // Transparent hashing: a lookup by string_view builds no std::string.
    struct KeyHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
    };
    using Map = std::unordered_map<std::string, Entry, KeyHash, std::equal_to<>>;
    struct Shard {
        std::mutex mu; // guards map; held for a lookup and one non-blocking limiter call
        Map map;
    };
    struct Due {
        Nanos when;
        std::uint64_t generation;
        std::string key;
        bool operator>(const Due& o) const { return when > o.when; }
    };
    static constexpr std::size_t kShards = 64;

    Shard& shard_of(std::string_view key) { return shards_[std::hash<std::string_view>{}(key) % kShards]; }
    /// Under the shard's lock: the key's limiter, created if absent (nullptr at the bound).
    std::shared_ptr<Limiter> find_or_create_locked(Shard& shard, std::string_view key);
    /// Counts a new partition in, unless the bound is reached.
    bool reserve_place() noexcept;
    /// Under the shard's lock: one idle partition dropped to make room.
    bool free_a_place_locked(Shard& shard, Nanos now);
    void drop_locked(Shard& shard, Map::iterator it);
    void look_again_at(Nanos when, std::uint64_t generation, std::string key);

    std::shared_ptr<Clock> clock_;
    Factory factory_;
    const Nanos idle_timeout_;
    const std::int64_t max_partitions_;
    std::array<Shard, kShards> shards_;
    std::atomic<std::int64_t> size_{0};
    std::atomic<bool> closed_{false};
    std::atomic<std::int64_t> dropped_successful_{0};
    std::atomic<std::int64_t> dropped_failed_{0};

    // When each partition is next worth looking at: O(evicted) eviction, no scan of all keys.
    std::mutex due_mu_;    // guards due_ and scheduled_at_; never held with a shard's lock taken after it
    std::vector<Due> due_; // a min-heap on `when`
    Nanos scheduled_at_ = kNever;
    std::atomic<std::uint64_t> generations_{0};
};

template <class Op>
auto KeyedLimiter::with(std::string_view key, Op&& op) -> std::optional<decltype(op(std::declval<Limiter&>()))> {
    if (closed_.load()) {
        throw ClosedError();
    }
    Shard& shard = shard_of(key);
    std::unique_lock<std::mutex> lock(shard.mu);
    auto limiter = find_or_create_locked(shard, key);
    if (!limiter) {
        return std::nullopt;
    }
    return op(*limiter);
}

} // namespace permits
