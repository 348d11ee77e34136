// libFuzzer target over a shared-memory segment's bytes (shm_segment.hpp, shm_limiters.hpp,
// shm_key_table.hpp): damaged state is refused or repaired, never used beyond its limit, and never
// followed outside the segment.
//
// Once per process the harness makes a real segment (/dev/shm/permits.fuzz-shm-<pid>, a ManualClock
// one) with a name of each kind (token bucket, fixed window, sliding window, sliding window counter,
// concurrency) and a per-key table of each kind with three keys, takes permits in each (two of the
// concurrency name and of each concurrency key are still held, by a holder that stays alive: this
// process), and keeps the file's bytes as the image. Each input then:
//
//   1. restores the image, opens it (the first mapping) with every name and key, and takes a permit
//      of each: this process's holder slot and ledger and key entries now exist, to be damaged too;
//   2. writes its patches over the file: up to 16, each aimed at a region (a header field, a named
//      slot, a holder slot, a name's state, a table's head, a table's record, mostly a key's, or
//      anywhere) with raw bytes, an interesting 8- or 4-byte value (limits, -1, 65534, INT64_MAX,
//      kMaxTime, this pid, ...) or a small delta to a word. The segment's locks and its `ready` word
//      are left alone (a lock word naming a thread that never unlocks hangs every process: robust
//      mutexes are no defence against that; a `ready` of 0 makes open() wait 2 s for the creator);
//   3. looks at the segment as `python -m permits shm show` does (shm::describe: read or refused,
//      never a crash), then opens it again (the second mapping), then every name and table, as a new
//      process would: each may be refused with std::invalid_argument (a damaged header or state) or
//      std::system_error, and nothing else may be thrown. A name or table refused is used no more;
//   4. runs a program of up to 64 operations on what was accepted, through either mapping's limiter
//      (the first one's holds the permits of step 1; it is used only while no patch changed what says
//      which state a name or key is: see identity()): acquire, try_now, a release or refund of an
//      earlier grant, clock advances (a few ns, a segment, a window, past the idle timeout),
//      available_permits, statistics, idle_duration, evict_idle, and a probe of retry_after;
//   5. opens every name accepted again from a third mapping: a state the engine left is never refused.
//
// Invariants (a failure is __builtin_trap()), on what is granted after the damage (what a damaged state
// forgot cannot be told from what it never had): a concurrency name or key never has more of those
// permits held than its limit; the windowed kinds never grant, less what was refunded, more than twice
// their limit in any window-long interval, and a token bucket more than its limit plus one period's
// tokens (from any state within its invariants); available permits are within 0..limit; a refusal's
// retry_after, with nothing queued, is enough; no exception but at open. AddressSanitizer and UBSan
// catch memory errors and overflow; the segment lies between guard pages of 1 MiB (Segment), so an
// access just outside it faults. Linux only (elsewhere an empty target).
//
// Build and run: scripts/fuzz [seconds] (it runs every target; see tests/fuzz/README.md).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>

#if defined(__linux__)

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "permits/shm_inspect.hpp"
#include "permits/shm_key_table.hpp"
#include "permits/shm_limiters.hpp"

#include "fuzz_support.hpp"

namespace {

using permits::Limiter;
using permits::Nanos;
using permits::Outcome;
using permits_fuzz::ll;
namespace shm = permits::shm;

constexpr Nanos kSec = 1000000000;
constexpr Nanos kStart = 5 * kSec; // the clock when the image was made
constexpr std::int64_t kLimit = 4;
constexpr std::int64_t kPerPeriod = 2;
constexpr std::int64_t kSegments = 4;
constexpr std::int64_t kConcurrencyLimit = 3;
constexpr Nanos kIdle = 3600 * kSec;
constexpr Nanos kLeaseTtl = 3600 * kSec;
constexpr std::int64_t kPartitions = 4;
// The layout of a per-key table (shm_key_table.cpp): a 64-byte head, then a 64-byte lock per shard,
// then the records.
constexpr std::uint64_t kTableHead = 64;
constexpr std::uint64_t kLockBytes = 64;

enum class What { TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter, Concurrency };
constexpr What kKinds[] = {What::TokenBucket, What::FixedWindow, What::SlidingWindow, What::SlidingWindowCounter,
                           What::Concurrency};
constexpr const char* kNames[] = {"tb", "fw", "sw", "swc", "c"};
constexpr const char* kTables[] = {"ktb", "kfw", "ksw", "kswc", "kc"};
const std::string kKeys[] = {"a", "b", std::string(40, 'k')}; // (the last one longer than a record keeps)

const permits::QueueOptions kNoQueue{0, permits::QueueOrder::OldestFirst};

std::shared_ptr<Limiter> open_named(shm::Store& store, What what, const char* name) {
    switch (what) {
    case What::TokenBucket:
        return store.token_bucket(name, permits::TokenBucketRule(kLimit, kPerPeriod, kSec), kNoQueue);
    case What::FixedWindow: return store.fixed_window(name, permits::FixedWindowRule(kLimit, kSec), kNoQueue);
    case What::SlidingWindow: return store.sliding_window(name, kLimit, kSec, kSegments, kNoQueue);
    case What::SlidingWindowCounter:
        return store.sliding_window_counter(name, permits::SlidingWindowCounterRule(kLimit, kSec), kNoQueue);
    case What::Concurrency:
    default: return store.concurrency(name, kConcurrencyLimit, kLeaseTtl, kNoQueue);
    }
}

shm::Params params_of(What what) {
    switch (what) {
    case What::TokenBucket: return shm::params_of(permits::TokenBucketRule(kLimit, kPerPeriod, kSec));
    case What::FixedWindow: return shm::params_of(permits::FixedWindowRule(kLimit, kSec));
    case What::SlidingWindow: return shm::params_of_sliding(kLimit, kSec, kSegments);
    case What::SlidingWindowCounter: return shm::params_of(permits::SlidingWindowCounterRule(kLimit, kSec));
    case What::Concurrency:
    default: return shm::params_of_concurrency(kConcurrencyLimit, kLeaseTtl);
    }
}

std::shared_ptr<shm::KeyTable> open_table(const std::shared_ptr<shm::Store>& store, What what, const char* name) {
    shm::KeyTable::Template tmpl{params_of(what), kNoQueue, kLeaseTtl};
    return shm::KeyTable::open(store, name, tmpl, kPartitions, kIdle);
}

std::int64_t limit_of(What what) {
    return what == What::Concurrency ? kConcurrencyLimit : kLimit;
}

/// A byte range of the segment the patches never touch.
struct Range {
    std::uint64_t from;
    std::uint64_t to;
};

/// The segment as it was made, and where its parts lie.
struct Image {
    std::string name;
    shm::Segment::Options options{1, 0600, shm::ClockKind::Manual};
    std::vector<char> bytes;
    char* file = nullptr; ///< this harness's own mapping of the file, written to restore and damage it
    std::uint64_t size = 0;
    std::uint64_t named = 0;   ///< Header::named
    std::uint64_t holders = 0; ///< Header::holders
    std::uint64_t slots[5] = {};
    std::uint64_t slot_bytes[5] = {};
    std::uint64_t tables[5] = {};
    std::uint64_t table_bytes[5] = {};
    std::uint64_t records[5] = {}; ///< the first record of each table
    std::uint64_t record_bytes[5] = {};
    std::uint64_t record_count[5] = {};
    std::vector<std::uint64_t> live[5]; ///< each table's records in use (its keys')
    std::vector<Range> untouched;       ///< the locks and `ready`
};

bool overlaps(const Image& img, std::uint64_t from, std::uint64_t to) {
    return std::any_of(img.untouched.begin(), img.untouched.end(),
                       [&](const Range& r) { return from < r.to && r.from < to; });
}

/// Removes the segments earlier runs of this harness left behind (a crash skips the unlink at exit).
void remove_stale_segments() {
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) {
        return;
    }
    const std::string prefix = "permits.fuzz-shm-";
    while (const dirent* e = ::readdir(dir)) {
        const std::string file = e->d_name;
        if (file.rfind(prefix, 0) != 0) {
            continue;
        }
        const long pid = std::strtol(file.c_str() + prefix.size(), nullptr, 10);
        if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
            shm::Segment::unlink(file.substr(std::string("permits.").size()));
        }
    }
    ::closedir(dir);
}

Image& image() {
    static Image* img = [] {
        remove_stale_segments();
        auto* m = new Image; // (never freed: the process's whole life)
        m->name = "fuzz-shm-" + std::to_string(::getpid());
        shm::Segment::unlink(m->name);
        std::atexit([] { shm::Segment::unlink(image().name); });
        {
            auto clock = std::make_shared<permits::ManualClock>(kStart - kSec);
            auto store = std::make_shared<shm::Store>(shm::Segment::open(m->name, m->options), clock);
            shm::Segment& seg = store->segment();
            const char* base = seg.base();
            const auto at = [&](const void* p) {
                return static_cast<std::uint64_t>(static_cast<const char*>(p) - base);
            };
            shm::Header& h = seg.header();
            m->size = seg.size();
            m->named = at(&h.named[0]);
            m->holders = at(&h.holders[0]);
            m->untouched.push_back({at(&h.lock), at(&h.lock) + sizeof(h.lock)});
            m->untouched.push_back({at(&h.ready), at(&h.ready) + sizeof(h.ready)});
            std::vector<std::shared_ptr<Limiter>> keep;
            std::vector<std::shared_ptr<shm::KeyTable>> tables;
            for (int i = 0; i < 5; ++i) {
                keep.push_back(open_named(*store, kKinds[i], kNames[i]));
                tables.push_back(open_table(store, kKinds[i], kTables[i]));
                for (const std::string& k : kKeys) {
                    keep.push_back(tables.back()->limiter_for(k));
                }
            }
            // Some of every state used: a permit of each, a segment later another, a window later one
            // more of each key's time-based state; the concurrency permits still held as the image is
            // taken.
            for (auto& l : keep) {
                l->acquire(1);
            }
            clock->advance(kSec / 4);
            for (auto& l : keep) {
                l->acquire(1);
            }
            clock->advance(kSec * 3 / 4);
            for (std::size_t i = 0; i < keep.size(); ++i) {
                if (i % 4 == 0 || keep[i]->releases_permits()) {
                    continue; // (the names, and the concurrency keys, as they are)
                }
                keep[i]->acquire(1);
            }
            for (int i = 0; i < 5; ++i) {
                for (const auto& slot : h.named) {
                    if (slot.ready.load() == 1 && std::string(slot.name) == kNames[i]) {
                        m->slots[i] = slot.offset;
                        m->slot_bytes[i] = slot.bytes;
                    }
                    if (slot.ready.load() == 1 && std::string(slot.name) == kTables[i]) {
                        m->tables[i] = slot.offset;
                        m->table_bytes[i] = slot.bytes;
                        std::uint32_t shards = 0;
                        std::uint32_t slots = 0;
                        std::uint64_t record = 0;
                        std::memcpy(&shards, base + slot.offset + 8, 4);
                        std::memcpy(&slots, base + slot.offset + 12, 4);
                        std::memcpy(&record, base + slot.offset + 16, 8);
                        for (std::uint32_t s = 0; s < shards; ++s) {
                            const std::uint64_t lock = slot.offset + kTableHead + s * kLockBytes;
                            m->untouched.push_back({lock, lock + sizeof(pthread_mutex_t)});
                        }
                        m->records[i] = slot.offset + kTableHead + shards * kLockBytes;
                        m->record_bytes[i] = record;
                        m->record_count[i] = static_cast<std::uint64_t>(shards) * slots;
                        for (std::uint64_t r = 0; r < m->record_count[i]; ++r) {
                            std::uint32_t used = 0;
                            std::memcpy(&used, base + m->records[i] + r * record, 4);
                            if (used == 1) {
                                m->live[i].push_back(m->records[i] + r * record);
                            }
                        }
                    }
                }
            }
            m->bytes.assign(base, base + seg.size());
        }
        const int fd = ::shm_open(("/permits." + m->name).c_str(), O_RDWR, 0);
        void* map = fd < 0 ? MAP_FAILED : ::mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0) {
            ::close(fd);
        }
        if (map == MAP_FAILED) {
            std::fprintf(stderr, "fuzz_shm_segment: cannot map the segment's file\n");
            std::abort();
        }
        m->file = static_cast<char*>(map);
        return m;
    }();
    return *img;
}

/// A state's window (or a bucket's period) and the most it may grant in one, less refunds.
struct Bound {
    Nanos window = kSec;
    std::int64_t most = 0;
};

Bound bound_of(What what) {
    switch (what) {
    case What::TokenBucket: return {kSec, kLimit + kPerPeriod}; // (full, and one refill in any period)
    case What::Concurrency: return {0, kConcurrencyLimit};
    default: return {kSec, 2 * kLimit}; // (any window-long interval meets at most two windows' worth)
    }
}

struct Grant {
    std::int64_t n;
    std::int64_t tag;
    bool second;  ///< granted through the second mapping (given back through the one that granted it)
    bool program; ///< granted after the damage
};

/// What was granted after the damage: the permits held (concurrency), or the grants (+n) and refunds
/// (-n) of the last window (time-based).
struct Tally {
    std::int64_t held = 0;
    std::deque<std::pair<Nanos, std::int64_t>> events;
};

struct Target {
    std::string label;
    What what = What::TokenBucket;
    std::shared_ptr<Limiter> first;  ///< through the first mapping (opened before the damage)
    std::shared_ptr<Limiter> second; ///< through the second; both null once refused
    std::vector<Grant> grants;       ///< concurrency: held; time-based: may be refunded
    Tally mapping[2];                ///< through each mapping
    Tally both;                      ///< through both (one state while the damage left its identity alone)
    std::function<std::shared_ptr<Limiter>(shm::Store&)> reopen;
};

class Harness {
public:
    explicit Harness(FuzzedDataProvider& in) : in_(in), img_(image()) {}

    void run() {
        std::memcpy(img_.file, img_.bytes.data(), img_.size);
        clock_ = std::make_shared<permits::ManualClock>(kStart);
        open_first();
        const int patches = in_.ConsumeIntegralInRange<int>(0, 16);
        for (int i = 0; i < patches && in_.remaining_bytes() > 0; ++i) {
            patch();
        }
        damaged_ = true;
        if (open_second()) {
            int steps = 0;
            while (in_.remaining_bytes() > 0 && steps++ < 64) {
                step(in_.ConsumeIntegralInRange<int>(0, 9));
            }
            reopen();
        }
        // (the leases still held go with the mappings: the image is restored next time)
        targets_.clear();
        tables_.clear();
        stores_.clear();
    }

private:
    // ---- the damage ----

    /// True when byte `at` helps say which state a name or key is: the header (the hash seed, the
    /// named directory, the holder slots: a generation or pid), a record's bookkeeping and key, a
    /// concurrency key's entry's tag. Damage there can, without breaking any invariant, have one
    /// mapping use another state than the other, or forget whose permits are held: then the first
    /// mapping is used no more, and only the second one's grants are bounded.
    bool identity(std::uint64_t at) const {
        if (at < sizeof(shm::Header)) {
            return true;
        }
        for (int i = 0; i < 5; ++i) {
            const std::uint64_t from = img_.records[i];
            if (at < from || at >= from + img_.record_count[i] * img_.record_bytes[i]) {
                continue;
            }
            const std::uint64_t in = (at - from) % img_.record_bytes[i];
            if (in < 64) {
                return in < 16 || in >= 32; // (not its anchor or its idle time)
            }
            return kKinds[i] == What::Concurrency && (in - 64) % 16 < 8;
        }
        return false;
    }

    void write(std::uint64_t at, const void* data, std::uint64_t n) {
        if (at >= img_.size || n > img_.size - at || overlaps(img_, at, at + n)) {
            return;
        }
        for (std::uint64_t i = 0; i < n; ++i) {
            if (identity(at + i) && std::memcmp(img_.file + at + i, static_cast<const char*>(data) + i, 1) != 0) {
                same_state_ = false;
            }
        }
        trace("patch %llu (%llu bytes)\n", static_cast<unsigned long long>(at), static_cast<unsigned long long>(n));
        std::memcpy(img_.file + at, data, n);
    }

    std::int64_t interesting() {
        static const std::int64_t kValues[] = {0,
                                               1,
                                               -1,
                                               2,
                                               -2,
                                               3,
                                               4,
                                               5,
                                               8,
                                               1000,
                                               -1000,
                                               255,
                                               256,
                                               257,
                                               65534,
                                               65535,
                                               65536,
                                               std::numeric_limits<std::int32_t>::max(),
                                               std::numeric_limits<std::int32_t>::min(),
                                               0xffffffffLL,
                                               1LL << 32,
                                               (1LL << 32) | 1,
                                               (4LL << 32) | 1,
                                               1LL << 16,
                                               (1LL << 16) | 300,
                                               1LL << 22,
                                               1LL << 48,
                                               1LL << 62,
                                               kSec,
                                               kStart,
                                               permits::kMaxTime,
                                               permits::kMaxTime + 1,
                                               std::numeric_limits<std::int64_t>::max(),
                                               std::numeric_limits<std::int64_t>::max() - 1,
                                               std::numeric_limits<std::int64_t>::min(),
                                               static_cast<std::int64_t>(::getpid())};
        return kValues[in_.ConsumeIntegralInRange<std::size_t>(0, std::size(kValues) - 1)];
    }

    /// A byte of region `r`: its start and length.
    void region(int r, std::uint64_t& from, std::uint64_t& len) {
        const auto pick = [&](std::uint64_t n) { return in_.ConsumeIntegralInRange<std::uint64_t>(0, n - 1); };
        const int i = in_.ConsumeIntegralInRange<int>(0, 4);
        switch (r) {
        case 0: from = 0, len = img_.named; break; // the header's fields
        case 1: {                                  // a named slot (one in use, or the next free one)
            const std::uint64_t slot = pick(11);
            from = img_.named + slot * sizeof(shm::NamedSlot), len = sizeof(shm::NamedSlot);
            break;
        }
        case 2: { // a holder slot (the first few are the ones in use)
            const std::uint64_t h = in_.ConsumeBool() ? pick(4) : pick(shm::kMaxHolders);
            from = img_.holders + h * sizeof(shm::HolderSlot), len = sizeof(shm::HolderSlot);
            break;
        }
        case 3:
        case 7: from = img_.slots[i], len = img_.slot_bytes[i]; break; // a name's state
        case 4: from = img_.tables[i], len = kTableHead; break;        // a table's head
        case 5: { // a table's record: mostly one of its keys', mostly its state after its 64-byte head
            if (!img_.live[i].empty() && in_.ConsumeIntegralInRange<int>(0, 3) != 0) {
                from = img_.live[i][pick(img_.live[i].size())];
            } else {
                from = img_.records[i] + pick(img_.record_count[i]) * img_.record_bytes[i];
            }
            len = img_.record_bytes[i];
            if (in_.ConsumeIntegralInRange<int>(0, 3) != 0) {
                from += 64, len -= 64;
            }
            break;
        }
        default: from = 0, len = img_.size; break; // anywhere
        }
    }

    void patch() {
        std::uint64_t from = 0;
        std::uint64_t len = 0;
        region(in_.ConsumeIntegralInRange<int>(0, 7), from, len);
        if (len == 0) {
            return;
        }
        // Half the time one of the region's first 16 words (a state word, a ledger's first entries), else any byte.
        const std::uint64_t words = std::clamp<std::uint64_t>(len / 8, 1, 16);
        const std::uint64_t at = in_.ConsumeBool() ? from + 8 * in_.ConsumeIntegralInRange<std::uint64_t>(0, words - 1)
                                                   : from + in_.ConsumeIntegralInRange<std::uint64_t>(0, len - 1);
        const std::uint64_t word = from + (at - from) / 8 * 8;
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
        case 0: { // raw bytes
            const std::string bytes = in_.ConsumeBytesAsString(in_.ConsumeIntegralInRange<std::size_t>(1, 16));
            write(at, bytes.data(), bytes.size());
            break;
        }
        case 1: { // an interesting word
            const std::int64_t v = interesting();
            write(word, &v, 8);
            break;
        }
        case 2: { // a word moved a little
            std::int64_t v = 0;
            if (word + 8 <= img_.size) {
                std::memcpy(&v, img_.file + word, 8);
                v = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) +
                                              static_cast<std::uint64_t>(in_.ConsumeIntegralInRange<int>(-3, 3)));
                write(word, &v, 8);
            }
            break;
        }
        default: { // an interesting half word
            const auto v = static_cast<std::int32_t>(interesting());
            write(from + (at - from) / 4 * 4, &v, 4);
            break;
        }
        }
    }

    // ---- opening ----

    /// Runs `f`; false when it refused the segment (std::invalid_argument, std::system_error), which
    /// is the one way a damaged segment may be met. Any other exception traps.
    template <class F> static bool refused(F&& f) {
        try {
            f();
            return false;
        } catch (const std::invalid_argument& e) {
            trace("refused: %s\n", e.what());
        } catch (const std::system_error& e) {
            trace("refused: %s\n", e.what());
        } catch (...) {
            CHECK(false);
        }
        return true;
    }

    /// The image, sound, opened as a process that then takes a permit of every name and key.
    void open_first() {
        std::shared_ptr<shm::Store> store;
        CHECK(!refused(
            [&] { store = std::make_shared<shm::Store>(shm::Segment::open(img_.name, img_.options), clock_); }));
        stores_.push_back(store);
        for (int i = 0; i < 5; ++i) {
            Target t;
            t.label = kNames[i];
            t.what = kKinds[i];
            const What what = kKinds[i];
            const char* name = kNames[i];
            t.reopen = [what, name](shm::Store& s) { return open_named(s, what, name); };
            targets_.push_back(std::move(t));
        }
        for (int i = 0; i < 5; ++i) {
            const What what = kKinds[i];
            const char* name = kTables[i];
            for (const std::string& k : kKeys) {
                Target t;
                t.label = std::string(name) + "/" + k.substr(0, 8);
                t.what = what;
                t.reopen = [what, name, k](shm::Store& s) {
                    return open_table(s.shared_from_this(), what, name)->limiter_for(k);
                };
                targets_.push_back(std::move(t));
            }
        }
        for (auto& t : targets_) {
            CHECK(!refused([&] { t.first = t.reopen(*store); }));
            const Outcome o = t.first->acquire(1);
            if (o.acquired) {
                granted(t, o);
            }
        }
    }

    /// The damaged segment opened as another process would: false when it is refused whole. Each
    /// name and key refused is used no more.
    bool open_second() {
        // Looked at from outside first (python -m permits shm show): read or refused, never a crash.
        refused([&] { shm::describe(img_.name, clock_->now()); });
        std::shared_ptr<shm::Store> store;
        if (refused(
                [&] { store = std::make_shared<shm::Store>(shm::Segment::open(img_.name, img_.options), clock_); })) {
            return false;
        }
        stores_.push_back(store);
        if (permits_fuzz::verbose()) {
            for (const auto& slot : store->segment().header().named) {
                if (slot.ready.load() != 0) {
                    trace("slot '%.*s' ready=%u kind=%u offset=%llu bytes=%llu anchor=%lld\n", 63, slot.name,
                          slot.ready.load(), static_cast<unsigned>(slot.kind),
                          static_cast<unsigned long long>(slot.offset), static_cast<unsigned long long>(slot.bytes),
                          ll(slot.anchor));
                }
            }
        }
        for (int i = 0; i < 5; ++i) {
            std::shared_ptr<shm::KeyTable> table;
            refused([&] { table = open_table(store, kKinds[i], kTables[i]); });
            tables_.push_back(table);
        }
        for (auto& t : targets_) {
            if (refused([&] { t.second = t.reopen(*store); })) {
                t.first.reset();
                t.second.reset();
            }
        }
        return true;
    }

    /// A state the engine itself left (after the damage it accepted or repaired) opens again.
    void reopen() {
        std::shared_ptr<shm::Store> other;
        CHECK(!refused(
            [&] { other = std::make_shared<shm::Store>(shm::Segment::open(img_.name, img_.options), clock_); }));
        for (auto& t : targets_) {
            if (t.second) {
                trace("reopen %s\n", t.label.c_str());
                CHECK(!refused([&] { t.reopen(*other); }));
            }
        }
    }

    // ---- the program ----

    /// Mostly the target in focus (a program works on one name or key at a time), else any.
    Target& pick() {
        if (in_.ConsumeIntegralInRange<int>(0, 3) == 0) {
            focus_ = in_.ConsumeIntegralInRange<std::size_t>(0, targets_.size() - 1);
        }
        return targets_[focus_];
    }

    void advance(Nanos delta) {
        delta = std::clamp<Nanos>(delta, 0, permits::kMaxTime - clock_->now());
        trace("advance %lld to %lld\n", ll(delta), ll(clock_->now() + delta));
        clock_->advance(delta);
    }

    void check_available(Target& t, Limiter& l) {
        const std::int64_t a = l.available_permits();
        const permits::Statistics s = l.statistics();
        trace("%s available %lld\n", t.label.c_str(), ll(a));
        CHECK(a >= 0 && a <= limit_of(t.what));
        CHECK(s.current_available_permits >= 0 && s.current_available_permits <= limit_of(t.what));
    }

    /// Counts n (a grant, or -n: a release or refund) in `tally`; the bound is checked after a grant.
    void count(const Target& t, Tally& tally, std::int64_t n, const char* which) {
        const Bound b = bound_of(t.what);
        if (t.what == What::Concurrency) {
            tally.held += n;
            trace("%s holds %lld since the damage (%s)\n", t.label.c_str(), ll(tally.held), which);
            CHECK(n < 0 || tally.held <= b.most);
            return;
        }
        const Nanos now = clock_->now();
        tally.events.emplace_back(now, n);
        while (!tally.events.empty() && tally.events.front().first <= now - b.window) {
            tally.events.pop_front();
        }
        std::int64_t sum = 0;
        for (const auto& e : tally.events) {
            sum += e.second;
        }
        trace("%s took %lld in the last window (%s)\n", t.label.c_str(), ll(sum), which);
        CHECK(n < 0 || sum <= b.most);
    }

    /// A grant: before the damage only remembered (to give back); after it counted against the limit,
    /// through its mapping, and through both while the damage left the state's identity alone.
    void granted(Target& t, const Outcome& o, bool second = false) {
        t.grants.push_back({o.permits, o.tag, second, damaged_});
        if (damaged_) {
            count(t, t.mapping[second ? 1 : 0], o.permits, second ? "second" : "first");
            if (same_state_) {
                count(t, t.both, o.permits, "both");
            }
        }
    }

    /// A release (concurrency: only one counted) or refund (time-based: any, as though it gave back).
    void given_back(Target& t, const Grant& g) {
        if (t.what == What::Concurrency && !g.program) {
            return;
        }
        count(t, t.mapping[g.second ? 1 : 0], -g.n, g.second ? "second" : "first");
        if (same_state_) {
            count(t, t.both, -g.n, "both");
        }
    }

    void step(int op) {
        Target& t = pick();
        if (op == 2) {
            static constexpr Nanos kDeltas[] = {1, 7, kSec / 4, kSec, kSec + 1, kIdle + kSec, Nanos{1} << 40};
            advance(kDeltas[in_.ConsumeIntegralInRange<std::size_t>(0, std::size(kDeltas) - 1)]);
            return;
        }
        if (!t.second) {
            return; // refused at open
        }
        // The first mapping's limiter only while the damage left the state's identity alone: else it
        // may run on a state no check has seen (damage that comes to a limiter already open is not
        // what the checks are for, and its arithmetic is not made for any bytes at all).
        const bool second = !same_state_ || in_.ConsumeBool();
        Limiter& l = second ? *t.second : *t.first;
        const std::int64_t limit = limit_of(t.what);
        switch (op) {
        case 0:
        case 1: { // acquire
            const std::int64_t n = in_.ConsumeIntegralInRange<std::int64_t>(0, limit);
            const Outcome o = l.acquire(n);
            trace("%s acquire(%lld): %d reason=%d retry_after=%lld\n", t.label.c_str(), ll(n), o.acquired,
                  static_cast<int>(o.reason), ll(o.retry_after));
            if (o.acquired) {
                if (n > 0) {
                    granted(t, o, second);
                }
            } else {
                CHECK(o.retry_after >= -1);
            }
            break;
        }
        case 3: { // try_now
            const std::int64_t n = in_.ConsumeIntegralInRange<std::int64_t>(1, limit);
            if (const std::optional<Outcome> o = l.try_now(n)) {
                trace("%s try_now(%lld): granted\n", t.label.c_str(), ll(n));
                CHECK(o->acquired);
                granted(t, *o, second);
            }
            break;
        }
        case 4: { // a release (concurrency) or a refund
            if (t.grants.empty()) {
                break;
            }
            const std::size_t i = in_.ConsumeIntegralInRange<std::size_t>(0, t.grants.size() - 1);
            const Grant g = t.grants[i];
            if (!g.second && !same_state_) {
                break; // (the first mapping's: see above)
            }
            t.grants.erase(t.grants.begin() + static_cast<std::ptrdiff_t>(i));
            trace("%s give_back(%lld, tag %lld)\n", t.label.c_str(), ll(g.n), ll(g.tag));
            (g.second ? *t.second : *t.first).give_back(g.n, g.tag);
            given_back(t, g); // (a refund counted as given back whether or not it was)
            break;
        }
        case 5: check_available(t, l); break;
        case 6: (void)l.idle_duration(); break;
        case 7: { // evict_idle
            const std::size_t i = in_.ConsumeIntegralInRange<std::size_t>(0, tables_.size() - 1);
            if (tables_[i]) {
                const std::int64_t evicted = tables_[i]->evict_idle();
                trace("%s evicted %lld, size %lld\n", kTables[i], ll(evicted), ll(tables_[i]->size()));
                CHECK(evicted >= 0 && tables_[i]->size() >= 0);
            }
            break;
        }
        case 8: { // retry_after is enough (with nothing queued: no queues here)
            const std::int64_t n = in_.ConsumeIntegralInRange<std::int64_t>(1, limit);
            const Outcome o = l.acquire(n);
            if (o.acquired) {
                granted(t, o, second);
                break;
            }
            trace("%s probe acquire(%lld): reason=%d retry_after=%lld\n", t.label.c_str(), ll(n),
                  static_cast<int>(o.reason), ll(o.retry_after));
            if (o.reason != permits::Reason::LimitReached || o.retry_after < 0 ||
                o.retry_after > permits::kMaxTime - clock_->now()) {
                break;
            }
            advance(o.retry_after);
            const Outcome again = l.acquire(n);
            trace("%s after retry_after: %d\n", t.label.c_str(), again.acquired);
            CHECK(again.acquired);
            granted(t, again, second);
            break;
        }
        default: check_available(t, l); break;
        }
    }

    FuzzedDataProvider& in_;
    Image& img_;
    std::shared_ptr<permits::ManualClock> clock_;
    std::size_t focus_ = 0;
    bool damaged_ = false;   ///< the patches are written
    bool same_state_ = true; ///< no patch touched what names a state (see identity())
    std::vector<Target> targets_;
    std::vector<std::shared_ptr<shm::KeyTable>> tables_;
    std::vector<std::shared_ptr<shm::Store>> stores_;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return permits_fuzz::run_input<Harness>(data, size, 1);
}

#else // not Linux: no shared-memory segments

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* /*data*/, std::size_t /*size*/) {
    return 0;
}

#endif
