// Per-key limits in the engine. Each key is a 60-byte record in a sharded hash table (key_table.hpp):
// the rule's state word, its anchor, its counters, its key and when eviction next checks it; the
// table's index adds a 4-byte slot and the eviction heap a 4-byte entry. A sliding window's record
// points to a block of its own instead of a state word: its head and a 32-bit count per segment
// (CompactSlidingWindow; 84 bytes for 20 segments; the sliding log of specs.parse's rates adds a
// stamp per segment: 280 bytes for its 33, where a full SlidingWindow took over 1 KB). A key
// becomes a full Limiter only when one of its requests has to queue, and stays one until evicted.
// A key is evicted once fully idle for longer than the idle timeout, exactly then, by checks kept
// in a per-shard heap: O(evicted), no scan.
// Keys are byte strings (the bindings encode Python keys with their type). No Python here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "permits/fork.hpp"
#include "permits/limiter.hpp"
#include "permits/rule.hpp"
#include "permits/scheduler.hpp"

namespace permits {

class CompactSlidingWindow;

namespace detail {
struct KeyRecord;
} // namespace detail

/// What every key's limiter is.
struct PerKeyTemplate {
    /// Applied to each key's record; nullptr (and no `window`): every key gets a full limiter at once.
    std::shared_ptr<const Rule> rule;
    QueueOptions queue;
    /// A full limiter going on from a record's (anchor, state); kinds without a rule ignore the
    /// state (a sliding window's: a new window anchored there).
    std::function<std::shared_ptr<Limiter>(Nanos anchor, Pair state)> promote;
    /// A sliding window (rule nullptr): applied to each key's compact state, out of the record,
    /// which it also promotes from.
    std::shared_ptr<const CompactSlidingWindow> window;
    /// reconfigure: takes `next`'s amounts into this template's rule or window in place (the
    /// records read them as they are), and gives a key's full limiter the current ones and `queue`.
    /// Unset (a template made by hand): the limit cannot change.
    std::function<void(const PerKeyTemplate& next)> adopt;
    std::function<void(Limiter& full, QueueOptions queue)> reconfigure_full;

    /// Each key a sliding window: std::invalid_argument naming the option unless they make one.
    static PerKeyTemplate sliding_window(const std::shared_ptr<Clock>& clock, std::int64_t permit_limit, Nanos window,
                                         std::int64_t segments, QueueOptions queue);

    /// For a RuleLimiter type L (TokenBucket, FixedWindow, ...) and its rule.
    template <class L, class R>
    static PerKeyTemplate of(const std::shared_ptr<Clock>& clock, const R& rule, QueueOptions queue) {
        auto r = std::make_shared<R>(rule); // (its amounts change in place: reconfigure)
        PerKeyTemplate t;
        t.rule = r;
        t.queue = queue;
        t.promote = [clock, r, queue](Nanos anchor, Pair state) {
            return std::make_shared<L>(clock, *r, queue, anchor, state);
        };
        t.adopt = [r](const PerKeyTemplate& next) { r->adopt(*next.rule); };
        t.reconfigure_full = [r](Limiter& full, QueueOptions q) { static_cast<L&>(full).reconfigure(*r, q); };
        return t;
    }
};

class PerKeyLimiter final : public TimerTarget, public std::enable_shared_from_this<PerKeyLimiter> {
public:
    /// `max_partitions` 0: no bound.
    PerKeyLimiter(std::shared_ptr<Clock> clock, PerKeyTemplate tmpl, Nanos idle_timeout, std::int64_t max_partitions);
    ~PerKeyLimiter() override;
    PerKeyLimiter(const PerKeyLimiter&) = delete;
    PerKeyLimiter& operator=(const PerKeyLimiter&) = delete;

    struct Result {
        Outcome outcome;
        /// True when the key's full limiter decided, false when its record did. Either way its
        /// leases go back through give_back(key, ...).
        bool promoted = false;
    };
    /// The outcome of acquire(n) on the key's limiter (reason PartitionLimit at the bound).
    Result acquire(std::string_view key, std::int64_t n);
    /// Granted now, or nullopt with nothing counted (the caller goes on to enqueue()).
    std::optional<Result> try_now(std::string_view key, std::int64_t n);
    struct Queued {
        Limiter::Enqueued enqueued;
        std::shared_ptr<Limiter> owner; ///< as in Result; the limiter the waiter is queued in
    };
    Queued enqueue(std::string_view key, std::int64_t n, Nanos timeout, std::shared_ptr<Notifier> notifier = nullptr,
                   std::uint64_t id = 0);
    /// Returns permits granted by the key's record or its full limiter (a release or a refund).
    void give_back(std::string_view key, std::int64_t n, std::int64_t tag);
    /// Something changed the key's full limiter behind the table's back (a queued request left):
    /// checks it again when it will be idle.
    void recheck(std::string_view key);
    bool releases_permits() const noexcept { return releases_; }

    /// Forgets what the key's time-based limiter has granted: its whole limit is available from
    /// now and its queued requests are served from it; a refund of a grant made before (or, for a
    /// key that queues, in the same window) gives nothing back. Its counts stay. False when there
    /// was nothing to forget: an absent key (full), a concurrency limit (its permits are those its
    /// leases hold: they stay held), a closed limiter.
    bool reset(std::string_view key);
    /// The key's statistics and available permits (the partition is created if absent, as
    /// .NET does); nullopt at the bound.
    std::optional<Statistics> statistics(std::string_view key);
    std::int64_t size() const noexcept { return size_.load(); }
    /// Every partition's counts added up, with those of evicted partitions.
    Statistics totals();
    /// Drops every partition idle for longer than the idle timeout at `now`; returns how many.
    std::int64_t evict_due(Nanos now);
    std::int64_t evict_idle() { return evict_due(clock_->now()); }
    void close();
    bool closed() const noexcept { return closed_.load(); }
    void on_timer(Nanos now) override;
    /// A key's success and failure counts are 32-bit in its record; at this count the key moves
    /// to a full limiter, whose counts are 64-bit. Lowered only by tests.
    void set_count_limit_for_testing(std::uint32_t limit) noexcept { count_limit_ = limit; }
    /// The table's own memory, by what it has allocated (records, index slots, check heap, keys
    /// too long to sit in their record, sliding windows' blocks; full limiters not counted): for
    /// benchmarks and tests.
    struct Memory {
        std::size_t bytes = 0;     ///< all of it
        std::size_t key_bytes = 0; ///< of which the keys' bytes (inline or on the heap)
    };
    Memory memory();
    /// Every key's limit from now on, present and future: `next`'s amounts (its limit, its rate)
    /// and queue options; each key's state kept, as reconfigure keeps a limiter's. Under every shard
    /// lock. std::invalid_argument unless `next` is of the same kind with the same window (period,
    /// segments); std::logic_error for a template made by hand; ClosedError once closed.
    void reconfigure(const PerKeyTemplate& next);
    const std::shared_ptr<Clock>& clock() const noexcept { return clock_; }
    /// Every key's queue options as they are (read under a shard lock).
    QueueOptions queue_options();
    /// Checks the table's own consistency (index, records, check heap); throws std::logic_error
    /// naming what is wrong. O(keys): for tests and fuzzing.
    void check_invariants();

    /// An opaque tag for the bindings (a registry id); the engine never reads it.
    std::uint64_t binding_tag = 0;

private:
    friend class detail::ForkRegistry;
    /// fork(): every shard lock if all are free (prepare), let go (parent, and child once reset).
    bool fork_try_lock() noexcept;
    void fork_unlock() noexcept;
    /// In a forked child, under every shard lock, the scheduler's timers gone (`timers_cleared`):
    /// the eviction timer set again for the earliest check, into `engine`'s heap (the thread is
    /// started later); the keys' full limiters are reset on their own.
    void fork_reset_child(bool timers_cleared, TimerHeap& engine);

    struct Shard;
    struct Located;
    using Record = detail::KeyRecord;
    static constexpr std::size_t kShards = 64;

    /// The key's shard, locked, and its record's index: created if absent when `create`
    /// (detail::kNoRecord at the bound; ClosedError once closed), else kNoRecord when absent.
    Located locate(std::string_view key, bool create);
    /// Under the shard's lock (`at`): the key's record index, created if absent; kNoRecord at the
    /// bound. At the bound the lock may be let go and taken again while other shards are searched.
    std::uint32_t find_or_create_locked(Located& at, std::string_view key, std::uint64_t hash);
    bool reserve_place() noexcept;
    /// Under the shard's lock: one fully idle partition dropped to make room. Other shards are
    /// only tried (never waited for); those busy are added to `busy` (bit = shard index).
    bool free_a_place_locked(Shard& shard, Nanos now, std::uint64_t& busy);
    /// Holding no shard lock: one fully idle partition of the `busy` shards dropped, each shard
    /// locked in turn.
    bool free_a_place_in(std::uint64_t busy, Nanos now);
    /// Under `shard`'s lock: its first fully idle partition dropped (at most 32 examined in all).
    bool drop_an_idle_locked(Shard& shard, Nanos now, int& examined);
    void drop_locked(Shard& shard, std::uint32_t index);
    /// When the key is (or will be, if nothing else happens) fully idle; kNever: in use.
    /// `poll`: in use in a way no give_back will report (a full limiter's queue or leases).
    Nanos full_at_locked(Record& r, bool& poll) const;
    /// The key's eviction check at `when` if sooner than its pending one, the timer set for it.
    void check_at_locked(Shard& shard, std::uint32_t index, Nanos when);
    /// The key's eviction check, due at `now`: drops it if idle for long enough, else sets the next.
    void check_locked(Shard& shard, std::uint32_t index, Nanos now, std::int64_t& evicted);
    std::shared_ptr<Limiter>& promote_locked(Record& r);
    /// Promotes the record if its 32-bit counts are at their limit; true when promoted.
    bool promoted_locked(Record& r);
    /// True when n permits were granted by the record's rule (with their tag). Not an
    /// optional<Outcome>: the caller builds its result in place instead of copying one.
    bool grant_locked(Record& r, std::int64_t n, Nanos now, std::int64_t& tag);
    i128 retry_after(const Record& r, std::int64_t n, Nanos now) const;
    /// An unpromoted record's available permits and when it is full: its rule's or its window's.
    std::int64_t available_locked(const Record& r, Nanos now) const;
    Nanos record_full_at(const Record& r) const;
    void schedule(Nanos when);

    std::shared_ptr<Clock> clock_;
    PerKeyTemplate tmpl_;       // its queue and amounts change under every shard lock (reconfigure)
    bool reconfigured_ = false; // (under every shard lock): keys promoted since take its queue
    const bool releases_;       // the rule's, asked once: every per-key lease reads it
    const Nanos idle_timeout_;
    const std::int64_t max_partitions_;
    std::unique_ptr<std::array<Shard, kShards>> shards_;
    std::atomic<std::int64_t> size_{0};
    std::atomic<bool> closed_{false};
    std::atomic<std::int64_t> dropped_successful_{0};
    std::atomic<std::int64_t> dropped_failed_{0};
    std::atomic<Nanos> scheduled_at_{kNever}; // the earliest check the clock's timer is set for
    std::uint32_t count_limit_ = 0xffffffffU;
    detail::ForkLinks<PerKeyLimiter> fork_links_;
};

} // namespace permits
