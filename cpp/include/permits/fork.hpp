// fork() with work in flight. Every limiter, per-key table and notifier is listed here, so that
// pthread_atfork handlers can take all their locks before the fork (the child then inherits no
// lock held by a thread it does not have) and, in the child, drop what belonged to the parent's
// threads: their queued requests and the engine's timers.
#pragma once

namespace permits {

class Limiter;
class PerKeyLimiter;
class Notifier;

namespace detail {

/// An object's place in the registry's list of its kind (intrusive: registering allocates nothing).
template <class T> struct ForkLinks {
    T* prev = nullptr;
    T* next = nullptr;
};

/// The process's lists of live limiters, per-key tables and notifiers, and the fork handlers.
///
/// Lock order: the engine thread's busy_ lock, then the registry, then every per-key table's
/// shard locks, every limiter's lock, every notifier's lock, then the engine's lock. The code
/// also takes the registry under a shard lock (a key's limiter made or destroyed there), so the
/// object locks are taken with try_lock, everything let go and tried again on a miss.
class ForkRegistry {
public:
    /// Called at the end of a constructor body and the start of a destructor body, so that the
    /// handlers only ever see an object whose own members are alive.
    static void add(Limiter* l);
    static void remove(Limiter* l) noexcept;
    static void add(PerKeyLimiter* k);
    static void remove(PerKeyLimiter* k) noexcept;
    static void add(Notifier* n);
    static void remove(Notifier* n) noexcept;
    /// An object's links (its classes let only the registry see them).
    template <class T> static ForkLinks<T>& links(T& x) noexcept { return x.fork_links_; }

private:
    static void install();
    static void prepare() noexcept;
    static void parent() noexcept;
    static void child() noexcept;
    static bool try_lock_all() noexcept;
    static void unlock_all() noexcept;
};

} // namespace detail
} // namespace permits
