// fork() while threads wait, hammer the limiters, and the engine thread has timers pending: the
// child's limiters are usable (no lock held by a thread it lacks, no stale timer), the parent
// threads' queued requests are dropped without being granted, and leases held at the fork stay
// held, their release serving the child's own waiters. The parent goes on unaffected.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"
#include "support.hpp"

using namespace permits;
using namespace permits::testing;

namespace {

constexpr Nanos kHour = 3600 * kSec;
const QueueOptions kQueue{64, QueueOrder::OldestFirst};

/// Runs `body` in a forked child; its return value is the child's exit status. A child that
/// does not finish within 20 s is killed and reported as 99.
int in_child(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        int code = 98;
        try {
            code = body();
        } catch (...) {
            code = 97;
        }
        ::_exit(code);
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        }
        if (std::chrono::steady_clock::now() > give_up) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return 99;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

/// Threads blocked in a limiter's queue, as a blocking wait() does.
struct BlockedThreads {
    std::vector<std::shared_ptr<Waiter>> waiters;
    std::vector<std::thread> threads;
    std::atomic<int> queued{0};

    void start(const std::shared_ptr<Limiter>& lim, int n, Nanos timeout) {
        for (int i = 0; i < n; ++i) {
            auto q = lim->enqueue(1, timeout);
            ASSERT_TRUE(q.waiter);
            waiters.push_back(q.waiter);
            threads.emplace_back([w = q.waiter] {
                while (!w->wait_for(10 * kMs)) {
                }
            });
        }
    }
    void join() {
        for (auto& t : threads) {
            t.join();
        }
    }
};

bool all_cancelled(const std::vector<std::shared_ptr<Waiter>>& ws) {
    for (const auto& w : ws) {
        if (w->state() != Waiter::Cancelled) {
            return false;
        }
    }
    return true;
}

/// A timed wait in the child: it must time out on time, which needs a live engine thread and a
/// timer the child's limiter really asked for.
bool times_out(Limiter& lim) {
    auto q = lim.enqueue(1, 30 * kMs);
    return q.waiter && q.waiter->wait_for(10 * kSec) && q.waiter->outcome().reason == Reason::Timeout &&
           lim.queued_requests() == 0;
}

} // namespace

TEST(Fork, ChildDropsTheParentsWaitersAndServesItsOwn) {
    auto clock = MonotonicClock::instance();
    auto lim = std::make_shared<Concurrency>(clock, 2, kQueue);
    const Outcome a = lim->acquire(1);
    const Outcome b = lim->acquire(1);
    ASSERT_TRUE(a.acquired && b.acquired);
    BlockedThreads blocked;
    blocked.start(lim, 3, -1);
    blocked.start(lim, 2, kHour); // the engine thread holds a timer for these deadlines
    // Threads hammering other limiters, so their locks are taken and let go all the time.
    auto busy = std::make_shared<Concurrency>(clock, 1, kQueue);
    auto bucket = std::make_shared<TokenBucket>(clock, 4, 4, kMs, kQueue, false);
    std::atomic<bool> stop{false};
    std::vector<std::thread> hammers;
    for (int i = 0; i < 2; ++i) {
        hammers.emplace_back([&] {
            while (!stop.load()) {
                auto q = busy->enqueue(1, kMs);
                if (q.waiter) {
                    q.waiter->wait_for(kSec);
                }
                const Outcome& o = q.waiter ? q.waiter->outcome() : q.outcome;
                if (o.acquired) {
                    busy->give_back(1, o.tag);
                }
                auto t = bucket->enqueue(1, kMs);
                if (t.waiter) {
                    t.waiter->wait_for(kSec);
                }
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // let the hammers run into their locks
    const auto started = EngineThread::threads_started();

    const int status = in_child([&]() -> int {
        if (lim->queued_requests() != 0 || lim->statistics().current_queued_count != 0) {
            return 1; // the parent's requests are still queued
        }
        if (!all_cancelled(blocked.waiters)) {
            return 2;
        }
        if (lim->available_permits() != 0) {
            return 3; // the two leases are still held
        }
        auto mine = lim->enqueue(1, -1);
        if (!mine.waiter) {
            return 4;
        }
        lim->give_back(1, a.tag); // a lease of the parent's, released here: it serves the child's waiter
        if (mine.waiter->state() != Waiter::Completed || !mine.waiter->outcome().acquired) {
            return 5;
        }
        if (!all_cancelled(blocked.waiters)) {
            return 6; // nothing was given to a waiter of the parent's
        }
        if (!times_out(*lim)) {
            return 7;
        }
        if (EngineThread::threads_started() != started + 1) {
            return 8;
        }
        // The hammered limiters' locks are free and their queues empty. (A permit of `busy` that a
        // hammer held at the fork stays held: its thread is not here to release it.)
        if (busy->queued_requests() != 0 || bucket->queued_requests() != 0) {
            return 9;
        }
        for (int i = 0; i < 20; ++i) {
            auto q = busy->enqueue(1, kMs);
            if (q.waiter && !q.waiter->wait_for(5 * kSec)) {
                return 9;
            }
            const Outcome& o = q.waiter ? q.waiter->outcome() : q.outcome;
            if (o.acquired) {
                busy->give_back(1, o.tag);
            }
        }
        auto t = bucket->enqueue(1, kSec);
        if (t.waiter && (!t.waiter->wait_for(5 * kSec) || !t.waiter->outcome().acquired)) {
            return 10;
        }
        return 0;
    });
    stop.store(true);
    for (auto& t : hammers) {
        t.join();
    }
    // Parent: unaffected; its waiters are served by its releases.
    EXPECT_EQ(lim->queued_requests(), 5);
    lim->give_back(1, a.tag);
    lim->give_back(1, b.tag);
    EXPECT_EQ(blocked.waiters[0]->state(), Waiter::Completed);
    EXPECT_EQ(blocked.waiters[1]->state(), Waiter::Completed);
    lim->close();
    blocked.join();
    EXPECT_EQ(status, 0) << "the child failed check " << status;
}

TEST(Fork, EveryKindTimesOutInTheChildDespiteTheParentsTimer) {
    auto clock = MonotonicClock::instance();
    std::vector<std::shared_ptr<Limiter>> lims{
        std::make_shared<Concurrency>(clock, 1, kQueue),
        std::make_shared<TokenBucket>(clock, 1, 1, kHour, kQueue, false),
        std::make_shared<FixedWindow>(clock, 1, kHour, kQueue, false),
        std::make_shared<SlidingWindow>(clock, 1, kHour, 4, kQueue, false),
        std::make_shared<SlidingWindowCounter>(clock, 1, kHour, kQueue, false),
    };
    BlockedThreads blocked;
    for (auto& lim : lims) {
        ASSERT_TRUE(lim->acquire(1).acquired);
        blocked.start(lim, 2, kHour); // a timer an hour away for each
    }
    const int status = in_child([&]() -> int {
        int code = 0;
        for (auto& lim : lims) {
            ++code;
            if (lim->statistics().current_queued_count != 0 || !times_out(*lim)) {
                return code;
            }
        }
        return all_cancelled(blocked.waiters) ? 0 : 20;
    });
    for (auto& lim : lims) {
        EXPECT_EQ(lim->queued_requests(), 2); // the parent's are still there
        lim->close();
    }
    blocked.join();
    EXPECT_EQ(status, 0) << "the child failed check " << status;
}

TEST(Fork, KeyedTableDropsTheParentsWaitersAndEvictsInTheChild) {
    auto clock = MonotonicClock::instance();
    auto k = std::make_shared<PerKeyLimiter>(clock, PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(2), kQueue),
                                             20 * kMs, 0);
    const Outcome a = k->acquire("a", 1).outcome;
    const Outcome b = k->acquire("a", 1).outcome;
    ASSERT_TRUE(a.acquired && b.acquired);
    std::vector<std::shared_ptr<Waiter>> waiters;
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) {
        auto q = k->enqueue("a", 1, i == 0 ? kHour : -1); // the key becomes a full limiter with a queue
        ASSERT_TRUE(q.enqueued.waiter);
        waiters.push_back(q.enqueued.waiter);
        threads.emplace_back([w = q.enqueued.waiter] {
            while (!w->wait_for(10 * kMs)) {
            }
        });
    }
    std::atomic<bool> stop{false};
    std::thread hammer([&] {
        for (int i = 0; !stop.load(); ++i) {
            const std::string key = "h" + std::to_string(i % 50);
            const Outcome o = k->acquire(key, 1).outcome;
            if (o.acquired) {
                k->give_back(key, 1, o.tag);
            }
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));

    const int status = in_child([&]() -> int {
        EngineThread::instance().resume(); // what the bindings do after a fork: evictions go on
        const auto sa = k->statistics("a");
        if (!sa || sa->current_queued_count != 0 || sa->current_available_permits != 0) {
            return 1;
        }
        if (!all_cancelled(waiters)) {
            return 2;
        }
        auto mine = k->enqueue("a", 1, -1);
        if (!mine.enqueued.waiter) {
            return 3;
        }
        k->give_back("a", 1, a.tag); // a lease held at the fork serves the child's waiter
        if (mine.enqueued.waiter->state() != Waiter::Completed || !mine.enqueued.waiter->outcome().acquired) {
            return 4;
        }
        k->give_back("a", 1, mine.enqueued.waiter->outcome().tag);
        k->give_back("a", 1, b.tag);
        if (k->statistics("a")->current_available_permits != 2) {
            return 5;
        }
        // A lease the hammer held at the fork stays held here (nobody releases it): its key is in
        // use. Every other key is idle now, and the engine thread evicts them all on time.
        std::size_t in_use = 0;
        for (int i = 0; i < 50; ++i) {
            const auto s = k->statistics("h" + std::to_string(i));
            in_use += s && s->current_available_permits < 2 ? 1 : 0;
        }
        for (int i = 0; i < 500 && k->size() > in_use; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return k->size() == in_use ? 0 : 6;
    });
    stop.store(true);
    hammer.join();
    EXPECT_EQ(k->statistics("a")->current_queued_count, 3);
    k->close();
    for (auto& t : threads) {
        t.join();
    }
    EXPECT_EQ(status, 0) << "the child failed check " << status;
}

TEST(Fork, AChildForkedWhileAThreadTakesOnSharedAmountsCanTakeOnTheNext) {
    // A limiter following amounts kept elsewhere (shared memory's, here a word of this test): a
    // thread of the parent is taking new ones on when another forks. The fork waits for it; the
    // child, a thread alone, takes on the amounts published after the fork without hanging.
    auto clock = make_clock();
    auto limiter = std::make_shared<FixedWindow>(clock, 10, kHour, kQueue, false);
    std::atomic<std::uint32_t> generation{0};
    std::atomic<std::int64_t> published{10};
    std::atomic<bool> inside{false};
    std::atomic<bool> let_go{false};
    FixedWindow* raw = limiter.get();
    auto shared = std::make_unique<SharedAmounts>();
    shared->generation = &generation;
    shared->read = [&](std::int64_t(&a)[2]) {
        a[0] = published.load();
        a[1] = 0;
        return generation.load();
    };
    shared->publish = [&](const std::int64_t(&a)[2]) {
        published.store(a[0]);
        return generation.fetch_add(1) + 1;
    };
    shared->apply = [&](const std::int64_t(&a)[2]) {
        inside = true;
        while (!let_go.load()) { // (slow in the parent: the fork comes meanwhile)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        raw->take_on(FixedWindowRule(a[0], kHour));
    };
    limiter->follow(std::move(shared), 0);
    published = 6;
    generation = 1;
    std::thread taking([&] { (void)limiter->available_permits(); });
    while (!inside.load()) {
        std::this_thread::yield();
    }
    std::thread releasing([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        let_go = true;
    });
    const int status = in_child([&] {
        if (limiter->max_permits() != 6) {
            return 1; // the fork came before the parent's thread was done
        }
        published = 4;
        generation = 2;
        return limiter->available_permits() == 4 && limiter->max_permits() == 4 ? 0 : 2;
    });
    taking.join();
    releasing.join();
    EXPECT_EQ(status, 0);
    EXPECT_EQ(limiter->max_permits(), 6);
}
