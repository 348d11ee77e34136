// Multi-threaded stress of the engine, checked by invariants; built also under ThreadSanitizer
// and AddressSanitizer+UBSan by scripts/test. Exits non-zero on the first broken invariant.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "permits/cancel_scope.hpp"
#include "permits/concurrency.hpp"
#include "permits/fixed_window.hpp"
#include "permits/per_key.hpp"
#include "permits/sliding_window.hpp"
#include "permits/sliding_window_counter.hpp"
#include "permits/token_bucket.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "permits/shm_key_table.hpp"
#include "permits/shm_keyed.hpp"
#include "permits/shm_limiters.hpp"
#endif

using namespace permits;

namespace {

constexpr int kThreads = 4;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "stress: invariant broken: %s\n", what);
        std::exit(1);
    }
}

template <class F> void run_threads(int n, F&& body) {
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) {
        ts.emplace_back([&body, i] { body(i); });
    }
    for (auto& t : ts) {
        t.join();
    }
}

// Never more holders than the limit; every permit comes back; waiters, cancels and timeouts race.
void concurrency_holders() {
    auto clock = MonotonicClock::instance();
    auto lim = std::make_shared<Concurrency>(clock, 3, QueueOptions{64, QueueOrder::OldestFirst});
    std::atomic<int> holders{0};
    std::atomic<long> granted{0}, failed{0}, attempts{0};
    run_threads(kThreads, [&](int seed) {
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int i = 0; i < 4000; ++i) {
            attempts.fetch_add(1);
            Outcome o;
            const int mode = static_cast<int>(rng() % 3);
            if (mode == 0) {
                o = lim->acquire(1);
            } else {
                auto q = lim->enqueue(1, mode == 1 ? -1 : 200'000);
                if (q.waiter) {
                    if (rng() % 8 == 0 && lim->cancel(*q.waiter)) {
                        failed.fetch_add(1);
                        continue;
                    }
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                    o = q.waiter->outcome();
                } else {
                    o = q.outcome;
                }
            }
            if (!o.acquired) {
                failed.fetch_add(1);
                continue;
            }
            granted.fetch_add(1);
            check(holders.fetch_add(1) + 1 <= 3, "concurrency: more holders than permit_limit");
            holders.fetch_sub(1);
            lim->give_back(1, o.tag);
        }
    });
    check(granted + failed == attempts, "concurrency: every attempt ends granted or failed");
    check(lim->available_permits() == 3, "concurrency: all permits back");
    check(lim->statistics().current_queued_count == 0, "concurrency: queue empty");
    std::printf("concurrency: %ld granted, %ld failed\n", granted.load(), failed.load());
}

// Blocking waits in cancel scopes (a chain's wait in its members) cancelled from another thread
// while timed and untimed waits are granted, time out and are given back: every wait ends (granted,
// timed out or cancelled), never more holders than the limit, every permit back.
void cancel_scopes() {
    auto clock = MonotonicClock::instance();
    auto lim = std::make_shared<Concurrency>(clock, 2, QueueOptions{kNoQueueLimit, QueueOrder::OldestFirst});
    std::mutex mu;
    std::vector<std::shared_ptr<CancelScope>> live(kThreads);
    std::atomic<bool> stop{false};
    std::atomic<int> holders{0};
    std::atomic<long> granted{0}, timed_out{0}, cancelled{0};
    std::thread canceller([&] {
        std::mt19937 rng(99);
        while (!stop.load()) {
            std::shared_ptr<CancelScope> scope;
            {
                std::lock_guard<std::mutex> lock(mu);
                scope = live[rng() % kThreads];
            }
            if (scope) {
                scope->cancel();
            }
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
    });
    run_threads(kThreads, [&](int seed) {
        std::mt19937 rng(static_cast<unsigned>(seed) + 1000);
        for (int i = 0; i < 1500; ++i) {
            auto scope = std::make_shared<CancelScope>();
            {
                std::lock_guard<std::mutex> lock(mu);
                live[static_cast<std::size_t>(seed)] = scope;
            }
            scope->enter();
            Outcome o;
            auto q = lim->enqueue(1, rng() % 3 == 0 ? 100'000 : -1);
            if (q.waiter) {
                const CancelScope::Watch watch(lim, q.waiter);
                while (!q.waiter->wait_for(1'000'000'000) && q.waiter->state() != Waiter::Cancelled) {
                }
                if (q.waiter->state() == Waiter::Cancelled) {
                    cancelled.fetch_add(1);
                    scope->leave();
                    continue;
                }
                o = q.waiter->outcome();
            } else {
                o = q.outcome;
            }
            scope->leave();
            if (!o.acquired) {
                check(o.reason == Reason::Timeout, "scopes: a wait fails only by its timeout");
                timed_out.fetch_add(1);
                continue;
            }
            granted.fetch_add(1);
            check(holders.fetch_add(1) + 1 <= 2, "scopes: more holders than permit_limit");
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
            holders.fetch_sub(1);
            lim->give_back(1, o.tag);
        }
    });
    stop = true;
    canceller.join();
    check(granted + timed_out + cancelled == kThreads * 1500L, "scopes: every wait ends");
    check(lim->available_permits() == 2, "scopes: all permits back");
    check(lim->statistics().current_queued_count == 0, "scopes: queue empty");
    std::printf("scopes: %ld granted, %ld timed out, %ld cancelled\n", granted.load(), timed_out.load(),
                cancelled.load());
}

// Time frozen: exactly the bucket's tokens are granted, however many threads ask.
void token_bucket_exact() {
    auto clock = std::make_shared<ManualClock>(0);
    auto lim = std::make_shared<TokenBucket>(clock, 5000, 10, 1'000'000, QueueOptions{}, false);
    std::atomic<long> granted{0};
    run_threads(kThreads, [&](int) {
        for (int i = 0; i < 3000; ++i) {
            granted += lim->acquire(1 + i % 2).acquired ? 1 + i % 2 : 0;
        }
    });
    check(granted == 5000, "token bucket: grants equal the tokens");
    std::printf("token bucket: %ld tokens granted\n", granted.load());
}

// Windows under a moving clock: no window ever grants more than the limit.
template <class L, class Make>
void windows_never_exceed(const char* name, Make make, std::int64_t limit, std::int64_t span_tags) {
    auto clock = std::make_shared<ManualClock>(0);
    std::shared_ptr<L> lim = make(clock);
    std::mutex mu;
    std::map<std::int64_t, std::int64_t> per_tag;
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    std::atomic<long> attempts{0};
    std::thread ticker([&] {
        while (started.load() < kThreads) {
            std::this_thread::yield();
        }
        for (int i = 0; i < 2000; ++i) {
            clock->advance(37'000);
            // Let the acquirers make some attempts within each step, however they are scheduled.
            const long target = attempts.load() + 64;
            while (attempts.load() < target) {
                std::this_thread::yield();
            }
        }
        stop = true;
    });
    run_threads(kThreads, [&](int) {
        std::map<std::int64_t, std::int64_t> mine;
        started.fetch_add(1);
        while (!stop.load()) {
            const Outcome o = lim->acquire(1);
            attempts.fetch_add(1);
            if (o.acquired) {
                ++mine[o.tag];
            }
        }
        std::lock_guard<std::mutex> lock(mu);
        for (auto [t, c] : mine) {
            per_tag[t] += c;
        }
    });
    ticker.join();
    // Any `span_tags` consecutive tags (segments of one window) hold at most `limit` grants.
    for (auto it = per_tag.begin(); it != per_tag.end(); ++it) {
        std::int64_t sum = 0;
        for (auto jt = it; jt != per_tag.end() && jt->first < it->first + span_tags; ++jt) {
            sum += jt->second;
        }
        check(sum <= limit, name);
    }
    std::printf("%s: %zu windows checked\n", name, per_tag.size());
}

// reset() racing acquires, refunds and queued waits on a clock that never moves: every reset gives one
// whole limit more, and no refund of a grant made before a reset's end ever adds to it.
template <class L, class Make> void resets_never_exceed(const char* name, Make make) {
    constexpr std::int64_t kLimit = 40;
    constexpr int kResets = 200;
    auto clock = std::make_shared<ManualClock>(5 * 1'000'000'000LL);
    std::shared_ptr<L> lim = make(clock);
    std::atomic<long> granted{0};
    std::atomic<long> may_have_landed{0}; // refunds begun before the first reset ended
    std::atomic<bool> first_reset_done{false};
    std::atomic<bool> stop{false};
    std::thread resetter([&] {
        for (int i = 0; i < kResets; ++i) {
            check(lim->reset(), "a time-based limiter resets");
            first_reset_done = true;
            std::this_thread::yield();
        }
        stop = true;
    });
    run_threads(kThreads, [&](int t) {
        int i = 0;
        while (!stop.load()) {
            if (t == 0 && i % 7 == 0) { // a queued wait, served by a reset or cancelled
                auto q = lim->enqueue(2, -1);
                if (q.waiter) {
                    if (!lim->cancel(*q.waiter)) { // completed (or completing) by a reset: its outcome
                        while (!q.waiter->wait_for(1'000'000'000)) {
                        }
                        granted += q.waiter->outcome().acquired ? 2 : 0;
                    }
                } else if (q.outcome.acquired) {
                    granted += 2;
                }
            }
            const Outcome o = lim->acquire(1);
            if (o.acquired) {
                granted += 1;
                if (++i % 3 == 0) {
                    if (!first_reset_done.load()) {
                        may_have_landed += 1;
                    }
                    lim->give_back(1, o.tag);
                }
            }
        }
    });
    resetter.join();
    check(granted.load() <= kLimit * (kResets + 1) + may_have_landed.load(), name);
    std::printf("%s: %ld granted over %d resets\n", name, granted.load(), kResets);
}

// Queued waiters served by the timer while threads also cancel and the limiter finally closes.
void waiters_and_close() {
    auto clock = std::make_shared<ManualClock>(0);
    auto lim = std::make_shared<TokenBucket>(clock, 2, 1, 1000, QueueOptions{1000, QueueOrder::OldestFirst}, false);
    std::atomic<long> done{0};
    std::atomic<bool> stop{false};
    std::thread ticker([&] {
        while (!stop.load()) {
            clock->advance(500);
        }
    });
    run_threads(kThreads, [&](int seed) {
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int i = 0; i < 500; ++i) {
            auto q = lim->enqueue(1, -1);
            if (q.waiter) {
                if (rng() % 4 == 0) {
                    lim->cancel(*q.waiter);
                } else {
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                }
            }
            done.fetch_add(1);
        }
    });
    stop = true;
    ticker.join();
    lim->close();
    check(done == kThreads * 500, "waiters: every request ended");
    std::printf("waiters: %ld requests ended\n", done.load());
}

// Short-lived limiters on the engine thread, each closed or dropped with timers pending while
// the thread runs timers and others register and unregister: every limiter's timers leave the
// heap once its queue is empty, and nothing races (TSan) or leaks (ASan).
void limiters_come_and_go() {
    auto clock = MonotonicClock::instance();
    const std::size_t before = EngineThread::instance().pending();
    run_threads(kThreads, [&](int seed) {
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int i = 0; i < 2000; ++i) {
            auto lim = std::make_shared<TokenBucket>(clock, 1, 1, 1'000'000'000,
                                                     QueueOptions{4, QueueOrder::OldestFirst}, false);
            lim->acquire(1);
            auto a = lim->enqueue(1, static_cast<Nanos>(rng() % 200'000)); // some expire on the engine thread
            auto b = lim->enqueue(1, 3'600'000'000'000);
            switch (rng() % 3) {
            case 0: lim->close(); break;
            case 1:
                for (auto* q : {&a, &b}) {
                    if (q->waiter) {
                        lim->cancel(*q->waiter);
                    }
                }
                break;
            default: break; // dropped with its waiters still queued
            }
        }
    });
    // The engine thread may still hold the last reference to one (running its timer) for a moment.
    for (int i = 0; i < 500 && EngineThread::instance().pending() != before; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    check(EngineThread::instance().pending() == before, "come and go: every limiter's timers left the heap");
    std::printf("come and go: %d limiters, no timer left behind\n", kThreads * 2000);
}

// Per-key limiters under racing acquires, creations, evictions (a ticking clock) and waits:
// with time frozen each key grants exactly its limit; with time moving nothing races (TSan).
void per_key_partitions() {
    auto frozen = std::make_shared<ManualClock>(0);
    auto per_key = std::make_shared<PerKeyLimiter>(
        frozen, PerKeyTemplate::of<FixedWindow>(frozen, FixedWindowRule(100, 1'000'000), QueueOptions{}), 1000, 0);
    std::atomic<long> granted{0};
    run_threads(kThreads, [&](int t) {
        for (int i = 0; i < 3000; ++i) {
            granted += per_key->acquire(std::to_string((i + t) % 5), 1).outcome.acquired ? 1 : 0;
        }
    });
    check(granted == 500, "per-key: each of 5 keys grants exactly its limit");
    // The sliding window's compact records (20 segments) likewise.
    auto windows = std::make_shared<PerKeyLimiter>(
        frozen, PerKeyTemplate::sliding_window(frozen, 100, 20'000'000, 20, QueueOptions{}), 1000, 0);
    granted = 0;
    run_threads(kThreads, [&](int t) {
        for (int i = 0; i < 3000; ++i) {
            granted += windows->acquire(std::to_string((i + t) % 5), 1).outcome.acquired ? 1 : 0;
        }
    });
    check(granted == 500, "per-key sliding window: each of 5 keys grants exactly its limit");
    windows->check_invariants();
    // And the sliding log's (specs.parse's rates), whose records keep a time per segment.
    auto logs = std::make_shared<PerKeyLimiter>(
        frozen, PerKeyTemplate::sliding_window(frozen, 100, 20'000'000, -32, QueueOptions{}), 1000, 0);
    granted = 0;
    run_threads(kThreads, [&](int t) {
        for (int i = 0; i < 3000; ++i) {
            granted += logs->acquire(std::to_string((i + t) % 5), 1).outcome.acquired ? 1 : 0;
        }
    });
    check(granted == 500, "per-key sliding log: each of 5 keys grants exactly its limit");
    logs->check_invariants();

    auto clock = std::make_shared<ManualClock>(0);
    auto churn = std::make_shared<PerKeyLimiter>(
        clock,
        PerKeyTemplate::of<FixedWindow>(clock, FixedWindowRule(3, 1'000'000), QueueOptions{8, QueueOrder::OldestFirst}),
        2'000'000, 16);
    std::atomic<bool> stop{false};
    std::thread ticker([&] {
        while (!stop.load()) {
            clock->advance(250'000);
        }
    });
    run_threads(kThreads, [&](int t) {
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int i = 0; i < 3000; ++i) {
            const std::string key = std::to_string(rng() % 40);
            if (i % 7 == 0) {
                auto q = churn->enqueue(key, 1, 3'000'000).enqueued;
                if (q.waiter) {
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                }
            } else if (i % 11 == 0) {
                (void)churn->totals(); // holds each shard in turn: new keys at the bound wait for it
            } else {
                churn->acquire(key, 1);
            }
        }
    });
    stop = true;
    ticker.join();
    check(churn->size() <= 16, "per-key: the bound holds");
    churn->check_invariants();
    churn->close();

    // Sliding window keys: records created, refunded, promoted by waits and evicted while others race.
    auto window_churn = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::sliding_window(clock, 3, 2'000'000, 20, QueueOptions{8, QueueOrder::OldestFirst}),
        2'000'000, 16);
    stop = false;
    std::thread window_ticker([&] {
        while (!stop.load()) {
            clock->advance(100'000);
        }
    });
    run_threads(kThreads, [&](int t) {
        std::mt19937 rng(static_cast<unsigned>(t) + 50);
        for (int i = 0; i < 3000; ++i) {
            const std::string key = std::to_string(rng() % 40);
            if (i % 7 == 0) {
                auto q = window_churn->enqueue(key, 1, 3'000'000).enqueued;
                if (q.waiter) {
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                }
            } else if (const Outcome o = window_churn->acquire(key, 1).outcome; o.acquired && i % 3 == 0) {
                window_churn->give_back(key, 1, o.tag); // a refund
            }
        }
    });
    stop = true;
    window_ticker.join();
    check(window_churn->size() <= 16, "per-key sliding window: the bound holds");
    window_churn->check_invariants();
    window_churn->close();

    // Held and given back through the table while keys come and go at the bound.
    auto held = std::make_shared<PerKeyLimiter>(
        clock, PerKeyTemplate::of<Concurrency>(clock, ConcurrencyRule(2), QueueOptions{}), 1'000'000, 12);
    std::atomic<bool> over{false};
    std::array<std::atomic<int>, 20> holders{};
    run_threads(kThreads, [&](int t) {
        std::mt19937 rng(static_cast<unsigned>(t) + 100);
        for (int i = 0; i < 3000; ++i) {
            const auto k = static_cast<std::size_t>(rng() % 20);
            const Outcome o = held->acquire(std::to_string(k), 1).outcome;
            if (o.acquired) {
                if (holders[k].fetch_add(1) + 1 > 2) {
                    over = true;
                }
                holders[k].fetch_sub(1);
                held->give_back(std::to_string(k), 1, o.tag);
            }
        }
    });
    check(!over.load(), "per-key: a key never lends more than its limit");
    for (int k = 0; k < 20; ++k) {
        const auto s = held->statistics(std::to_string(k));
        check(!s || s->current_available_permits == 2, "per-key: every permit is back");
    }
    held->check_invariants();
    held->close();
    std::printf("per-key: %ld granted with time frozen; churn done\n", granted.load());
}

} // namespace

#if defined(__linux__)
// Shared memory: threads on two mappings of one segment (as two processes see it). A named token
// bucket grants exactly its tokens; a shared concurrency limiter never has more holders than its
// limit, its waits are served, and every permit comes back; per-key totals are exact.
/// One segment (named after `what` and this process) opened twice, as two processes map it; its
/// name removed at once.
std::array<std::shared_ptr<permits::shm::Store>, 2> two_mappings(const char* what, const std::shared_ptr<Clock>& clock,
                                                                 const permits::shm::Segment::Options& opts) {
    using namespace permits::shm;
    const std::string name = std::string(what) + "-" + std::to_string(::getpid());
    std::array<std::shared_ptr<Store>, 2> stores{std::make_shared<Store>(Segment::open(name, opts), clock),
                                                 std::make_shared<Store>(Segment::open(name, opts), clock)};
    Segment::unlink(name);
    return stores;
}

void shm_limiters() {
    using namespace permits::shm;
    auto clock = std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
    const auto stores = two_mappings("stress", clock, {256, 0600, ClockKind::Monotonic});
    const QueueOptions queue{64, QueueOrder::OldestFirst};
    const Nanos hour = 3'600'000'000'000;

    std::array<std::shared_ptr<TokenBucket>, 2> buckets;
    std::array<std::shared_ptr<Limiter>, 2> conc;
    std::array<std::shared_ptr<KeyTable>, 2> tables;
    std::array<std::shared_ptr<KeyTable>, 2> conc_keys;
    for (int i = 0; i < 2; ++i) {
        buckets[i] = stores[i]->token_bucket("tb", TokenBucketRule(1000, 1, hour), queue);
        conc[i] = stores[i]->concurrency("c", 3, hour, queue);
        tables[i] = KeyTable::open(stores[i], "keys", {params_of(FixedWindowRule(100, hour)), queue, hour}, 64, hour);
        conc_keys[i] =
            KeyTable::open(stores[i], "ckeys", {params_of_concurrency(2, hour), QueueOptions{}, hour}, 8, hour);
    }
    std::atomic<long> granted{0};
    std::atomic<int> holders{0};
    std::atomic<int> key_holders{0};
    std::array<std::atomic<long>, 4> per_key{};
    run_threads(kThreads, [&](int t) {
        auto& bucket = *buckets[t % 2];
        auto& c = *conc[t % 2];
        std::array<std::shared_ptr<Limiter>, 4> keys;
        for (int k = 0; k < 4; ++k) {
            keys[k] = tables[t % 2]->limiter_for("key-" + std::to_string(k));
        }
        // A concurrency key: its holders' entries and the holder slots, freed whenever a thread's
        // mapping holds nothing, race with the other threads' takes.
        auto ckey = conc_keys[t % 2]->limiter_for("hot");
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int i = 0; i < 3000; ++i) {
            const Outcome ko = ckey->acquire(1);
            if (ko.acquired) {
                check(key_holders.fetch_add(1) < 2, "shm: more holders of a concurrency key than its limit");
                key_holders.fetch_sub(1);
                ckey->give_back(1, ko.tag);
            }
            if (bucket.acquire(1).acquired) {
                granted.fetch_add(1);
            }
            const int k = static_cast<int>(rng() % 4);
            if (keys[k]->acquire(1).acquired) {
                per_key[k].fetch_add(1);
            }
            Outcome o;
            if (i % 2 == 0) {
                o = c.acquire(1);
            } else {
                auto q = c.enqueue(1, 50'000'000);
                if (q.waiter) {
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                    o = q.waiter->outcome();
                } else {
                    o = q.outcome;
                }
            }
            if (o.acquired) {
                check(holders.fetch_add(1) < 3, "shm: more concurrency holders than the limit");
                holders.fetch_sub(1);
                c.give_back(1, o.tag);
            }
        }
    });
    check(granted.load() == 1000, "shm: a shared token bucket granted other than its tokens");
    for (const auto& k : per_key) {
        check(k.load() == 100, "shm: a shared key granted other than its limit");
    }
    check(conc[0]->available_permits() == 3 && conc[1]->available_permits() == 3,
          "shm: a concurrency permit did not come back");
    // The ledger agrees: nobody holds anything (a change settled with a wrong delta would show here).
    for (const auto& slot : stores[0]->segment().header().named) {
        if (slot.ready.load() == 1 && slot.kind == Kind::Concurrency) {
            const auto view = ConcurrencyView::over(stores[0]->segment().at<char>(slot.offset), slot.values[0]);
            std::int64_t held = 0;
            for (std::uint32_t h = 0; h < kMaxHolders; ++h) {
                held += view.held_by(h);
            }
            check(held == 0 && view.available() == 3, "shm: the concurrency ledger does not add up");
        }
    }
    // Nothing is held: every holder slot was freed (a use counted and never let go would keep one).
    for (const auto& slot : stores[0]->segment().header().holders) {
        const Pair w = slot.word.load();
        check((static_cast<std::uint64_t>(w.a) & 0xffffffffULL) == 0 && w.b == 0,
              "shm: a holder slot is kept by a process that holds nothing");
    }
    std::printf("shm: %ld tokens granted over two mappings, per-key exact, concurrency permits all back\n",
                granted.load());
}
#endif

#if defined(__linux__)
// Leases the segment forgets while they are held: one thread keeps having this process judged dead
// (its holder slot reclaimed, as another process does to a holder paused past lease_ttl), while the
// others take, look at (taking back or losing) and release leases of a named limiter and a key. No
// permit is ever lost for good: once every lease is released, every permit is back and no holder
// slot is kept.
void shm_lost_leases() {
    using namespace permits::shm;
    const std::string name = "stress-lost-" + std::to_string(::getpid());
    auto clock = std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
    auto store = std::make_shared<Store>(Segment::open(name, {64, 0600, ClockKind::Monotonic}), clock);
    Segment::unlink(name);
    const Nanos hour = 3'600'000'000'000;
    auto c = store->concurrency("c", 3, hour, QueueOptions{0, QueueOrder::OldestFirst});
    auto keys = KeyTable::open(store, "ckeys", {params_of_concurrency(2, hour), QueueOptions{}, hour}, 8, hour);
    auto key = keys->limiter_for("hot");
    Segment& seg = store->segment();
    std::atomic<bool> done{false};
    std::atomic<long> reclaimed{0};
    std::thread reclaimer([&] {
        while (!done.load()) {
            Holding h;
            if (seg.current(h)) {
                HolderSlot& slot = seg.header().holders[h.index];
                slot.pid_ns.store(1); // another namespace's, whose heartbeat stopped
                slot.heartbeat.store(monotonic_now() - hour);
                if (seg.reclaim_holder(h.index, 1'000'000)) {
                    reclaimed.fetch_add(1);
                }
            }
            std::this_thread::yield();
        }
    });
    std::atomic<long> lost{0};
    run_threads(kThreads, [&](int t) {
        // Until the holder was reclaimed under them often enough (or a bound, should it never be).
        for (int i = 0; i < 400000 && reclaimed.load() < 300; ++i) {
            Limiter& l = (i + t) % 2 == 0 ? *c : *key;
            const Outcome o = l.acquire(1);
            if (!o.acquired) {
                continue;
            }
            if (l.lost(o.tag)) {
                lost.fetch_add(1);
            }
            auto& shared = dynamic_cast<SharedLimiter&>(l);
            shared.give_back_lease(1, o.tag);
        }
    });
    done.store(true);
    reclaimer.join();
    check(c->available_permits() == 3, "shm: a named permit was lost for good after take-backs and losses");
    check(key->available_permits() == 2, "shm: a key's permit was lost for good after take-backs and losses");
    for (const auto& slot : seg.header().holders) {
        const Pair w = slot.word.load();
        check((static_cast<std::uint64_t>(w.a) & 0xffffffffULL) == 0 && w.b == 0,
              "shm: a holder slot is kept after every lease was released");
    }
    std::printf("shm: %ld reclaims of a live holder, %ld leases lost, every permit back\n", reclaimed.load(),
                lost.load());
}

// A process holding every permit of a concurrency limiter is alive to the others: never reclaimed
// while it holds. Forked 30 ms after this process started: under qemu-user a child reads its
// parent's start time in its own /proc/self/stat, not the one the others read (it was taken for
// a reused pid, and its permits handed out again).
void shm_live_holder_kept() {
    using namespace permits::shm;
    ::usleep(30'000);
    auto* step = static_cast<std::atomic<int>*>(
        ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    check(step != MAP_FAILED, "shm: mmap for the step");
    new (step) std::atomic<int>(0);
    const std::string name = "stress-live-" + std::to_string(::getpid());
    const Nanos hour = 3'600'000'000'000;
    const auto open = [&] {
        auto clock = std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
        auto store = std::make_shared<Store>(Segment::open(name, {64, 0600, ClockKind::Monotonic}), clock);
        return std::make_pair(store, store->concurrency("c", 2, hour, QueueOptions{}));
    };
    const auto run = [](const auto& body) {
        const pid_t pid = ::fork();
        check(pid >= 0, "shm: fork");
        if (pid == 0) {
            ::_exit(body() ? 0 : 1);
        }
        return pid;
    };
    const pid_t holder = run([&] {
        auto [store, conc] = open();
        step->store(conc->acquire(2).acquired ? 1 : -1);
        while (step->load() == 1) {
            ::usleep(1000);
        }
        return true;
    });
    while (step->load() == 0) {
        ::usleep(1000);
    }
    check(step->load() == 1, "shm: the holder took every permit");
    const pid_t other = run([&] {
        auto [store, conc] = open();
        return !conc->acquire(1).acquired;
    });
    int status = 0;
    const bool refused = ::waitpid(other, &status, 0) == other && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    step->store(2);
    check(::waitpid(holder, &status, 0) == holder && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "shm: the holder failed");
    Segment::unlink(name);
    check(refused, "shm: a live holder's permits were handed to another process");
}
// Processes, not threads: 4 forked processes (before this one starts any thread) on one segment by
// name. Exact totals for a token bucket and a key; a concurrency limiter's holders, counted in
// memory the processes share, never exceed its limit.
void shm_processes() {
    using namespace permits::shm;
    struct Shared {
        std::atomic<long> granted{0};
        std::atomic<long> key_granted{0};
        std::atomic<int> holders{0};
        std::atomic<int> key_holders{0};
        std::atomic<int> broken{0};
    };
    void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    check(mem != MAP_FAILED, "shm: mmap for the counters");
    auto* shared = new (mem) Shared();
    const std::string name = "stress-procs-" + std::to_string(::getpid());
    const Nanos hour = 3'600'000'000'000;
    constexpr int kProcesses = 4;
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
        const pid_t pid = ::fork();
        check(pid >= 0, "shm: fork");
        if (pid > 0) {
            children.push_back(pid);
            continue;
        }
        {
            auto clock = std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
            auto store = std::make_shared<Store>(Segment::open(name, {64, 0600, ClockKind::Monotonic}), clock);
            auto bucket = store->token_bucket("tb", TokenBucketRule(2000, 1, hour), QueueOptions{});
            auto conc = store->concurrency("c", 2, hour, QueueOptions{});
            auto ckey = KeyTable::open(store, "ckeys", {params_of_concurrency(2, hour), QueueOptions{}, hour}, 16, hour)
                            ->limiter_for("hot");
            auto key =
                KeyTable::open(store, "keys", {params_of(FixedWindowRule(300, hour)), QueueOptions{}, hour}, 16, hour)
                    ->limiter_for("hot");
            for (int i = 0; i < 2000; ++i) {
                if (bucket->acquire(1).acquired) {
                    shared->granted.fetch_add(1);
                }
                if (key->acquire(1).acquired) {
                    shared->key_granted.fetch_add(1);
                }
                const Outcome o = conc->acquire(1);
                if (o.acquired) {
                    if (shared->holders.fetch_add(1) >= 2) {
                        shared->broken.fetch_add(1);
                    }
                    shared->holders.fetch_sub(1);
                    conc->give_back(1, o.tag);
                }
                const Outcome ko = ckey->acquire(1);
                if (ko.acquired) {
                    if (shared->key_holders.fetch_add(1) >= 2) {
                        shared->broken.fetch_add(1);
                    }
                    shared->key_holders.fetch_sub(1);
                    ckey->give_back(1, ko.tag);
                }
            }
        }
        ::_exit(0);
    }
    for (const pid_t pid : children) {
        int status = 0;
        check(::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "shm: a process failed");
    }
    {
        // Every process gave back all it took: no holder slot is kept.
        auto seg = Segment::open(name, {64, 0600, ClockKind::Monotonic});
        for (const auto& slot : seg->header().holders) {
            const Pair w = slot.word.load();
            check((static_cast<std::uint64_t>(w.a) & 0xffffffffULL) == 0 && w.b == 0,
                  "shm: a holder slot is kept by a process that holds nothing");
        }
    }
    Segment::unlink(name);
    check(shared->broken.load() == 0, "shm: more concurrency holders across processes than the limit");
    check(shared->granted.load() == 2000, "shm: processes got other than a shared token bucket's tokens");
    check(shared->key_granted.load() == 300, "shm: processes got other than a shared key's limit");
    std::printf("shm: %d processes, %ld tokens and %ld key grants, exact\n", kProcesses, shared->granted.load(),
                shared->key_granted.load());
    ::munmap(mem, sizeof(Shared));
}
#endif

#if defined(__SANITIZE_THREAD__)
#define PERMITS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PERMITS_UNDER_TSAN 1
#endif
#endif

#if defined(__linux__)
// This process's side of a shared per-key table (KeyedLimiter) on two mappings: threads acquire keys
// from their records, wait in the keys' Limiters (made and dropped meanwhile: two keys kept of
// six), and take and release a concurrency key through its Limiter. Every key grants exactly its
// limit over both paths; the concurrency key never has more holders than its limit, and every
// permit of it comes back.
void shm_keyed() {
    using namespace permits::shm;
    auto clock = std::make_shared<MonotonicClock>(MonotonicClock::Source::Monotonic);
    const auto stores = two_mappings("stress-keyed", clock, {256, 0600, ClockKind::Monotonic});
    const Nanos hour = 3'600'000'000'000;
    const QueueOptions queue{64, QueueOrder::OldestFirst};
    std::array<std::shared_ptr<KeyedLimiter>, 2> keyed;
    std::array<std::shared_ptr<KeyedLimiter>, 2> conc;
    for (int i = 0; i < 2; ++i) {
        keyed[i] = std::make_shared<KeyedLimiter>(
            KeyTable::open(stores[i], "keys", {params_of(FixedWindowRule(100, hour)), queue, hour}, 64, hour), 2);
        conc[i] = std::make_shared<KeyedLimiter>(
            KeyTable::open(stores[i], "ckeys", {params_of_concurrency(2, hour), queue, hour}, 8, hour), 2);
    }
    std::array<std::atomic<long>, 6> per_key{};
    std::atomic<int> holders{0};
    run_threads(kThreads, [&](int t) {
        KeyedLimiter& k = *keyed[t % 2];
        KeyedLimiter& c = *conc[t % 2];
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int i = 0; i < 2000; ++i) {
            const int key = static_cast<int>(rng() % 6);
            const std::string bytes = "key-" + std::to_string(key);
            bool granted = false;
            if (i % 5 == 0) {
                auto q = k.limiter(bytes)->enqueue(1, 1'000'000);
                if (q.waiter) {
                    while (!q.waiter->wait_for(1'000'000'000)) {
                    }
                    granted = q.waiter->outcome().acquired;
                } else {
                    granted = q.outcome.acquired;
                }
            } else if (i % 5 == 1) {
                const auto r = k.try_now(bytes, 1);
                granted = r && r->outcome.acquired;
            } else {
                granted = k.acquire(bytes, 1).outcome.acquired;
            }
            if (granted) {
                per_key[key].fetch_add(1);
            }
            const auto held = c.acquire("hot" + std::to_string(i % 2), 1);
            if (held.outcome.acquired) {
                check(holders.fetch_add(1) < 4, "shm keyed: more holders of two concurrency keys than their limits");
                holders.fetch_sub(1);
                held.limiter->give_back_lease(1, held.outcome.tag);
            }
            if (i % 97 == 0) {
                static_cast<void>(k.totals());
            }
        }
    });
    for (const auto& n : per_key) {
        check(n.load() == 100, "shm keyed: a key granted other than its limit over both paths");
    }
    for (const char* hot : {"hot0", "hot1"}) {
        check(conc[0]->statistics(hot).current_available_permits == 2,
              "shm keyed: a concurrency permit did not come back");
    }
    std::printf("shm keyed: 6 keys exact over records and queues, concurrency keys all back\n");
}
#endif

// Limits and queues changed while requests, waits, cancels and releases race: a concurrency limit
// neither loses nor makes a permit (all released, exactly the last limit is available), and a window
// with time frozen never grants more than the highest limit it had.
#if defined(__linux__)
/// A named limiter of two mappings whose limit both change while threads of both take, queue and
/// cancel: every mapping follows (the highest limit is never exceeded in a window), and each ends
/// on the last limit published.
void shm_reconfigures_follow() {
    using namespace permits::shm;
    auto clock = std::make_shared<ManualClock>(0);
    const auto stores = two_mappings("stress-rc", clock, {64, 0600, ClockKind::Manual});
    const QueueOptions queue{8, QueueOrder::OldestFirst};
    std::array<std::shared_ptr<FixedWindow>, 2> windows{
        stores[0]->fixed_window("w", FixedWindowRule(10, 1'000'000'000), queue),
        stores[1]->fixed_window("w", FixedWindowRule(10, 1'000'000'000), queue)};
    std::array<std::shared_ptr<TokenBucket>, 2> buckets{
        stores[0]->token_bucket("b", TokenBucketRule(10, 1, 1'000'000'000), queue),
        stores[1]->token_bucket("b", TokenBucketRule(10, 1, 1'000'000'000), queue)};
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> window_granted{0};
    std::atomic<std::int64_t> bucket_granted{0};
    std::thread changer([&] {
        for (int i = 0; !stop.load(); ++i) {
            windows[i % 2]->reconfigure(FixedWindowRule(i % 3 == 0 ? 40 : 5, 1'000'000'000), queue);
            buckets[(i + 1) % 2]->reconfigure(TokenBucketRule(i % 3 == 0 ? 40 : 5, 1, 1'000'000'000), queue);
        }
    });
    run_threads(kThreads, [&](int t) {
        FixedWindow& window = *windows[t % 2];
        TokenBucket& bucket = *buckets[t % 2];
        for (int i = 0; i < 3000; ++i) {
            if ((i + t) % 7 == 0) {
                auto q = window.enqueue(1, 0);
                window_granted += q.outcome.acquired ? 1 : 0;
                auto w = bucket.enqueue(1, 1'000'000);
                if (w.waiter) {
                    bucket.cancel(*w.waiter);
                    bucket_granted += w.waiter->outcome().acquired ? 1 : 0;
                } else {
                    bucket_granted += w.outcome.acquired ? 1 : 0;
                }
            } else {
                window_granted += window.acquire(1).acquired ? 1 : 0;
                bucket_granted += bucket.acquire(1).acquired ? 1 : 0;
            }
        }
    });
    stop = true;
    changer.join();
    windows[0]->reconfigure(FixedWindowRule(7, 1'000'000'000), queue);
    buckets[1]->reconfigure(TokenBucketRule(6, 1, 1'000'000'000), queue);
    check(window_granted.load() <= 40, "shm reconfigure: a window granted more than its highest limit");
    check(bucket_granted.load() <= 40,
          "shm reconfigure: a bucket granted more than its highest limit (no time passed)");
    for (const auto& w : windows) {
        check(w->available_permits() >= 0 && w->max_permits() == 7, "shm reconfigure: a mapping missed the last limit");
    }
    for (const auto& b : buckets) {
        check(b->available_permits() <= 6 && b->max_permits() == 6, "shm reconfigure: a mapping missed the last rate");
    }
    std::printf("shm reconfigure: %lld granted by the window, %lld by the bucket (limits 5 and 40)\n",
                static_cast<long long>(window_granted.load()), static_cast<long long>(bucket_granted.load()));
}

void shm_concurrency_reconfigures() {
    using namespace permits::shm;
    auto clock = std::make_shared<ManualClock>(0);
    const auto stores = two_mappings("stress-rcc", clock, {64, 0600, ClockKind::Manual});
    const Nanos hour = 3'600'000'000'000;
    const QueueOptions queue{8, QueueOrder::OldestFirst};
    std::array<std::shared_ptr<SharedLimiter>, 2> held{stores[0]->concurrency("c", 3, hour, queue),
                                                       stores[1]->concurrency("c", 3, hour, queue)};
    // The limit moves between 2 and 5 while every thread takes and gives back: never more holders
    // than the highest limit, every permit back at the end, and the state sound for a new opener.
    std::atomic<bool> stop{false};
    std::atomic<int> holders{0};
    std::thread changer([&] {
        for (int i = 0; !stop.load(); ++i) {
            held[i % 2]->reconfigure_limit(i % 2 == 0 ? 5 : 2, queue);
        }
    });
    run_threads(kThreads, [&](int t) {
        SharedLimiter& c = *held[t % 2];
        for (int i = 0; i < 3000; ++i) {
            Outcome o;
            if ((i + t) % 5 == 0) {
                auto q = c.enqueue(1, 1'000'000);
                if (q.waiter) {
                    c.cancel(*q.waiter);
                    o = q.waiter->outcome();
                } else {
                    o = q.outcome;
                }
            } else {
                o = c.acquire(1);
            }
            if (o.acquired) {
                check(holders.fetch_add(1) < 5, "shm concurrency reconfigure: more holders than the highest limit");
                holders.fetch_sub(1);
                c.give_back(1, o.tag);
            }
        }
    });
    stop = true;
    changer.join();
    held[0]->reconfigure_limit(3, queue);
    for (const auto& c : held) {
        check(c->available_permits() == 3 && c->max_permits() == 3,
              "shm concurrency reconfigure: every permit back under the last limit, in every mapping");
    }
    auto later = stores[1]->concurrency("c", 3, hour, queue); // (checks the state and the ledger)
    check(later->available_permits() == 3, "shm concurrency reconfigure: a new opener sees the last limit");
    std::puts("shm concurrency reconfigure: every permit back");
}

void shm_keyed_reconfigures_follow() {
    using namespace permits::shm;
    auto clock = std::make_shared<ManualClock>(0);
    const auto stores = two_mappings("stress-rck", clock, {64, 0600, ClockKind::Manual});
    const QueueOptions queue{8, QueueOrder::OldestFirst};
    const Nanos sec = 1'000'000'000;
    // A fixed window's keys and a sliding window's, each in two mappings, their limits changed by a
    // thread of their own while every thread takes from the records and from the keys' limiters.
    const Nanos hour = 3600 * sec;
    std::array<std::shared_ptr<KeyedLimiter>, 2> windows;
    std::array<std::shared_ptr<KeyedLimiter>, 2> slidings;
    std::array<std::shared_ptr<KeyedLimiter>, 2> helds;
    for (int i = 0; i < 2; ++i) {
        windows[i] = std::make_shared<KeyedLimiter>(
            KeyTable::open(stores[i], "w", {params_of(FixedWindowRule(10, sec)), queue, sec}, 16, 60 * sec));
        slidings[i] = std::make_shared<KeyedLimiter>(
            KeyTable::open(stores[i], "s", {params_of_sliding(10, sec, 4), queue, sec}, 16, 60 * sec));
        helds[i] = std::make_shared<KeyedLimiter>(
            KeyTable::open(stores[i], "h", {params_of_concurrency(2, hour), queue, hour}, 16, 60 * sec));
    }
    std::atomic<int> holders{0};
    std::atomic<bool> stop{false};
    std::array<std::atomic<std::int64_t>, 4> granted{}; // per key: windows' 0 and 1, slidings' 0 and 1
    std::thread changer([&] {
        for (int i = 0; !stop.load(); ++i) {
            windows[i % 2]->reconfigure(params_of(FixedWindowRule(i % 3 == 0 ? 40 : 5, sec)), queue);
            slidings[(i + 1) % 2]->reconfigure(params_of_sliding(i % 3 == 0 ? 40 : 5, sec, 4), queue);
            helds[i % 2]->reconfigure(params_of_concurrency(i % 2 == 0 ? 5 : 2, hour), queue);
        }
    });
    run_threads(kThreads, [&](int t) {
        KeyedLimiter& window = *windows[t % 2];
        KeyedLimiter& sliding = *slidings[t % 2];
        KeyedLimiter& held = *helds[t % 2];
        for (int i = 0; i < 3000; ++i) {
            const int k = (i + t) % 2;
            const std::string key = "k" + std::to_string(k);
            if (const auto h = held.acquire("hot", 1); h.outcome.acquired) {
                check(holders.fetch_add(1) < 5, "shm keyed reconfigure: more holders of a key than its highest limit");
                holders.fetch_sub(1);
                h.limiter->give_back(1, h.outcome.tag);
            }
            if ((i + t) % 7 == 0) {
                auto q = window.limiter(key)->enqueue(1, 0);
                granted[k] += q.outcome.acquired ? 1 : 0;
                auto w = sliding.limiter(key)->enqueue(1, 0);
                granted[2 + k] += w.outcome.acquired ? 1 : 0;
            } else {
                granted[k] += window.acquire(key, 1).outcome.acquired ? 1 : 0;
                granted[2 + k] += sliding.acquire(key, 1).outcome.acquired ? 1 : 0;
            }
        }
    });
    stop = true;
    changer.join();
    windows[0]->reconfigure(params_of(FixedWindowRule(7, sec)), queue);
    slidings[1]->reconfigure(params_of_sliding(6, sec, 4), queue);
    helds[1]->reconfigure(params_of_concurrency(3, hour), queue);
    for (const auto& h : helds) {
        check(h->statistics("hot").current_available_permits == 3,
              "shm keyed reconfigure: every concurrency permit back under the last limit");
    }
    for (const auto& g : granted) {
        check(g.load() <= 40, "shm keyed reconfigure: a key granted more than its highest limit (no time passed)");
    }
    for (int i = 0; i < 2; ++i) {
        check(windows[i]->statistics("new").current_available_permits == 7,
              "shm keyed reconfigure: a mapping missed the window's last limit");
        check(slidings[i]->statistics("new").current_available_permits == 6,
              "shm keyed reconfigure: a mapping missed the sliding window's last limit");
    }
    std::printf("shm keyed reconfigure: %lld, %lld, %lld, %lld granted per key (limits 5 and 40)\n",
                static_cast<long long>(granted[0].load()), static_cast<long long>(granted[1].load()),
                static_cast<long long>(granted[2].load()), static_cast<long long>(granted[3].load()));
}
#endif

void reconfigures_keep_every_permit() {
    auto clock = std::make_shared<ManualClock>(0);
    auto held = std::make_shared<Concurrency>(clock, 4, QueueOptions{8, QueueOrder::OldestFirst});
    auto window = std::make_shared<FixedWindow>(clock, 10, 1'000'000'000, QueueOptions{}, false);
    auto log = std::make_shared<SlidingWindow>(clock, 10, 1'000'000'000, -4, QueueOptions{}, false);
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> window_granted{0};
    std::atomic<std::int64_t> log_granted{0};
    std::thread changer([&] {
        for (int i = 0; !stop.load(); ++i) {
            const QueueOrder order = i % 3 == 0 ? QueueOrder::NewestFirst : QueueOrder::OldestFirst;
            held->reconfigure(ConcurrencyRule(1 + i % 6), QueueOptions{i % 5, order});
            window->reconfigure(FixedWindowRule(i % 2 == 0 ? 10 : 40, 1'000'000'000), QueueOptions{});
            log->reconfigure(i % 2 == 0 ? 10 : 40, 1'000'000'000, -4, QueueOptions{});
        }
    });
    run_threads(kThreads, [&](int t) {
        for (int i = 0; i < 4000; ++i) {
            if ((i + t) % 5 == 0) {
                auto q = held->enqueue(1, 2'000'000'000);
                if (q.waiter && t % 2 == 0) {
                    held->cancel(*q.waiter);
                }
                if (q.waiter) {
                    while (q.waiter->pending() && !q.waiter->wait_for(1'000'000)) {
                        held->reconfigure(ConcurrencyRule(4), QueueOptions{8, QueueOrder::OldestFirst}); // room
                    }
                }
                const Outcome o = q.waiter ? q.waiter->outcome() : q.outcome;
                if (o.acquired) {
                    held->give_back(1, o.tag);
                }
            } else if (const Outcome o = held->acquire(1); o.acquired) {
                held->give_back(1, o.tag);
            }
            window_granted += window->acquire(1).acquired ? 1 : 0;
            log_granted += log->acquire(1).acquired ? 1 : 0;
        }
    });
    stop = true;
    changer.join();
    held->reconfigure(ConcurrencyRule(3), QueueOptions{});
    check(held->available_permits() == 3, "reconfigure: every permit released comes back, none made");
    check(held->queued_requests() == 0, "reconfigure: no request left queued");
    check(window_granted.load() <= 40, "reconfigure: a window never grants more than its highest limit");
    check(log_granted.load() <= 40, "reconfigure: a sliding log never grants more than its highest limit");
    std::printf("reconfigure: %lld granted by the window (limits 10 and 40)\n",
                static_cast<long long>(window_granted.load()));
}

int main() {
#if defined(__linux__)
#if defined(PERMITS_UNDER_TSAN)
    // ThreadSanitizer runs 16-byte atomics under a lock of its own, in each process: across
    // processes they are not atomic under it. The processes' part runs in the other builds
    // (AddressSanitizer's included); the threads' part on two mappings runs here.
    std::puts("shm: the processes' part is not run under ThreadSanitizer");
#else
    shm_live_holder_kept(); // first: forks while this process has no thread
    shm_processes();
#endif
    shm_limiters();
    shm_lost_leases();
    shm_keyed();
    shm_reconfigures_follow();
    shm_keyed_reconfigures_follow();
    shm_concurrency_reconfigures();
#endif
    concurrency_holders();
    reconfigures_keep_every_permit();
    token_bucket_exact();
    windows_never_exceed<FixedWindow>(
        "fixed window never exceeds the limit",
        [](auto c) { return std::make_shared<FixedWindow>(c, 50, 1'000'000, QueueOptions{}, false); }, 50, 1);
    windows_never_exceed<SlidingWindow>(
        "sliding window never exceeds the limit",
        [](auto c) { return std::make_shared<SlidingWindow>(c, 50, 1'000'000, 4, QueueOptions{}, false); }, 50, 4);
    // The sliding log of 4 segments: grants in any 3 consecutive segments (less than a window apart).
    windows_never_exceed<SlidingWindow>(
        "sliding log never exceeds the limit",
        [](auto c) { return std::make_shared<SlidingWindow>(c, 50, 1'000'000, -4, QueueOptions{}, false); }, 50, 3);
    windows_never_exceed<SlidingWindowCounter>(
        "sliding window counter: a window's own count never exceeds the limit",
        [](auto c) { return std::make_shared<SlidingWindowCounter>(c, 50, 1'000'000, QueueOptions{}, false); }, 50, 1);
    resets_never_exceed<FixedWindow>("fixed window: resets never give more than a limit each", [](auto c) {
        return std::make_shared<FixedWindow>(c, 40, 1'000'000'000, QueueOptions{64, QueueOrder::OldestFirst}, false);
    });
    resets_never_exceed<TokenBucket>("token bucket: resets never give more than a limit each", [](auto c) {
        return std::make_shared<TokenBucket>(c, 40, 1, 1'000'000'000, QueueOptions{64, QueueOrder::OldestFirst}, false);
    });
    resets_never_exceed<SlidingWindow>("sliding window: resets never give more than a limit each", [](auto c) {
        return std::make_shared<SlidingWindow>(c, 40, 1'000'000'000, 4, QueueOptions{64, QueueOrder::OldestFirst},
                                               false);
    });
    resets_never_exceed<SlidingWindowCounter>(
        "sliding window counter: resets never give more than a limit each", [](auto c) {
            return std::make_shared<SlidingWindowCounter>(c, 40, 1'000'000'000,
                                                          QueueOptions{64, QueueOrder::OldestFirst}, false);
        });
    waiters_and_close();
    cancel_scopes();
    per_key_partitions();
    limiters_come_and_go();
    std::puts("stress: all invariants held");
    return 0;
}
