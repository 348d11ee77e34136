// Limiters whose state lives in a shared-memory segment (shm_segment.hpp): the engine's own limiter
// classes on state words in the segment (token bucket, fixed window, sliding window counter: their
// Rule's compare-and-swap loop; the sliding window: its head and ring), and a concurrency limiter
// that records who holds its permits, so that a process that dies holding them gives them back.
//
// Queues stay per process (a Limiter's own). A process whose requests queue in a concurrency limiter
// has its Store's watcher thread sleep on the segment's epoch futex, which every release bumps: a
// release in one process serves the queue in another. Time-based kinds need no watcher: their
// queues are served by the engine's timers, from the shared state.
#pragma once

#if defined(__linux__)

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/limiter.hpp"
#include "permits/shm_segment.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

namespace permits::shm {

/// What a store's watcher thread serves when permits come back in another process.
class Watched {
public:
    virtual ~Watched() = default;
    /// Requests of this process are queued here.
    virtual bool queued() const noexcept = 0;
    /// Gives back dead holders' permits (rate-limited), then serves the queue.
    virtual void poll() = 0;
    /// At each heartbeat: takes back, or tells lost, what the segment forgot of this process's leases.
    virtual void renew() {}
};

class Store;

/// The shared limiters that are not the engine's own classes: a named concurrency limiter (its
/// holders recorded) and a key's limiter of a per-key table.
///
/// Their concurrency leases are kept track of in this process, by the holding they were taken under
/// (holder slot and generation: the lease's tag), so that a holding the segment forgot (this process
/// judged dead while paused past lease_ttl, its slot reclaimed) is noticed, at the next heartbeat or
/// when a lease is looked at: its permits are taken again under a new holding (the leases go on, and
/// give back there), or, when the limit no longer allows it, its leases are lost: lost(tag) is true,
/// their release gives nothing back, and they are counted (lost_leases) and the store told.
class SharedLimiter : public Limiter, public Watched {
public:
    using Limiter::Limiter;
    bool shares_state() const noexcept override { return true; }
    bool lost(std::int64_t tag) override;
    void renew() override;
    /// Leases of this limiter found lost in this process so far.
    std::int64_t lost_leases() const noexcept { return lost_leases_.load(); }
    /// A named concurrency limiter: `permit_limit` for every process from now on (what is held stays
    /// held: a lower limit holds as permits come back), `queue` this process's queue options.
    /// std::logic_error for any other shared limiter (a key's limit changes with its table's).
    virtual void reconfigure_limit(std::int64_t permit_limit, QueueOptions queue);
    /// A lease's release (Limiter::give_back); true when the lease was lost: nothing was given back.
    bool give_back_lease(std::int64_t n, std::int64_t tag);
    /// n of a lease's permits given back while the lease goes on (its settle); true when lost.
    bool give_back_part(std::int64_t n, std::int64_t tag);

protected:
    /// Has `store`'s watcher serve this limiter and renew the process's heartbeat every
    /// `heartbeat_every`: once (a holder's first grant), or again and kicked (`always`: a request queued).
    void watch(Store& store, Nanos heartbeat_every, bool always);

    bool take(std::int64_t n, Nanos now, std::int64_t& tag) final;
    void give_back_at(std::int64_t n, std::int64_t tag, Nanos now) final;
    // ---- what each kind does with the shared state ----
    /// Takes n permits (concurrency: under a holding of this process, which `tag` names).
    virtual bool take_held(std::int64_t n, Nanos now, std::int64_t& tag) = 0;
    virtual void give_back_held(std::int64_t n, std::int64_t tag, Nanos now) = 0;
    /// True while the shared state still has `permits` of this process under the holding of `tag`.
    virtual bool still_held(std::int64_t tag, std::int64_t permits) = 0;
    /// The state no longer has them: gives back what it still has of them, and lets go of the rest's
    /// uses of the holder slot (if it is still this process's).
    virtual void let_go(std::int64_t tag, std::int64_t permits) = 0;
    /// `leases` were just found lost (counted already): tells whoever listens.
    virtual void told_lost(std::int64_t leases) = 0;

private:
    /// The leases this process holds under one holding.
    struct Group {
        std::int64_t origin = 0; ///< the tag they were granted under (their leases carry it)
        std::int64_t now = 0;    ///< the tag they are held under now (another after a take-back)
        std::int64_t permits = 0;
        std::int64_t leases = 0; ///< 0: a free entry
        bool lost = false;
    };
    static constexpr std::size_t kGroups = 32; // holdings with leases at once: one, but for take-backs
    class Guard;
    Group* find_locked(std::int64_t origin) noexcept;
    /// give_back_at's work (`ends`: the lease's last permits; else a part, the lease goes on); true
    /// when the lease was lost.
    bool give_back_tracked(std::int64_t n, std::int64_t tag, Nanos now, bool ends = true);
    /// Under the guard: whether the group's permits are (still, or again) held; false: lost.
    bool keep_locked(Group& g);

    std::atomic<bool> watching_{false};
    // A spin lock owned by a pid: a forked child takes over one its parent's thread held (and drops
    // the parent's groups: its copies of the parent's leases give nothing back).
    std::atomic<std::uint64_t> lock_{0};
    std::uint64_t groups_pid_ = 0;
    Group groups_[kGroups];
    std::atomic<std::int64_t> lost_leases_{0};
};

/// A segment opened by this process, with the clock its limiters run on and its watcher thread.
class Store : public std::enable_shared_from_this<Store> {
public:
    Store(std::shared_ptr<Segment> segment, std::shared_ptr<Clock> clock);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    Segment& segment() const noexcept { return *segment_; }
    const std::shared_ptr<Clock>& clock() const noexcept { return clock_; }
    /// The time a new state is anchored at.
    Nanos now() const noexcept { return clock_->now(); }

    std::shared_ptr<TokenBucket> token_bucket(std::string_view name, const TokenBucketRule& rule, QueueOptions queue);
    std::shared_ptr<FixedWindow> fixed_window(std::string_view name, const FixedWindowRule& rule, QueueOptions queue);
    std::shared_ptr<SlidingWindowCounter>
    sliding_window_counter(std::string_view name, const SlidingWindowCounterRule& rule, QueueOptions queue);
    std::shared_ptr<SlidingWindow> sliding_window(std::string_view name, std::int64_t permit_limit, Nanos window,
                                                  std::int64_t segments, QueueOptions queue);
    std::shared_ptr<SharedLimiter> concurrency(std::string_view name, std::int64_t permit_limit, Nanos lease_ttl,
                                               QueueOptions queue);

    /// Has the watcher serve `w` while it has queued requests (idempotent), and renew this process's
    /// heartbeat at least every `heartbeat_every`.
    void watch(const std::shared_ptr<Watched>& w, Nanos heartbeat_every);

    /// Leases of this store were found lost: wakes wait_lost().
    void note_lost() noexcept;
    /// How many times leases were found lost (the word wait_lost() waits on).
    std::uint32_t lost_seq() const noexcept { return lost_seq_.load(); }
    /// Waits until lost_seq() differs from `seen`, at most `timeout` ns (a process-private futex).
    void wait_lost(std::uint32_t seen, Nanos timeout) const noexcept;

private:
    struct WatcherState;
    std::shared_ptr<WatcherState> watcher();

    std::shared_ptr<Segment> segment_;
    std::shared_ptr<Clock> clock_;
    std::mutex mu_;
    std::shared_ptr<WatcherState> watcher_; // this process's (a forked child makes its own)
    std::uint64_t watcher_pid_ = 0;
    std::atomic<std::uint32_t> lost_seq_{0};
};

/// A named concurrency limiter's data in the segment, and the one protocol that changes it.
///
/// The state word is {seq << 16 | pending holder + 1, available << 32 | pending delta}: every change
/// is one compare-and-swap that also records which holder's ledger entry it changes and by how
/// much. Whoever sees a pending change next (its author, or any other process) applies it to the
/// ledger, idempotently (an entry remembers the last seq applied), and clears it. So the ledger
/// always adds up to the permits held, even when a process is killed between the two steps.
///
/// The limit may change (reconfigure): the change is one such swap too, of the available permits by
/// the difference (below zero while more are held than a lowered limit), naming no holder but the
/// limit (kLimitChange) and the generation it moves the slot's amounts on from. Whoever sees it
/// next moves that generation (the bank of the new limit was written before the swap), then
/// clears it: the limit and the available permits change together for every process.
struct ConcurrencyView {
    AtomicPair* state = nullptr;
    std::atomic<Nanos>* full_since = nullptr;
    char* ledger = nullptr;          ///< kMaxHolders AtomicPairs {permits held, last seq applied}
    std::int64_t limit = 0;          ///< as made: the limit when `named_slot` is not given
    NamedSlot* named_slot = nullptr; ///< whose amounts hold the limit now (reconfigure), if given

    static std::uint64_t bytes() noexcept;
    static ConcurrencyView over(char* data, std::int64_t limit, NamedSlot* named_slot = nullptr) noexcept;
    void init(Nanos anchor) const;
    /// No limit change ever reached the slot's amounts (or there is no slot): `limit` holds.
    bool never_changed() const noexcept;
    /// The limit now: the slot's amounts' (as made, or as reconfigured).
    std::int64_t limit_now() const noexcept;
    /// The highest limit it ever had: what one holder's count may reach (a lower limit keeps what is held).
    std::int64_t highest() const noexcept;
    /// The limit changed from generation `was` of the slot's amounts to `permit_limit` (whose bank
    /// is written): the available permits by the difference, and the generation moved on, as one
    /// change. Under the segment's lock (Segment::publish_amounts' commit), nothing pending.
    void change_limit(std::uint32_t was, std::int64_t permit_limit) const noexcept;

    AtomicPair& entry(std::uint32_t holder) const noexcept {
        return *reinterpret_cast<AtomicPair*>(ledger + holder * sizeof(AtomicPair));
    }
    /// Takes n permits for `holder`; false if fewer are available.
    bool take(std::uint32_t holder, std::int64_t n) const noexcept;
    /// Gives back up to n permits of `holder` (no more than its ledger holds); the count given.
    std::int64_t give_back(std::uint32_t holder, std::int64_t n, Nanos now) const noexcept;
    /// As take and give_back for this process's holding `h` (its slot index is the ledger's holder),
    /// doing nothing (false, 0) once `segment` says the slot is no longer that holding. Checked at the
    /// step that changes the state: the ledger counts by slot, not by generation, so a holding
    /// reclaimed before that step (its permits drained) must not touch the slot's next holder's count,
    /// and one reclaimed after it has its change drained with the rest.
    bool take_as(const Segment& segment, Holding h, std::int64_t n) const noexcept;
    std::int64_t give_back_as(const Segment& segment, Holding h, std::int64_t n, Nanos now) const noexcept;
    std::int64_t available() const noexcept;
    std::int64_t held_by(std::uint32_t holder) const noexcept;
    /// A look that writes nothing (an inspector's): what is available and what each holder holds
    /// (`held`: kMaxHolders counts), a change left pending counted as applied. Read between two
    /// equal reads of the state where other processes let it be, else the last view (slightly stale).
    void peek(std::int64_t& available, std::int64_t* held) const noexcept;
    /// std::invalid_argument (`where`: the segment and the name) unless the state keeps its
    /// invariants: available and every holder's count within [0, limit], a pending change's holder
    /// within the ledger and its delta within the limit, and (on a snapshot no other process changed)
    /// the ledger adding up to the limit with what is available, no entry ahead of the state. A
    /// change left pending is applied first, as any take would; nothing is repaired here.
    void check(const std::string& where) const;
    /// Applies a pending change (if any) to the ledger and clears it (one naming no holder of the
    /// ledger, a damaged state, is cleared without touching the ledger).
    void settle(Pair s) const noexcept;
    /// The state word with nothing pending (settling what is), as it really is: never a hint.
    Pair settled() const noexcept;

    /// Gives back every permit of `holder` while its slot (`slot`) is still reserved as `reserved` by
    /// the reclaim draining it: a second reclaimer that took the reservation over drains nothing of
    /// the slot's next holder, should the first have freed it meanwhile. The count given.
    std::int64_t drain(std::uint32_t holder, const HolderSlot& slot, std::uint64_t reserved, Nanos now) const noexcept;

private:
    /// (with `slot`: only while the slot's tag is `tag`, checked at the step that changes the state)
    bool take_if(std::uint32_t holder, std::int64_t n, const HolderSlot* slot, std::uint64_t tag) const noexcept;
    std::int64_t give_back_if(std::uint32_t holder, std::int64_t n, Nanos now, const HolderSlot* slot,
                              std::uint64_t tag) const noexcept;
};

/// Gives back every permit holder `index` holds in every named concurrency limiter of the segment (it
/// is dead and its slot reserved as `reserved`: it is about to be freed; per-key entries go stale with
/// the slot's generation, without a scan of the tables).
void drain_holder(Segment& segment, std::uint32_t index, std::uint64_t reserved);

/// Parameters of a slot, with their names for messages.
Params params_of(const TokenBucketRule& rule);
Params params_of(const FixedWindowRule& rule);
Params params_of(const SlidingWindowCounterRule& rule);
Params params_of_sliding(std::int64_t permit_limit, Nanos window, std::int64_t segments);
Params params_of_concurrency(std::int64_t permit_limit, Nanos lease_ttl);

} // namespace permits::shm

#endif // __linux__
