// Per-key limits in a shared-memory segment: a table of fixed-size records, one per key, in shards
// each behind a robust process-shared mutex (as the in-process per-key table has a lock per shard).
// A record holds the key's state words, changed by the engine's own arithmetic (a Rule, or the
// sliding window's), and for concurrency min(permit_limit, kKeyHolders) entries {holder, permits
// held} (a process holding any of the key's permits holds at least one: below kKeyHolders, every
// process the limit allows has an entry), whose sum
// is what the key's permits in use are: every change is one store, so a process killed in the
// middle leaves the record consistent, and the next locker goes on.
//
// Each process uses a key through its own Limiter for it (limiter_for(key)): the engine's queue,
// leases and waits, whose every state access locks the key's shard and finds (or makes) its record.
// A key idle for idle_timeout makes room for a new one when its shard or the table is full
// (evict_idle() drops them all).
#pragma once

#if defined(__linux__)

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "permits/limiter.hpp"
#include "permits/rule.hpp"
#include "permits/shm_limiters.hpp"
#include "permits/sliding_window.hpp"

namespace permits::shm {

inline constexpr std::size_t kKeyBytes = 32;   // a key's bytes in its record; a longer key is kept as its hashes
inline constexpr std::size_t kKeyHolders = 64; // processes holding one key's concurrency permits at the same moment

class KeyTable : public std::enable_shared_from_this<KeyTable> {
public:
    /// What every key's limiter is: kind and its values, as Params holds them (Kind::Concurrency:
    /// permit_limit; Kind::SlidingWindow: permit_limit, window, segments; ...).
    struct Template {
        Params params;
        QueueOptions queue;
        Nanos lease_ttl = 0; // concurrency
    };
    static std::shared_ptr<KeyTable> open(const std::shared_ptr<Store>& store, std::string_view name,
                                          const Template& tmpl, std::int64_t max_partitions, Nanos idle_timeout);
    /// The record bytes (key included) a key of this template takes.
    static std::uint64_t record_bytes(const Params& params) noexcept;

    /// A look at a table's data that writes nothing and needs no Store (an inspector's, shm_inspect.hpp).
    struct Census {
        std::string damage; ///< non-empty: what is wrong with the table (its counts are then not read)
        std::int64_t keys = 0;
        std::uint64_t bytes_per_key = 0;
        /// Concurrency keys: the permits each holder slot holds over all the keys (kMaxHolders counts,
        /// its current generation's entries only, as the engine counts them); else empty.
        std::vector<std::int64_t> held;
        /// The keys' parameters as they hold now (values 1 to 3 of the slot, with the amounts as
        /// last reconfigured).
        std::int64_t live[3] = {};
    };
    /// The census of the table in `slot` (a ready slot of Kind::KeyTable whose data lies in the segment).
    static Census census(const Segment& segment, const NamedSlot& slot);

    /// A limiter of this process for `key` (its encoded bytes), with `queue` (this process's
    /// options; the template's when not given).
    std::shared_ptr<SharedLimiter> limiter_for(std::string_view key, QueueOptions queue);
    std::shared_ptr<SharedLimiter> limiter_for(std::string_view key) { return limiter_for(key, tmpl_.queue); }

    // ---- the keys' limit (reconfigure): every key's, for every process ----
    /// Time-based kinds: `params` (the keys' kind with their window, period or segments as made)
    /// are every key's from now on, in every process: published in the table's head, taken on
    /// here at once and by every other process at its next use of the table (what each key has
    /// taken stays taken). std::invalid_argument for another kind, window, period or segments, or
    /// a concurrency table (its records hold an entry per holding process, sized by its limit).
    void reconfigure(const Params& params);
    /// Before each use: takes on the amounts another process published since (a load and a compare
    /// when none did).
    void catch_up() {
        if (slot_->generation.load(std::memory_order_acquire) != seen_.load(std::memory_order_relaxed)) [[unlikely]] {
            catch_up_slow();
        }
    }
    /// A limiter limiter_for() made takes on the keys' limit now and queue options `queue` (its
    /// queued requests the limit can never serve fail, those beyond the queue limit too).
    /// ClosedError once it is closed.
    void take_on(SharedLimiter& key_limiter, QueueOptions queue);
    /// The keys' limit now (as last taken on), and the rate where the kind has one (Rule::amounts).
    std::int64_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    void amounts(std::int64_t (&out)[2]) const noexcept;
    /// Live keys.
    std::int64_t size() const noexcept;
    std::int64_t max_partitions() const noexcept { return max_; }
    /// Drops every key idle for longer than the idle timeout; how many.
    std::int64_t evict_idle();
    /// Bytes of the segment this table takes, and per key.
    std::uint64_t bytes() const noexcept;
    std::uint64_t bytes_per_key() const noexcept { return record_; }

    // ---- what a key's limiter does, under the key's shard lock ----
    struct Key {
        std::string stored; ///< as the record holds it (a long key as its hashes)
        std::uint64_t hash = 0;
    };
    Key key_of(std::string_view key) const;
    bool take(const Key& key, std::int64_t n, Nanos now, std::int64_t& tag);
    /// Returns permits; true when a concurrency release gave some back.
    bool give_back(const Key& key, std::int64_t n, std::int64_t tag, Nanos now);
    /// Concurrency: true while the key's record has `permits` of this process under `tag`'s holding.
    bool still_held(const Key& key, std::int64_t tag, std::int64_t permits);
    /// Concurrency: gives back what the record still has of `permits` under `tag`, and lets go of the
    /// holder slot's uses of the rest; true when some came back.
    bool let_go(const Key& key, std::int64_t tag, std::int64_t permits, Nanos now);
    /// Leases of a key were found lost in this process (SharedLimiter): counted, and the store told.
    void note_lost(std::int64_t leases) noexcept;
    /// Leases of this table's keys found lost in this process so far.
    std::int64_t lost_leases() const noexcept { return lost_leases_.load(); }
    /// Time-based kinds: the key's record made anew, anchored just after `now` (every grant made so
    /// far is in a window that starts before it: their refunds give nothing back); false when the key
    /// has no record or is a concurrency key (its held permits stay held).
    bool reset(const Key& key, Nanos now);
    std::int64_t available(const Key& key, Nanos now);
    Nanos time_until(const Key& key, std::int64_t needed, Nanos now);
    Nanos full_at(const Key& key);
    std::unique_ptr<Projection> project(const Key& key);
    /// True when the table has no room for the key (it is absent, the table at its bound, no key idle).
    bool no_room(const Key& key);
    /// Concurrency: gives back dead holders' permits (rate-limited per process); true if any came back.
    bool reclaim(const Key& key);
    /// Why a request for n of a key's permits is refused now (ProcessLimit: permits are free but no
    /// holder slot or key entry is).
    Reason refusal(const Key& key, std::int64_t n);

    Store& store() const noexcept { return *store_; }
    const Template& tmpl() const noexcept { return tmpl_; }
    bool releases_permits() const noexcept { return tmpl_.params.kind == Kind::Concurrency; }

    KeyTable(std::shared_ptr<Store> store, NamedSlot& slot, const Template& tmpl, std::int64_t max_partitions,
             Nanos idle_timeout);

private:
    struct Record;
    struct HolderEntry;
    struct Found;
    std::uint32_t shard_of(const Key& key) const noexcept;
    /// A sliding window key's state over its record (Kind::SlidingWindow only), counting up to
    /// `limit` (the keys' limit now; the highest they had when checking for damage).
    SlidingWindowState window_of(Record& r) const noexcept { return window_of(r, limit()); }
    SlidingWindowState window_of(Record& r, std::int64_t limit) const noexcept;
    /// The banks of the keys' amounts (in the table's head) and their generation (the slot's).
    AmountBanks banks() const noexcept;
    void catch_up_slow();
    /// Takes on amounts `a` of generation `generation` (highest limit `highest`), every shard
    /// locked: no key of this process decides meanwhile.
    void adopt(const std::int64_t (&a)[2], std::int64_t highest);
    char* shard_records(std::uint32_t shard) const noexcept;
    Record& record_at(std::uint32_t shard, std::uint32_t slot) const noexcept;
    /// Under the shard's lock: the key's record, created if absent when `create` (nullptr at the bound).
    Record* find_locked(std::uint32_t shard, const Key& key, Nanos now, bool create);
    bool idle_locked(Record& r, Nanos now) const;
    /// Under the shard's lock: a record whose anchor or state breaks its invariants (damaged shared
    /// memory) is repaired to the safe side: its whole limit taken at `now` (concurrency: see held_locked).
    void repair_locked(Record& r, Nanos now) const noexcept;
    void drop_locked(Record& r) noexcept;
    void init_record(Record& r, const Key& key, Nanos anchor) const;
    std::int64_t held_locked(Record& r, Nanos mono_now, bool reclaim) const;
    bool take_locked_kind(const Key& key, std::int64_t n, Nanos now, std::int64_t& tag, Holding h);
    /// Concurrency, under the shard's lock: the entry of holder `h` in `r`, else a free one (tagged
    /// for `h` when `claim`); nullptr when every entry is another holder's.
    HolderEntry* entry_for_locked(Record& r, Holding h, bool claim) const;

    std::shared_ptr<Store> store_;
    NamedSlot* slot_; // its generation moves at each change of the keys' amounts
    char* data_;
    Template tmpl_;
    // The rule-driven kinds: the keys' rule, whose amounts change in place (adopt), and the same at
    // the highest limit the table had, which a state is checked against for damage (a state counted
    // under a higher limit is sound under a lower one: what was taken stays taken).
    std::shared_ptr<Rule> rule_;
    std::unique_ptr<Rule> most_;
    std::atomic<std::int64_t> limit_{0};
    std::atomic<std::int64_t> highest_{0};
    std::atomic<std::uint32_t> seen_{0}; // the generation taken on
    // The pid of the process taking on a change, 0 when none is (a forked child takes over its
    // parent's: the thread at it is not in the child).
    std::atomic<std::uint64_t> changing_{0};
    std::int64_t max_;
    Nanos idle_;
    std::uint32_t shards_;
    std::uint32_t slots_;
    std::uint64_t record_;
    std::uint32_t entries_; // concurrency: a record's holder entries
    std::atomic<Nanos> last_reclaim_{0};
    std::atomic<std::int64_t> lost_leases_{0};
    std::int64_t give_back_count(const Key& key, std::int64_t n, std::int64_t tag, Nanos now);
};

} // namespace permits::shm

#endif // __linux__
