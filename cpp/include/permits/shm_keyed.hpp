// This process's side of a shared per-key table (permits.shm's SharedKeyedLimiter): the keys it
// uses, with its counts for each, and a key's own Limiter (shm_key_table.hpp, limiter_for) only
// where one is needed.
//
// A time-based key (token bucket, fixed window, sliding window and its counter) is acquired from
// its record in the segment directly, as the in-process per-key table acquires from its records:
// no Limiter is made for it until one of its requests has to queue (a wait), and from then on a
// request goes through that Limiter while requests are queued in it, so that none barges ahead of
// them. A concurrency key always goes through its Limiter, made at its first request: the Limiter
// keeps track of this process's leases by holding (SharedLimiter), which a lease the segment
// forgot is taken back or told lost by.
//
// The keys kept here are bounded (kKeysKept, least recently used first out): a key dropped has its
// counts added to the totals, and is dropped only while nothing is queued in its Limiter and
// nothing else holds that Limiter (a lease, a wait).
#pragma once

#if defined(__linux__)

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "permits/limiter.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_limiters.hpp"

namespace permits::shm {

class KeyedLimiter : public std::enable_shared_from_this<KeyedLimiter> {
public:
    /// Keys this process keeps (each with its counts, and its Limiter if it has one).
    static constexpr std::size_t kKeysKept = 4096;

    explicit KeyedLimiter(std::shared_ptr<KeyTable> table, std::size_t keys_kept = kKeysKept);
    ~KeyedLimiter();
    KeyedLimiter(const KeyedLimiter&) = delete;
    KeyedLimiter& operator=(const KeyedLimiter&) = delete;

    struct Result {
        Outcome outcome;
        /// Set when the key's Limiter decided (its leases are that Limiter's); else the key's record
        /// did, and a refund goes back through give_back(key, ...).
        std::shared_ptr<SharedLimiter> limiter;
    };
    /// The outcome of acquire(n) for `key` (its encoded bytes): never waits.
    Result acquire(std::string_view key, std::int64_t n);
    /// Granted now, or nullopt with nothing counted (the caller goes on to the key's Limiter's queue).
    std::optional<Result> try_now(std::string_view key, std::int64_t n);
    /// The key's Limiter, made if it has none yet: for the requests that may queue.
    std::shared_ptr<SharedLimiter> limiter(std::string_view key);
    /// Gives back a grant of the key's record (a refund of a time-based grant).
    void give_back(std::string_view key, std::int64_t n, std::int64_t tag);
    /// The key's time-based state made anew for every process (KeyTable::reset), and this process's
    /// queue for it served; false when there was nothing to forget.
    bool reset(std::string_view key);
    /// Every key's limit from `params` on, for every process (KeyTable::reconfigure), and `queue`
    /// this process's keys' queue options: its keys' queued requests the new limit can never serve
    /// fail (LimitReached), those beyond a lower queue limit too (QueueFull), a raise serves them.
    void reconfigure(const Params& params, QueueOptions queue);
    /// The keys' queue options in this process.
    QueueOptions queue_options();

    /// The key's statistics: permits available (every process's grants counted), and this
    /// process's queued permits and lease counts for it since it has been kept here.
    Statistics statistics(std::string_view key);
    /// Over the keys kept here, with the counts of the keys dropped.
    Statistics totals();
    /// Fails every kept key's queued requests (reason Closed); later calls throw ClosedError.
    void close();
    bool closed() const noexcept { return closed_.load(); }

    KeyTable& table() const noexcept { return *table_; }
    const std::shared_ptr<KeyTable>& table_ptr() const noexcept { return table_; }
    /// Keys kept now, and of them those with a Limiter: for tests.
    std::size_t kept() noexcept;
    std::size_t limiters() noexcept;

    /// An opaque tag for the bindings (a registry id); the engine never reads it.
    std::uint64_t binding_tag = 0;

private:
    struct Entry {
        std::string bytes; ///< the key's encoded bytes
        KeyTable::Key key; ///< as the table holds it
        std::int64_t successful = 0;
        std::int64_t failed = 0;
        std::shared_ptr<SharedLimiter> limiter;
    };
    struct Probe {
        std::string_view bytes;
        std::uint64_t hash;
        bool operator==(const Probe& o) const noexcept { return bytes == o.bytes; }
    };
    struct ProbeHash {
        std::size_t operator()(const Probe& p) const noexcept { return static_cast<std::size_t>(p.hash); }
    };
    /// What is kept: most recently used first.
    struct Kept {
        std::list<Entry> order;
        std::unordered_map<Probe, std::list<Entry>::iterator, ProbeHash> index;
    };
    class Guard;

    /// Under the guard: the key's entry, made (and the least recently used dropped past the bound)
    /// if absent; moved to the front.
    Entry& entry_locked(std::string_view key, std::vector<std::shared_ptr<SharedLimiter>>& dropped);
    /// Under the guard: the entry's Limiter, made if absent.
    const std::shared_ptr<SharedLimiter>& limiter_locked(Entry& e);
    /// Under the guard: whether a request must go through the entry's Limiter.
    bool through_limiter(const Entry& e) const noexcept;
    /// Under the guard: the entry's counts, added to the totals of dropped keys.
    void drop_locked(std::list<Entry>::iterator it, std::vector<std::shared_ptr<SharedLimiter>>& dropped);
    /// The key's Limiter in this process, if it has one, serves its queue again.
    void recheck_kept(std::string_view key);
    /// Why a request of the record refused is refused, and when to retry (Limiter::acquire's).
    Outcome refused(const KeyTable::Key& key, std::int64_t n, Nanos now);

    std::shared_ptr<KeyTable> table_;
    const std::size_t keys_kept_;
    QueueOptions queue_; // under the guard: the keys' queue options in this process
    const bool direct_;  // time-based kinds: grants from the record
    std::atomic<bool> closed_{false};
    // A spin lock owned by a pid, as SharedLimiter's: a forked child takes over one its parent's
    // thread held (and starts from no kept keys: the parent's may be torn mid-change).
    std::atomic<std::uint64_t> lock_{0};
    std::unique_ptr<Kept> kept_;
    std::int64_t dropped_successful_ = 0;
    std::int64_t dropped_failed_ = 0;
};

} // namespace permits::shm

#endif // __linux__
