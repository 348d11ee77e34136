#include "permits/shm_segment.hpp"

#if defined(__linux__)

#include <csignal>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace permits::shm {

namespace {

constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kReclaiming = kReclaimingPid;
constexpr std::uint64_t kNamedArena = 1ULL << 20;  // named limiters (a sliding window's ring included)
constexpr std::uint64_t kBytesPerKey = 2048;       // room per key of capacity: records of two tables and slack
constexpr std::uint64_t kMaxCapacity = 1ULL << 28; // 256 Mi keys: far beyond what one host's memory holds
// Inaccessible address space on either side of a mapping: an index that escaped the checks (a
// 16-bit holder or segment index reaches about 1 MiB) faults rather than writing into a neighbour.
constexpr std::uint64_t kGuardBytes = 1ULL << 20;
constexpr std::uint64_t kPidLimit = 1ULL << 22;          // PID_MAX_LIMIT: every Linux pid is below it
constexpr std::int64_t kMaxUses = std::int64_t{1} << 62; // more permits than any process could hold

std::string path_of(const std::string& name) {
    return "/permits." + name; // shm_open's name: /dev/shm/permits.<name> on Linux
}

[[noreturn]] void fail_errno(const std::string& what) {
    throw std::system_error(errno, std::generic_category(), what);
}

/// Field 22 of /proc/<pid>/stat (start time, clock ticks since boot) and field 3 (state); false
/// when the process does not exist.
bool read_stat(std::uint64_t pid, std::uint64_t& start_time, char& state) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!in || !std::getline(in, text)) {
        return false;
    }
    // The command name (field 2) is in parentheses and may hold spaces: fields resume after the last ')'.
    const auto close = text.rfind(')');
    if (close == std::string::npos) {
        return false;
    }
    std::istringstream rest(text.substr(close + 1));
    std::string field;
    rest >> state;
    for (int i = 4; i <= 22; ++i) {
        rest >> field;
    }
    start_time = std::strtoull(field.c_str(), nullptr, 10);
    return true;
}

std::uint64_t pid_namespace(const std::string& proc) {
    struct stat st {};
    if (::stat((proc + "/ns/pid").c_str(), &st) != 0) {
        return 0;
    }
    return static_cast<std::uint64_t>(st.st_ino);
}

void check_header(const Header& h, std::uint64_t file_size, const std::string& name) {
    const std::string where = "shared-memory segment '" + name + "' ";
    if (file_size < sizeof(Header)) {
        throw std::invalid_argument(where + "is truncated (" + std::to_string(file_size) + " bytes)");
    }
    if (h.magic != kMagic) {
        throw std::invalid_argument(where + "is not a permits segment (its magic number differs)");
    }
    if (h.version != kLayoutVersion) {
        throw std::invalid_argument(where + "has layout version " + std::to_string(h.version) + ", not " +
                                    std::to_string(kLayoutVersion) + " (made by another release: unlink it)");
    }
    if (h.header_bytes != sizeof(Header) || h.pair_bytes != sizeof(AtomicPair)) {
        throw std::invalid_argument(where + "was made by a build with another layout (header " +
                                    std::to_string(h.header_bytes) + " bytes, state words " +
                                    std::to_string(h.pair_bytes) + " bytes)");
    }
    if (h.total_bytes != file_size) {
        throw std::invalid_argument(where + "is truncated or corrupted: its header says " +
                                    std::to_string(h.total_bytes) + " bytes, the file has " +
                                    std::to_string(file_size));
    }
    if (h.total_bytes != Segment::size_for(h.capacity) || h.arena_offset != round_up(sizeof(Header), kPage) ||
        h.arena_offset + h.arena_bytes != h.total_bytes || h.arena_used > h.arena_bytes || h.arena_used % 64 != 0) {
        throw std::invalid_argument(where + "is corrupted: its sizes do not add up");
    }
    if (h.clock != ClockKind::Monotonic && h.clock != ClockKind::Manual) {
        throw std::invalid_argument(where + "is corrupted: unknown clock kind");
    }
}

} // namespace

namespace {
std::atomic<std::uint64_t> g_pid{0};
void renew_pid() noexcept {
    g_pid.store(static_cast<std::uint64_t>(::getpid()));
}
} // namespace

std::uint64_t current_pid() noexcept {
    std::uint64_t pid = g_pid.load(std::memory_order_relaxed);
    if (pid == 0) {
        static const bool installed = [] {
            ::pthread_atfork(nullptr, nullptr, &renew_pid);
            return true;
        }();
        (void)installed;
        renew_pid();
        pid = g_pid.load();
    }
    return pid;
}

Nanos monotonic_now() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<Nanos>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

ProcessId ProcessId::self() {
    ProcessId me;
    me.pid = current_pid();
    char state = 0;
    read_stat(me.pid, me.start_time, state);
    me.pid_ns = pid_namespace("/proc/self");
    return me;
}

bool holder_dead(const HolderSlot& slot, Nanos ttl, Nanos now_monotonic) {
    const std::uint64_t pid = pid_of(slot.tag());
    if (pid == 0 || pid == kReclaiming) {
        return true; // freed, or being drained: nothing of it is held by a live process
    }
    static const std::uint64_t our_ns = pid_namespace("/proc/self");
    if (our_ns != 0 && slot.pid_ns.load() == our_ns) {
        if (pid == current_pid()) {
            return false; // ourselves (qemu-user, for one, makes up our own /proc/self/stat at each read)
        }
        if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
            return true; // no such process (EPERM: it exists, another user's)
        }
        std::uint64_t seen = 0;
        char state = 0;
        if (!read_stat(pid, seen, state)) {
            return false; // it exists, and /proc hides it (hidepid): alive
        }
        if (state == 'Z' || state == 'X') {
            return true; // exited, not yet reaped
        }
        const std::uint64_t start = slot.start_time.load();
        if (start == 0 || seen == start) {
            return false;
        }
        // Another start time: the pid was reused, unless the holder still beats. Where /proc lies to
        // a process about itself (qemu-user makes up /proc/self/stat: a forked child reads its
        // parent's start time), the start time it recorded is not the one others read, and a live
        // holder must not lose its permits on that alone.
        const Nanos beat = slot.heartbeat.load();
        return beat == 0 || now_monotonic - beat > ttl;
    }
    // Another pid namespace (another container sharing /dev/shm): the heartbeat decides.
    const Nanos beat = slot.heartbeat.load();
    return beat != 0 && now_monotonic - beat > ttl;
}

void Segment::check_name(const std::string& name) {
    if (name.empty() || name.size() > 100 || name[0] == '.') {
        throw std::invalid_argument("name must be 1 to 100 characters of letters, digits, '_', '.' and '-', not "
                                    "starting with '.'; got '" +
                                    name + "'");
    }
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '.' || c == '-';
        if (!ok) {
            throw std::invalid_argument("name must be 1 to 100 characters of letters, digits, '_', '.' and '-'; got '" +
                                        name + "'");
        }
    }
}

std::uint64_t Segment::size_for(std::uint64_t capacity) noexcept {
    return round_up(sizeof(Header), kPage) + round_up(kNamedArena + capacity * kBytesPerKey, kPage);
}

namespace {
constexpr const char* kShmDir = "/dev/shm"; // where glibc's shm_open keeps its files on Linux

/// Closes `fd` keeping errno (for the error that follows).
void close_keeping_errno(int fd) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
}

/// Makes the file `fd` a new segment: the mode exactly as asked (whatever the umask), the size, all
/// of its memory, then the header, published by `ready`, last. Returns its mapping; on an error
/// throws std::system_error (`fd` stays open).
Header* build(int fd, const std::string& name, std::uint64_t size, const Segment::Options& options) {
    // All of its memory now (posix_fallocate): a page that /dev/shm could not give later would be a
    // SIGBUS in whichever process touched it, where here it is an error for the creator. Some kernels'
    // tmpfs give it up with EINTR when a signal arrives (even a stop and continue): tried again, a few
    // times, so that a stray signal does not fail the creation.
    int err = 0;
    if (::fchmod(fd, static_cast<mode_t>(options.mode)) != 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
        err = errno;
    }
    for (int tries = 1; err == 0; ++tries) {
        err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
        if (err != EINTR || tries == 8) {
            break;
        }
        err = 0;
    }
    if (err != 0) {
        errno = err;
        fail_errno("cannot create shared-memory segment '" + name + "' of " + std::to_string(size) + " bytes");
    }
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        fail_errno("cannot map shared-memory segment '" + name + "'");
    }
    auto* h = static_cast<Header*>(map);
    h->magic = kMagic;
    h->version = kLayoutVersion;
    h->header_bytes = sizeof(Header);
    h->total_bytes = size;
    h->capacity = options.capacity;
    h->clock = options.clock;
    h->pair_bytes = sizeof(AtomicPair);
    std::random_device rd;
    h->hash_seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    h->arena_offset = round_up(sizeof(Header), kPage);
    h->arena_bytes = size - h->arena_offset;
    h->arena_used = 0;
    RobustLock::init(&h->lock);
    h->ready.store(1);
    return h;
}

/// Gives the unnamed file `fd` (O_TMPFILE) the name `target`, if no file has it: 0, or the errno
/// (EEXIST: another process published first).
int publish(int fd, const std::string& target) {
    // Through /proc (any user), else by the descriptor itself (AT_EMPTY_PATH: CAP_DAC_READ_SEARCH).
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, target.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        return 0;
    }
    if (errno == EEXIST) {
        return EEXIST;
    }
    const int through_proc = errno;
    if (::linkat(fd, "", AT_FDCWD, target.c_str(), AT_EMPTY_PATH) == 0) {
        return 0;
    }
    return errno == EEXIST ? EEXIST : through_proc;
}

/// Maps the existing segment file `fd` (closed here) once its creator has finished it, checked
/// against `options` (nullptr: inspection, which takes the segment as it is); sets `file_size`.
Header* attach(int fd, const std::string& name, const Segment::Options* options, std::uint64_t& file_size) {
    // A segment is published complete (see create below); one made in place, by an earlier build or
    // where there is no O_TMPFILE, may still be under way: wait (about 2 s at most) for its creator.
    struct stat st {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    void* map = MAP_FAILED;
    for (;;) {
        if (::fstat(fd, &st) != 0) {
            close_keeping_errno(fd);
            fail_errno("cannot open shared-memory segment '" + name + "'");
        }
        file_size = static_cast<std::uint64_t>(st.st_size);
        if (file_size >= sizeof(Header)) {
            map = ::mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED) {
                const auto* h = static_cast<Header*>(map);
                // A creator writes the magic number first thing: any other value is not ours.
                if (h->ready.load() == 1 || (h->magic != 0 && h->magic != kMagic)) {
                    break;
                }
                ::munmap(map, sizeof(Header));
                map = MAP_FAILED;
            }
        }
        if (std::chrono::steady_clock::now() > deadline) {
            ::close(fd);
            if (file_size == 0 || file_size >= sizeof(Header)) {
                // Nothing of this build leaves such a file: only a creator that made it in place and
                // died. No process can tell that from one still making it, so a person removes it.
                throw std::invalid_argument("shared-memory segment '" + name +
                                            "' was never finished (made in place by a creator that died: an "
                                            "earlier build of permits, or a kernel without O_TMPFILE): remove " +
                                            std::string(kShmDir) + path_of(name) + ", then open it again");
            }
            throw std::invalid_argument("shared-memory segment '" + name + "' is truncated (" +
                                        std::to_string(file_size) + " bytes)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    try {
        check_header(*static_cast<Header*>(map), file_size, name);
    } catch (...) {
        ::munmap(map, sizeof(Header));
        ::close(fd);
        throw;
    }
    const Header& seen = *static_cast<Header*>(map);
    std::string mismatch;
    const auto file_mode = static_cast<unsigned>(st.st_mode & 0777);
    if (options == nullptr) {
        // inspected: whatever its mode, owner, clock and capacity
    } else if (file_mode != (options->mode & 0777)) {
        // Another mode than asked: made by a process configured otherwise, or planted by another user.
        std::ostringstream out;
        out << std::oct << "has mode 0o" << file_mode << ", not 0o" << (options->mode & 0777);
        mismatch = out.str();
    } else if ((options->mode & 0077) == 0 && st.st_uid != ::geteuid()) {
        mismatch = "belongs to uid " + std::to_string(st.st_uid) + ", not to this process's user";
    } else if (seen.clock != options->clock) {
        mismatch = seen.clock == ClockKind::Manual ? "runs on a ManualClock, not the real clock"
                                                   : "runs on the real clock, not a ManualClock";
    } else if (seen.capacity != options->capacity) {
        mismatch =
            "has capacity=" + std::to_string(seen.capacity) + ", not capacity=" + std::to_string(options->capacity);
    }
    ::munmap(map, sizeof(Header));
    if (!mismatch.empty()) {
        ::close(fd);
        throw std::invalid_argument("shared-memory segment '" + name + "' " + mismatch);
    }
    map = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close_keeping_errno(fd);
    if (map == MAP_FAILED) {
        fail_errno("cannot map shared-memory segment '" + name + "'");
    }
    return static_cast<Header*>(map);
}

enum class Made { Created, Taken, NotPublishable };

/// Creates segment `name` unless some process has made it meanwhile (Taken). The segment is made
/// as an unnamed file of /dev/shm (O_TMPFILE) and given its name only once complete (linkat, which
/// fails if the name exists): no process ever sees it unfinished, two creators racing publish one
/// segment (the loser's file is freed, and it opens the winner's), and a creator killed on the way
/// leaves nothing behind (the kernel frees the file with its last descriptor). `in_place` (where
/// that cannot be done) makes it under its name, as earlier builds did: a creator killed midway
/// leaves it unfinished.
Made create(const std::string& name, std::uint64_t size, const Segment::Options& options, bool in_place, Header*& out) {
    const std::string path = path_of(name);
    const auto mode = static_cast<mode_t>(options.mode);
    int fd = -1;
    if (!in_place) {
        fd = ::open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
        if (fd < 0 && (errno == EISDIR || errno == EOPNOTSUPP || errno == EINVAL)) {
            in_place = true; // a kernel (before 3.11) or file system without O_TMPFILE
        }
    }
    if (in_place) {
        fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd < 0 && errno == EEXIST) {
            return Made::Taken;
        }
    }
    if (fd < 0) {
        fail_errno("cannot create shared-memory segment '" + name + "'");
    }
    Header* h = nullptr;
    try {
        h = build(fd, name, size, options);
    } catch (...) {
        ::close(fd); // an unnamed file is freed with it
        if (in_place) {
            ::shm_unlink(path.c_str());
        }
        throw;
    }
    const int err = in_place ? 0 : publish(fd, kShmDir + path);
    ::close(fd);
    if (err != 0) {
        ::munmap(h, size);
        return err == EEXIST ? Made::Taken : Made::NotPublishable;
    }
    out = h;
    return Made::Created;
}
} // namespace

std::shared_ptr<Segment> Segment::open(const std::string& name, const Options& options) {
    check_name(name);
    if (options.capacity < 1 || options.capacity > kMaxCapacity) {
        throw std::invalid_argument("capacity must be between 1 and " + std::to_string(kMaxCapacity) + ", got " +
                                    std::to_string(options.capacity));
    }
    const std::string path = path_of(name);
    const std::uint64_t size = size_for(options.capacity);
    // The file is sparse, but a page touched beyond what /dev/shm can hold would be a SIGBUS: a
    // capacity whose segment could not fit there at all is refused now.
    struct statvfs fs {};
    if (::statvfs(kShmDir, &fs) == 0 && fs.f_blocks > 0 &&
        size > static_cast<std::uint64_t>(fs.f_blocks) * static_cast<std::uint64_t>(fs.f_frsize)) {
        throw std::invalid_argument("capacity=" + std::to_string(options.capacity) + " needs a segment of up to " +
                                    std::to_string(size) + " bytes; /dev/shm holds " +
                                    std::to_string(static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize));
    }
    bool in_place = false;
    // Opened if it exists, else created; a creation another process published first is opened
    // (a name unlinked again in between is created anew: a bounded number of times).
    for (int attempt = 0; attempt < 100; ++attempt) {
        const int fd = ::shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
        if (fd >= 0) {
            std::uint64_t file_size = 0;
            Header* h = attach(fd, name, &options, file_size);
            return std::shared_ptr<Segment>(new Segment(name, h, file_size));
        }
        if (errno != ENOENT) {
            fail_errno("cannot open shared-memory segment '" + name + "'");
        }
        Header* h = nullptr;
        const Made made = create(name, size, options, in_place, h);
        if (made == Made::Created) {
            return std::shared_ptr<Segment>(new Segment(name, h, size));
        }
        if (made == Made::NotPublishable) {
            in_place = true; // no /proc, and no right to link by descriptor: made as earlier builds did
        }
    }
    throw std::system_error(EAGAIN, std::generic_category(),
                            "cannot open shared-memory segment '" + name + "': it was removed each time it was made");
}

std::shared_ptr<Segment> Segment::inspect(const std::string& name) {
    check_name(name);
    // Read and write, as every process maps it: a state word is read by a compare-and-swap (one that
    // writes back the value it found, changing nothing). No O_CREAT: a missing name stays missing.
    const int fd = ::shm_open(path_of(name).c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        const int err = errno; // (before the message's allocations)
        throw std::system_error(err, std::generic_category(),
                                err == ENOENT ? "no shared-memory segment '" + name + "'"
                                              : "cannot open shared-memory segment '" + name + "'");
    }
    std::uint64_t file_size = 0;
    Header* h = attach(fd, name, nullptr, file_size);
    return std::shared_ptr<Segment>(new Segment(name, h, file_size));
}

bool Segment::unlink(const std::string& name) {
    check_name(name);
    if (::shm_unlink(path_of(name).c_str()) == 0) {
        return true;
    }
    if (errno == ENOENT) {
        return false;
    }
    fail_errno("cannot unlink shared-memory segment '" + name + "'");
}

namespace {
/// What is impossible in a holder slot's word (it is only ever free with no uses, reserved for a
/// reclaim with none, or a real pid's with its uses, -1 while being freed); nullptr when nothing is.
/// One word: other processes' changes never make a sound slot look damaged.
const char* holder_damage(Pair word) {
    const std::uint64_t pid = pid_of(static_cast<std::uint64_t>(word.a));
    if (word.b < -1) {
        return "its uses are below the -1 that marks a slot being freed";
    }
    if (word.b > kMaxUses) {
        return "its uses are beyond any count of permits";
    }
    if ((pid == 0 || pid == kReclaiming) && word.b != 0) {
        return "it is free (or being reclaimed), yet in use";
    }
    if (pid >= kPidLimit && pid != kReclaiming) {
        return "its pid is beyond any Linux pid";
    }
    return nullptr;
}
} // namespace

Segment::Segment(std::string name, Header* header, std::uint64_t size)
    : name_(std::move(name)), header_(header), size_(size) {
    // Moved into the middle of a reservation of inaccessible pages; where that fails, it stays put.
    const std::uint64_t span = size_ + 2 * kGuardBytes;
    void* reserved = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved != MAP_FAILED) {
        char* middle = static_cast<char*>(reserved) + kGuardBytes;
        if (::mremap(header_, size_, size_, MREMAP_MAYMOVE | MREMAP_FIXED, middle) == middle) {
            header_ = reinterpret_cast<Header*>(middle);
            guarded_ = true;
        } else {
            ::munmap(reserved, span);
        }
    }
    for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
        const Pair word = header_->holders[i].word.load();
        if (const char* what = holder_damage(word)) {
            release_mapping();
            throw std::invalid_argument("shared-memory segment '" + name_ + "' is corrupted: holder " +
                                        std::to_string(i) + "'s slot {" + std::to_string(word.a) + ", " +
                                        std::to_string(word.b) + "}: " + what + " (unlink it)");
        }
    }
}

Segment::~Segment() {
    release_mapping();
}

void Segment::release_mapping() noexcept {
    if (guarded_) {
        ::munmap(base() - kGuardBytes, size_ + 2 * kGuardBytes);
    } else {
        ::munmap(header_, size_);
    }
}

void Segment::notify() noexcept {
    header_->epoch.fetch_add(1);
    if (header_->sleepers.load() > 0) {
        ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&header_->epoch), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
                  0);
    }
}

void Segment::wait_epoch(std::uint32_t seen, Nanos timeout) noexcept {
    timespec ts{static_cast<time_t>(timeout / 1000000000), static_cast<long>(timeout % 1000000000)};
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&header_->epoch), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

RobustLock::RobustLock(pthread_mutex_t* mu) : mu_(mu) {
    const int rc = ::pthread_mutex_lock(mu_);
    if (rc == EOWNERDEAD) {
        // Its holder died inside: what it guards is changed only by single stores, in an order that
        // leaves it consistent at every step, so the lock is simply taken on.
        ::pthread_mutex_consistent(mu_);
    } else if (rc != 0) {
        throw std::system_error(rc, std::generic_category(), "cannot lock a shared-memory segment");
    }
}

RobustLock::~RobustLock() {
    ::pthread_mutex_unlock(mu_);
}

void RobustLock::init(pthread_mutex_t* mu) {
    pthread_mutexattr_t attr;
    ::pthread_mutexattr_init(&attr);
    ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (::pthread_mutex_init(mu, &attr) != 0) {
        // No robust futexes here (qemu-user, for one): still shared by the processes, but a holder
        // that dies keeps the lock.
        ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_STALLED);
        ::pthread_mutex_init(mu, &attr);
    }
    ::pthread_mutexattr_destroy(&attr);
}

} // namespace permits::shm

#endif // __linux__
