// A named shared-memory segment (/dev/shm/permits.<name>) that several processes on one host map to
// share limiters' state. Everything in it is position-independent (offsets from the segment's base,
// never pointers), so each process may map it at its own address; the limiters' state words are the
// engine's own AtomicPairs, changed by the engine's own compare-and-swap loops (a 16-byte
// compare-and-swap works across processes on memory they share).
//
// Layout: a Header (magic, layout version, sizes, the clock kind, the hash seed, the named-limiter
// directory, the table of holders), then an arena from which named limiters and per-key tables take
// their memory once, at creation, for the segment's life. Creation of a name is the only place that
// takes the segment's lock: a robust, process-shared mutex (a process killed holding it hands it to
// the next locker, which finds the directory consistent: an entry is published by one store, last).
//
// Linux only (futexes, /proc for liveness); elsewhere the segment cannot be opened.
#pragma once

#if defined(__linux__)

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "permits/atomic_pair.hpp"
#include "permits/time.hpp"

namespace permits::shm {

inline constexpr std::uint64_t kMagic = 0x31737469'6d726570ULL; // "permits1" read as little-endian
inline constexpr std::uint32_t kLayoutVersion = 2;              // 2: a holder slot counts its uses (freed at zero)
inline constexpr std::size_t kNameBytes = 64;                   // a named limiter's name: at most 63 bytes
inline constexpr std::size_t kMaxNamed = 256;                   // named limiters and per-key tables in one segment
inline constexpr std::size_t kMaxHolders = 256; // processes holding concurrency permits at the same moment
inline constexpr std::uint64_t kReclaimingPid = 0xffffffffULL; // a holder slot's pid while its permits are drained

/// What a named slot holds. The numbers are part of the layout: never reuse one.
enum class Kind : std::uint32_t {
    Free = 0,
    TokenBucket = 1,
    FixedWindow = 2,
    SlidingWindow = 3,
    SlidingWindowCounter = 4,
    Concurrency = 5,
    KeyTable = 6, // a per-key table; params[0] is the kind of its keys' limiter
};

enum class ClockKind : std::uint32_t { Monotonic = 1, Manual = 2 };

/// A slot's parameters, compared field by field when another process opens the same name.
struct Params {
    Kind kind = Kind::Free;
    std::uint32_t count = 0;            ///< values used in `values`
    std::int64_t values[8] = {};        ///< in the order of `names`
    const char* const* names = nullptr; ///< not stored: the values' names, for messages
    std::uint32_t durations = 0;        ///< not stored: bit i set when value i is a duration (ns)
};

struct NamedSlot {
    std::atomic<std::uint32_t> ready; ///< 1 once the slot is published (written last, under the lock)
    Kind kind;
    std::uint32_t count;
    /// How many times the amounts were reconfigured (0: never; a slot made by an earlier version,
    /// where this word was padding, reads 0). Their values live in `values` beyond the parameters:
    /// [3, 4] at an odd generation, [5, 6] at an even one, so that a change writes the bank no
    /// reader reads, then moves the generation (live_amounts).
    std::atomic<std::uint32_t> generation;
    char name[kNameBytes];
    /// The parameters it was made with (`count` of them, 3 at most for a named limiter), then the
    /// amounts' two banks, then the highest limit ever published (0: never reconfigured).
    std::int64_t values[8];
    std::uint64_t offset; ///< the slot's data in the segment
    std::uint64_t bytes;
    Nanos anchor; ///< when the state's timeline starts: its creation
};

/// Where a slot keeps the amounts reconfigure changes: the two as made, a bank for odd generations
/// and one for even ones (two words each), the highest limit ever published (0: never), and the
/// generation (NamedSlot::generation). A named limiter's are in its slot's values; a per-key
/// table's (whose values hold the table's parameters) in the table's head (KeyTable).
struct AmountBanks {
    const std::atomic<std::uint32_t>* generation;
    const std::int64_t* made;
    std::int64_t* odd;
    std::int64_t* even;
    std::int64_t* highest;
};
/// One process that holds concurrency permits now: its index is the holder recorded in each
/// limiter's ledger. A process holds a slot only while it holds permits (or is taking some): the
/// slot is freed when its uses drop to zero, so the bound is on processes holding at the same moment.
struct HolderSlot {
    /// {tag: generation << 32 | pid (pid 0: free), uses: permits this holder holds plus takes under
    /// way; -1 while it is being freed}: one word, so that a take pins the slot only while it is
    /// still this holder's, and the slot is freed only with nothing pinned.
    AtomicPair word;
    std::atomic<std::uint64_t> start_time; ///< the process's start (clock ticks since boot); 0: not yet written
    std::atomic<std::uint64_t> pid_ns;     ///< its pid namespace's inode: liveness by pid only within ours
    std::atomic<Nanos> heartbeat;          ///< CLOCK_MONOTONIC at its last renewal

    std::uint64_t tag() const noexcept { return static_cast<std::uint64_t>(word.load().a); }
};

/// A holder slot as a take pinned it: its index and generation (a lease names both).
struct Holding {
    std::uint32_t index = 0;
    std::uint32_t generation = 0;
};

/// A lease's tag: the holder slot and its generation, so that only the process holding the lease
/// (not a forked child's copy, nor a holder reclaimed meanwhile) gives its permits back.
inline std::int64_t holder_tag(std::uint32_t holder, std::uint32_t generation) {
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(generation) << 16) | holder);
}

/// n rounded up to a multiple of `to` (the segment's pages, its slots' 64-byte boundaries).
inline std::uint64_t round_up(std::uint64_t n, std::uint64_t to) {
    return (n + to - 1) / to * to;
}

/// A holder slot's tag (HolderSlot::word's first value): its pid (0: free) and its generation.
inline std::uint64_t pid_of(std::uint64_t tag) {
    return tag & 0xffffffffULL;
}
inline std::uint64_t generation_of(std::uint64_t tag) {
    return tag >> 32;
}

/// The holding a lease's tag names.
inline Holding holding_of(std::int64_t tag) {
    return {static_cast<std::uint32_t>(tag & 0xffff),
            static_cast<std::uint32_t>(static_cast<std::uint64_t>(tag) >> 16)};
}

struct Header {
    std::uint64_t magic;
    std::uint32_t version;
    std::uint32_t header_bytes;
    std::uint64_t total_bytes;
    std::uint64_t capacity;
    ClockKind clock;
    std::uint32_t pair_bytes;         ///< sizeof(AtomicPair) in the creator's build (the spinlock fallback's differs)
    std::uint64_t hash_seed;          ///< one per segment: every process hashes a key to the same place
    std::atomic<std::uint32_t> ready; ///< 1 once the creator has initialised everything above
    std::atomic<std::uint32_t> epoch; ///< futex word: bumped when permits come back
    std::atomic<std::uint32_t> sleepers; ///< processes waiting on `epoch`
    std::uint32_t pad;
    std::uint64_t arena_offset;
    std::uint64_t arena_bytes;
    std::uint64_t arena_used; ///< under `lock`
    pthread_mutex_t lock;     ///< robust, process-shared: creating names and tables only
    NamedSlot named[kMaxNamed];
    HolderSlot holders[kMaxHolders];
};

/// The liveness of a process recorded in a holder slot, from /proc.
struct ProcessId {
    std::uint64_t pid = 0;
    std::uint64_t start_time = 0;
    std::uint64_t pid_ns = 0;
    /// This process, read now (after a fork, the child's).
    static ProcessId self();
};

/// Decides whether a holder is gone: its process no longer exists (or is a zombie, or its pid was
/// reused: another start time and a heartbeat older than `ttl`) when it shares our pid namespace;
/// else when its heartbeat is older than `ttl`.
bool holder_dead(const HolderSlot& slot, Nanos ttl, Nanos now_monotonic);

/// CLOCK_MONOTONIC: the one clock every process reads alike.
Nanos monotonic_now() noexcept;

/// This process's pid, cached (getpid() is a system call) and renewed in a forked child.
std::uint64_t current_pid() noexcept;

class Segment : public std::enable_shared_from_this<Segment> {
public:
    struct Options {
        std::uint64_t capacity = 10000;
        unsigned mode = 0600;
        ClockKind clock = ClockKind::Monotonic;
    };
    /// Opens /dev/shm/permits.<name>, creating it if absent: made as an unnamed file and given its
    /// name once complete, so no process sees it unfinished, a creator killed midway leaves nothing,
    /// and of processes creating it at once one publishes it and the others open that one.
    /// std::invalid_argument for a bad name,
    /// a segment of another layout or clock, a foreign, truncated or corrupted file;
    /// std::system_error (errno) for what the OS refuses (EACCES: another user's segment).
    static std::shared_ptr<Segment> open(const std::string& name, const Options& options);
    /// Opens the existing segment `name` to look at it (shm_inspect.hpp): never creates it
    /// (std::system_error ENOENT when absent), and takes it whatever its mode, capacity or clock; a
    /// damaged or foreign file is refused as open() refuses it (std::invalid_argument).
    static std::shared_ptr<Segment> inspect(const std::string& name);
    /// Removes the name; false if it did not exist.
    static bool unlink(const std::string& name);
    /// std::invalid_argument unless `name` is 1-100 of [A-Za-z0-9_.-], not starting with '.'.
    static void check_name(const std::string& name);
    /// The bytes a segment of this capacity maps.
    static std::uint64_t size_for(std::uint64_t capacity) noexcept;

    ~Segment();
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;

    Header& header() const noexcept { return *header_; }
    char* base() const noexcept { return reinterpret_cast<char*>(header_); }
    template <class T> T* at(std::uint64_t offset) const noexcept { return reinterpret_cast<T*>(base() + offset); }
    const std::string& name() const noexcept { return name_; }
    std::uint64_t size() const noexcept { return size_; }

    /// The published slot of `name`, if any (lock-free: a published slot's name, kind and parameters
    /// as made never change).
    NamedSlot* find(std::string_view name) const noexcept;
    /// The named slot for `name`: created with `params` (its `bytes` of data zeroed, then `init(data,
    /// anchor)` run before it is published) if absent, else checked against `params`
    /// (std::invalid_argument naming the first difference: "has permit_limit=10, not
    /// permit_limit=20"; another kind: "is a token_bucket, not a fixed_window").
    NamedSlot& named(std::string_view name, const Params& params, std::uint64_t bytes, Nanos anchor,
                     const std::function<void(char* data, Nanos anchor)>& init);

    /// Writes `amounts` as `slot`'s (a reconfigure, for every process: each takes them on at its
    /// next decision, and a process opening the name later takes them over its own); their
    /// generation. Under the segment's lock: one change at a time, and a writer killed midway left
    /// only a bank no reader reads.
    std::uint32_t publish_amounts(NamedSlot& slot, const std::int64_t (&amounts)[2]);
    /// The same, wherever the banks are (moving `generation`, their slot's). Where moving the
    /// generation must go with a change of the state (a concurrency limit's available permits):
    /// under the lock, `prepare()`, the next bank written, then `commit(was)` (the generation
    /// before), which moves the generation to next_generation(was).
    std::uint32_t publish_amounts(const AmountBanks& banks, std::atomic<std::uint32_t>& generation,
                                  const std::int64_t (&amounts)[2], const std::function<void()>& prepare = {},
                                  const std::function<void(std::uint32_t was)>& commit = {});

    /// Pins holder slot for this process's take of n permits: its own slot (its uses raised by n), or
    /// a free one claimed (with the dead holders' slots reclaimed first when none is free: holder_dead
    /// with `reclaim_ttl`). False, and nothing pinned, when every slot is held by a live process.
    bool pin(std::int64_t n, Nanos reclaim_ttl, Holding& out);
    /// Lowers the uses of `h` by n (permits given back, or a take that failed), if the slot is still
    /// this process's of that generation; at zero the slot is freed (a new generation).
    void unpin(Holding h, std::int64_t n) noexcept;
    /// True when slot `h.index` is this process's, of generation `h.generation`.
    bool holds(Holding h) const noexcept;
    /// This process's slot, if it holds one now (claims nothing).
    bool current(Holding& out) const noexcept;
    /// True when a take by this process could have a slot now: it holds one, or one is free.
    bool slot_available() const noexcept;
    /// The generation of holder slot `index` (in its tag): a lease names it, so that a lease of a
    /// holder reclaimed meanwhile gives nothing back.
    std::uint32_t holder_generation(std::uint32_t index) const noexcept;
    /// Frees a dead holder's slot once its permits are back (the reclaimer's last step).
    void free_holder(std::uint32_t index, std::uint64_t seen_tag) noexcept;
    /// If holder `index` is dead (holder_dead with `ttl`): reserves its slot, gives back its permits in
    /// every named concurrency limiter, and frees the slot (a new generation: its leases and per-key
    /// entries go stale). True if it did.
    bool reclaim_holder(std::uint32_t index, Nanos ttl);
    /// Renews this process's heartbeat (if it holds a slot).
    void heartbeat() noexcept;

    /// Permits came back: wakes the processes waiting on the epoch.
    void notify() noexcept;
    /// Waits on the epoch (seen as `seen`) for at most `timeout` ns; counted as a sleeper.
    void wait_epoch(std::uint32_t seen, Nanos timeout) noexcept;

private:
    /// Takes over the mapping `header` (`size` bytes): moves it between guard pages, then checks its
    /// table of holders (std::invalid_argument, the mapping let go, when a slot's state is impossible).
    Segment(std::string name, Header* header, std::uint64_t size);
    std::string name_;
    Header* header_;
    std::uint64_t size_;
    bool guarded_ = false; ///< the mapping lies between guard pages of its own (unmapped with it)
    /// Unmaps the segment (and its guard pages).
    void release_mapping() noexcept;
    /// Ends the freeing of slot `index` (seen as `releasing`: its uses -1): clears it, then frees it.
    void finish_release(std::uint32_t index, Pair releasing) noexcept;
    /// pid << 32 | holder index + 1 of the slot this process last claimed (a hint: the slot's own
    /// word decides); a forked child claims anew.
    std::atomic<std::uint64_t> claimed_{0};
};

/// The generation after `was` (past 2^32 - 1 changes it goes on at 2: never 0, which means "as made").
inline std::uint32_t next_generation(std::uint32_t was) noexcept {
    return was == 0xffffffffU ? 2 : was + 1;
}

/// A named limiter's: values 0 and 1 as made, [3, 4] and [5, 6], and 7.
AmountBanks banks_of(NamedSlot& slot) noexcept;

/// The amounts of `slot` now (values 0 and 1 as made, or as last reconfigured), into `out`; their
/// generation. Lock-free: a bank read while another process moves the generation is read again.
std::uint32_t live_amounts(const NamedSlot& slot, std::int64_t (&out)[2]) noexcept;
/// The same, wherever the banks are.
std::uint32_t live_amounts(const AmountBanks& banks, std::int64_t (&out)[2]) noexcept;
/// The highest limit the banks ever held (as made, or published since).
std::int64_t highest_of(const AmountBanks& banks) noexcept;
/// The limit the bank of `generation` holds (as written: a bank not yet published may be read).
std::int64_t bank_limit(const AmountBanks& banks, std::uint32_t generation) noexcept;

/// Which of a kind's parameters are amounts reconfigure may change (bit i: value i, 0 and 1 at
/// most: Rule::amounts): the token bucket's limit and rate, the windows' and concurrency's limit.
/// Once a slot was reconfigured, these are not compared on opening.
std::uint32_t amounts_of(Kind kind) noexcept;
/// The same for a slot's parameters: a per-key table's are its keys' kind's, one value on (its
/// parameters start with that kind).
std::uint32_t amounts_of(Kind kind, const std::int64_t* values) noexcept;

/// `slot`'s parameters as they hold now: as made, with the amounts as last reconfigured; their
/// generation. `highest` is the highest limit (value 0) the slot ever had: a state may count up to
/// it (a limit lowered keeps what was taken), so a check for damage reads the state against it.
std::uint32_t live_values(const NamedSlot& slot, std::int64_t (&values)[8], std::int64_t& highest) noexcept;

/// Locks a robust process-shared mutex; a lock whose holder died is made consistent (the data it
/// guards is always consistent: see the callers) and taken.
class RobustLock {
public:
    explicit RobustLock(pthread_mutex_t* mu);
    ~RobustLock();
    RobustLock(const RobustLock&) = delete;
    RobustLock& operator=(const RobustLock&) = delete;
    /// Initialises `mu` as robust and process-shared (the segment's creator, once).
    static void init(pthread_mutex_t* mu);

private:
    pthread_mutex_t* mu_;
};

} // namespace permits::shm

#endif // __linux__
