#include "permits/fork.hpp"

#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if !defined(_WIN32)
#include <pthread.h>
#endif

#include "permits/clock.hpp"
#include "permits/limiter.hpp"
#include "permits/per_key.hpp"
#include "permits/scheduler.hpp"
#include "permits/waiter.hpp"

namespace permits::detail {

namespace {

template <class T> struct List { T* head = nullptr; };

struct Lists {
    std::mutex mu; // guards the lists; held from prepare to parent/child
    List<Limiter> limiters;
    List<PerKeyLimiter> tables;
    List<Notifier> notifiers;
};

Lists& lists() {
    // Leaked on purpose, like the engine: objects unregister during static destruction.
    static Lists* l = new Lists();
    return *l;
}

template <class T> void link(List<T>& list, T* x) {
    ForkRegistry::links(*x).next = list.head;
    if (list.head != nullptr) {
        ForkRegistry::links(*list.head).prev = x;
    }
    list.head = x;
}

template <class T> void unlink(List<T>& list, T* x) noexcept {
    auto& links = ForkRegistry::links(*x);
    (links.prev != nullptr ? ForkRegistry::links(*links.prev).next : list.head) = links.next;
    if (links.next != nullptr) {
        ForkRegistry::links(*links.next).prev = links.prev;
    }
    links = {};
}

template <class T, class F> void each(const List<T>& list, F&& f) {
    for (T* x = list.head; x != nullptr; x = ForkRegistry::links(*x).next) {
        f(*x);
    }
}

/// try_lock on every object of `list`, in order; on a miss the ones taken are let go and false
/// is returned. Nothing is allocated.
template <class T, class TryLock, class Unlock>
bool try_lock_each(const List<T>& list, TryLock try_lock, Unlock unlock) {
    for (T* x = list.head; x != nullptr; x = ForkRegistry::links(*x).next) {
        if (!try_lock(*x)) {
            for (T* y = list.head; y != x; y = ForkRegistry::links(*y).next) {
                unlock(*y);
            }
            return false;
        }
    }
    return true;
}

} // namespace

void ForkRegistry::install() {
    static std::once_flag once;
    std::call_once(once, [] {
        EngineThread::instance(); // exists before any handler runs: they must not allocate it
#if !defined(_WIN32)
        ::pthread_atfork(&ForkRegistry::prepare, &ForkRegistry::parent, &ForkRegistry::child);
#endif
        // Windows has no fork(): the lists are kept (cheap), no handler ever runs.
    });
}

void ForkRegistry::add(Limiter* l) {
    install();
    std::lock_guard<std::mutex> lock(lists().mu);
    link(lists().limiters, l);
}

void ForkRegistry::remove(Limiter* l) noexcept {
    std::lock_guard<std::mutex> lock(lists().mu);
    unlink(lists().limiters, l);
}

void ForkRegistry::add(PerKeyLimiter* k) {
    install();
    std::lock_guard<std::mutex> lock(lists().mu);
    link(lists().tables, k);
}

void ForkRegistry::remove(PerKeyLimiter* k) noexcept {
    std::lock_guard<std::mutex> lock(lists().mu);
    unlink(lists().tables, k);
}

void ForkRegistry::add(Notifier* n) {
    install();
    std::lock_guard<std::mutex> lock(lists().mu);
    link(lists().notifiers, n);
}

void ForkRegistry::remove(Notifier* n) noexcept {
    std::lock_guard<std::mutex> lock(lists().mu);
    unlink(lists().notifiers, n);
}

bool ForkRegistry::try_lock_all() noexcept {
    // In lock order: a key's shard, then its full limiter (a request queues under both), then a
    // notifier (a limiter completes a request under its own lock). On a miss, everything taken
    // is let go; nothing is allocated either way.
    Lists& l = lists();
    const auto lock_table = [](PerKeyLimiter& k) { return k.fork_try_lock(); };
    const auto unlock_table = [](PerKeyLimiter& k) { k.fork_unlock(); };
    const auto lock_limiter = [](Limiter& x) { return x.fork_try_lock(); };
    const auto unlock_limiter = [](Limiter& x) { x.fork_unlock(); };
    if (!try_lock_each(l.tables, lock_table, unlock_table)) {
        return false;
    }
    if (!try_lock_each(l.limiters, lock_limiter, unlock_limiter)) {
        each(l.tables, unlock_table);
        return false;
    }
    if (!try_lock_each(
            l.notifiers, [](Notifier& n) { return n.mu_.try_lock(); }, [](Notifier& n) { n.mu_.unlock(); })) {
        each(l.limiters, unlock_limiter);
        each(l.tables, unlock_table);
        return false;
    }
    return true;
}

void ForkRegistry::unlock_all() noexcept {
    Lists& l = lists();
    each(l.notifiers, [](Notifier& n) { n.mu_.unlock(); });
    each(l.limiters, [](Limiter& x) { x.fork_unlock(); });
    each(l.tables, [](PerKeyLimiter& k) { k.fork_unlock(); });
}

void ForkRegistry::prepare() noexcept {
    EngineThread& engine = EngineThread::instance();
    // The engine thread finishes the timer it is running, if any, and starts no other: it holds
    // no limiter's lock from here on. Blocking here is safe: a timer waits on nothing fork holds.
    engine.busy_.lock();
    for (;;) {
        lists().mu.lock();
        if (try_lock_all()) {
            break;
        }
        // A lock held by a thread that may want the registry next (a key's limiter made or
        // destroyed under its shard lock): let it through and try again.
        lists().mu.unlock();
        std::this_thread::yield();
    }
    engine.mu_.lock(); // last: taken under limiter and shard locks, never the other way round
}

void ForkRegistry::parent() noexcept {
    EngineThread& engine = EngineThread::instance();
    engine.mu_.unlock();
    unlock_all();
    lists().mu.unlock();
    engine.busy_.unlock();
}

void ForkRegistry::child() noexcept {
    // Only this thread exists now. What the parent's other threads were doing is dropped: their
    // queued requests (never granted: nobody here would release those permits) and the engine's
    // timers (all were for them). Leases already granted stay held, and come back on release.
    EngineThread& engine = EngineThread::instance();
    engine.heap_.clear();
    engine.started_ = false;                     // started again by the next timer, or by resume()
    new (&engine.cv_) std::condition_variable(); // the parent's thread still counts as its waiter
    std::vector<std::shared_ptr<Waiter>> dropped;
    try {
        Lists& l = lists();
        each(l.limiters, [&](Limiter& x) { x.fork_reset_child(dropped, &x.clock()->scheduler() == &engine); });
        each(l.tables, [&](PerKeyLimiter& k) { k.fork_reset_child(&k.clock_->scheduler() == &engine, engine.heap_); });
    } catch (...) {
        // Out of memory for the list of dropped requests: those not yet reached stay queued.
    }
    engine.mu_.unlock();
    unlock_all();
    lists().mu.unlock();
    engine.busy_.unlock();
    // `dropped` goes here, every lock free: a request's last reference may take a notifier with it.
}

} // namespace permits::detail
