#include "permits/shm_limiters.hpp"

#if defined(__linux__)

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

namespace permits::shm {

namespace {

constexpr const char* kTokenBucketNames[] = {"token_limit", "tokens_per_period", "replenishment_period"};
constexpr const char* kWindowNames[] = {"permit_limit", "window"};
constexpr const char* kSlidingNames[] = {"permit_limit", "window", "segments_per_window"};
constexpr const char* kConcurrencyNames[] = {"permit_limit", "lease_ttl"};

constexpr Nanos kMs = 1000000;
constexpr Nanos kReclaimEvery = 50 * kMs; // a process looks for dead holders at most this often

/// A named concurrency limiter: the engine's Limiter (queue, leases, waits) over a ConcurrencyView.
class SharedConcurrency final : public SharedLimiter {
public:
    SharedConcurrency(std::shared_ptr<Store> store, ConcurrencyView view, std::int64_t limit, Nanos lease_ttl,
                      QueueOptions queue)
        : SharedLimiter(store->clock(), limit, queue, false), store_(std::move(store)), view_(view),
          lease_ttl_(lease_ttl) {}

    bool releases_permits() const noexcept override { return true; }
    Nanos full_at() const override {
        return view_.available() >= view_.limit_now() ? view_.full_since->load() : kNever;
    }
    void reconfigure_limit(std::int64_t permit_limit, QueueOptions queue) override {
        (void)ConcurrencyRule(permit_limit); // checks it
        const std::int64_t amounts[2] = {permit_limit, 0};
        reconfigure_with(
            permit_limit, queue, [] {}, amounts);
    }
    /// Another process's change of the limit (Limiter::follow); an impossible one (damaged
    /// amounts) is not taken on.
    void take_on(std::int64_t permit_limit) {
        if (permit_limit >= 1 && permit_limit <= kMaxPermits) {
            apply_change(permit_limit, queue_options(), [] {});
        }
    }
    bool queued() const noexcept override { return queued_requests() > 0; }
    void poll() override {
        reclaim();
        recheck();
    }

protected:
    bool take_held(std::int64_t n, Nanos /*now*/, std::int64_t& tag) override {
        Segment& seg = store_->segment();
        for (;;) {
            Holding h;
            if (!seg.pin(n, lease_ttl_, h)) {
                return false; // kMaxHolders other processes hold permits of this segment now
            }
            if (!view_.take_as(seg, h, n)) {
                if (!seg.holds(h)) {
                    continue; // our slot was judged dead before we took (a stalled process): a new one
                }
                seg.unpin(h, n);
                if (reclaim()) {
                    continue; // a dead holder's permits came back: try again
                }
                return false;
            }
            // (judged dead after it took: its permits go back with the slot, and SharedLimiter::take,
            // finding the holding forgotten, takes anew)
            watch(*store_, lease_ttl_ / 3, false);
            tag = holder_tag(h.index, h.generation);
            return true;
        }
    }
    // (below zero while more are held than a lowered limit: none available)
    std::int64_t available_at(Nanos /*now*/) const override { return std::max<std::int64_t>(view_.available(), 0); }
    Nanos time_until(std::int64_t needed, Nanos /*now*/) const override {
        // Free permits are of no use to a process that can have no holder slot: only a release helps.
        return view_.available() >= needed && store_->segment().slot_available() ? 0 : kNever;
    }
    Reason refusal(std::int64_t n) override {
        return view_.available() >= n && !store_->segment().slot_available() ? Reason::ProcessLimit
                                                                             : Reason::LimitReached;
    }
    void give_back_held(std::int64_t n, std::int64_t tag, Nanos now) override {
        Segment& seg = store_->segment();
        const Holding h = holding_of(tag);
        if (!seg.holds(h)) {
            return; // a forked child's copy of the parent's lease, or permits reclaimed meanwhile
        }
        const std::int64_t given = view_.give_back_as(seg, h, n, now);
        seg.unpin(h, given); // (after: the slot is freed only once the ledger says it holds nothing)
        if (given > 0) {
            seg.notify();
        }
    }
    // The ledger forgets a holder's permits only with its slot (reclaim_holder): the slot says.
    bool still_held(std::int64_t tag, std::int64_t /*permits*/) override {
        return store_->segment().holds(holding_of(tag));
    }
    void let_go(std::int64_t /*tag*/, std::int64_t /*permits*/) override {} // (its slot went with its permits)
    void told_lost(std::int64_t /*leases*/) override { store_->note_lost(); }
    std::unique_ptr<Projection> project() const override { return nullptr; }
    void on_queued() override { watch(*store_, lease_ttl_ / 3, true); }

private:
    /// Gives back the permits of holders found dead, at most every kReclaimEvery; true if any came back.
    bool reclaim() {
        const Nanos now = monotonic_now();
        Nanos last = last_reclaim_.load();
        if (now - last < kReclaimEvery) {
            return false;
        }
        if (!last_reclaim_.compare_exchange_strong(last, now)) {
            return false; // another thread of ours is at it
        }
        Segment& seg = store_->segment();
        bool any = false;
        for (std::uint32_t i = 0; i < kMaxHolders; ++i) {
            // (reserved, drained everywhere and freed: never a live holder's permits, see reclaim_holder)
            if (view_.held_by(i) > 0 && seg.reclaim_holder(i, lease_ttl_)) {
                any = true;
            }
        }
        return any;
    }

    std::shared_ptr<Store> store_;
    ConcurrencyView view_;
    Nanos lease_ttl_;
    std::atomic<Nanos> last_reclaim_{0};
};

} // namespace

void SharedLimiter::reconfigure_limit(std::int64_t /*permit_limit*/, QueueOptions /*queue*/) {
    throw std::logic_error("this shared limiter's limit changes with its per-key table's");
}

// ---- the watcher ----

void SharedLimiter::watch(Store& store, Nanos heartbeat_every, bool always) {
    if (watching_.exchange(true) && !always) {
        return;
    }
    store.watch(std::dynamic_pointer_cast<SharedLimiter>(shared_from_this()), heartbeat_every); // (kicks it)
}

struct Store::WatcherState {
    std::shared_ptr<Segment> segment;
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    bool kicked = false;
    bool started = false;
    std::vector<std::weak_ptr<Watched>> watched;
    Nanos heartbeat_every = kNever;
    std::thread thread;

    void run() {
        Nanos last_beat = monotonic_now(); // (a slot's claim beats: the watcher starts with a holder's first grant)
        std::unique_lock<std::mutex> lock(mu);
        while (!stop) {
            std::vector<std::shared_ptr<Watched>> live;
            std::erase_if(watched, [&](const std::weak_ptr<Watched>& w) {
                auto p = w.lock();
                if (!p) {
                    return true;
                }
                live.push_back(std::move(p));
                return false;
            });
            const Nanos now = monotonic_now();
            bool beat = false;
            if (heartbeat_every != kNever && now - last_beat >= heartbeat_every) {
                segment->heartbeat();
                last_beat = now;
                beat = true;
            }
            const bool any = std::any_of(live.begin(), live.end(), [](const auto& w) { return w->queued(); });
            lock.unlock();
            if (beat) {
                // Resumed after a pause past lease_ttl, this process may have been judged dead: what
                // the segment forgot of its leases is taken back, or told lost.
                for (const auto& w : live) {
                    w->renew();
                }
            }
            if (any) {
                Header& h = segment->header();
                h.sleepers.fetch_add(1);
                const std::uint32_t seen = h.epoch.load();
                for (const auto& w : live) { // a release before `seen` is served here, one after wakes the wait
                    if (w->queued()) {
                        w->poll();
                    }
                }
                segment->wait_epoch(seen, 100 * kMs);
                h.sleepers.fetch_sub(1);
                for (const auto& w : live) {
                    if (w->queued()) {
                        w->poll();
                    }
                }
            }
            live.clear(); // (outside the lock: the last reference may destroy a limiter)
            lock.lock();
            if (!any && !stop) {
                const Nanos until_beat =
                    heartbeat_every == kNever ? 1000 * kMs : std::min<Nanos>(1000 * kMs, heartbeat_every);
                cv.wait_for(lock, std::chrono::nanoseconds(until_beat), [&] { return stop || kicked; });
                kicked = false;
            }
        }
    }
};

Store::Store(std::shared_ptr<Segment> segment, std::shared_ptr<Clock> clock)
    : segment_(std::move(segment)), clock_(std::move(clock)) {}

Store::~Store() {
    std::shared_ptr<WatcherState> w;
    {
        std::lock_guard<std::mutex> lock(mu_);
        w = std::move(watcher_);
    }
    if (!w || !w->started) {
        return;
    }
    if (watcher_pid_ != current_pid()) {
        new std::shared_ptr<WatcherState>(std::move(w)); // NOLINT: a forked child's copy: never joined or freed
        return;
    }
    {
        std::lock_guard<std::mutex> lock(w->mu);
        w->stop = true;
    }
    w->cv.notify_all();
    segment_->notify();
    if (w->thread.get_id() == std::this_thread::get_id()) {
        w->thread.detach(); // the watcher dropped the last reference itself: it ends on its own
    } else {
        w->thread.join();
    }
}

std::shared_ptr<Store::WatcherState> Store::watcher() {
    std::lock_guard<std::mutex> lock(mu_);
    if (watcher_ && watcher_pid_ != current_pid()) {
        // A forked child: the parent's thread does not exist here, and its state (a joinable
        // std::thread, a lock it may have held) must never be destroyed or locked: left behind.
        new std::shared_ptr<WatcherState>(std::move(watcher_)); // NOLINT: deliberately never freed
    }
    if (!watcher_) {
        watcher_ = std::make_shared<WatcherState>();
        watcher_->segment = segment_;
        watcher_pid_ = current_pid();
    }
    return watcher_;
}

void Store::watch(const std::shared_ptr<Watched>& w, Nanos heartbeat_every) {
    auto state = watcher();
    {
        std::lock_guard<std::mutex> lock(state->mu);
        const bool known = std::any_of(state->watched.begin(), state->watched.end(),
                                       [&](const std::weak_ptr<Watched>& x) { return x.lock() == w; });
        if (!known) {
            state->watched.push_back(w);
        }
        state->heartbeat_every = std::min(state->heartbeat_every, std::max<Nanos>(heartbeat_every, kMs));
        state->kicked = true;
        if (!state->started) {
            state->started = true;
            state->thread = std::thread([state] { state->run(); });
        }
    }
    state->cv.notify_all();
}

// ---- the named limiters ----

namespace {
std::string where_of(std::string_view name, const Segment& segment) {
    return "'" + std::string(name) + "' in shared-memory segment '" + segment.name() + "'";
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
    throw std::invalid_argument(where + " is corrupted: " + what + " (unlink the segment)");
}

// A rule of the same shape as `rule` (its period, its window) with amounts `a` (Rule::amounts).
TokenBucketRule with_amounts(const TokenBucketRule& rule, const std::int64_t (&a)[2]) {
    return {a[0], a[1], rule.period()};
}
FixedWindowRule with_amounts(const FixedWindowRule& rule, const std::int64_t (&a)[2]) {
    return {a[0], rule.window()};
}
SlidingWindowCounterRule with_amounts(const SlidingWindowCounterRule& rule, const std::int64_t (&a)[2]) {
    return {a[0], rule.window()};
}

/// What a named limiter of `slot` follows: the slot's amounts, which any process may reconfigure
/// (published as `publish` does, if given: a kind whose state changes with them).
std::unique_ptr<SharedAmounts> following(Segment& segment, NamedSlot& slot,
                                         std::function<void(const std::int64_t (&)[2])> apply,
                                         std::function<std::uint32_t(const std::int64_t (&)[2])> publish = {}) {
    auto shared = std::make_unique<SharedAmounts>();
    shared->generation = &slot.generation;
    // (the limiter keeps the store, hence the mapping, alive: the slot outlives these)
    shared->read = [&slot](std::int64_t(&a)[2]) { return live_amounts(slot, a); };
    shared->publish = publish ? std::move(publish) : [&segment, &slot](const std::int64_t(&a)[2]) {
        return segment.publish_amounts(slot, a);
    };
    shared->apply = std::move(apply);
    return shared;
}

template <class L, class R>
std::shared_ptr<L> rule_limiter(Store& store, std::string_view name, const R& rule, Params params, QueueOptions queue) {
    detail::check_queue(queue);
    NamedSlot& slot = store.segment().named(name, params, sizeof(AtomicPair), store.now(),
                                            // NOLINTNEXTLINE(readability-non-const-parameter): built in place
                                            [&](char* data, Nanos a) { new (data) AtomicPair(rule.initial(a)); });
    ExternalState ext{store.segment().at<AtomicPair>(slot.offset), slot.anchor, store.shared_from_this()};
    // The slot's amounts, not the caller's, once a process reconfigured them.
    std::int64_t values[8] = {};
    std::int64_t highest = 0;
    const std::uint32_t generation = live_values(slot, values, highest);
    const std::int64_t amounts[2] = {values[0], values[1]}; // (a window's second value: unused)
    const R live = generation == 0 ? rule : with_amounts(rule, amounts);
    const std::int64_t most[2] = {highest, values[1]};
    // Damaged state is refused, never used (a single word: no other process's change can make a
    // sound state look damaged); its hint, a take's first guess, becomes the value checked. Read
    // against the highest limit the slot had: a limit lowered keeps what was taken.
    const Pair s = ext.word->rehint();
    if (const char* what = (generation == 0 ? rule : with_amounts(rule, most)).damage(s, ext.anchor)) {
        refuse(where_of(name, store.segment()),
               "its state {" + std::to_string(s.a) + ", " + std::to_string(s.b) + "}: " + what);
    }
    auto limiter = std::make_shared<L>(store.clock(), live, queue, std::move(ext));
    L* raw = limiter.get(); // (what follows is the limiter's own: it lives no longer)
    limiter->follow(following(store.segment(), slot,
                              [raw, rule](const std::int64_t(&a)[2]) { raw->take_on(with_amounts(rule, a)); }),
                    generation);
    return limiter;
}
} // namespace

Params params_of(const TokenBucketRule& rule) {
    Params p{Kind::TokenBucket, 3, {rule.token_limit(), rule.tokens_per_period(), rule.period()}, kTokenBucketNames};
    p.durations = 1U << 2;
    return p;
}
Params params_of(const FixedWindowRule& rule) {
    Params p{Kind::FixedWindow, 2, {rule.permit_limit(), rule.window()}, kWindowNames};
    p.durations = 1U << 1;
    return p;
}
Params params_of(const SlidingWindowCounterRule& rule) {
    Params p{Kind::SlidingWindowCounter, 2, {rule.permit_limit(), rule.window()}, kWindowNames};
    p.durations = 1U << 1;
    return p;
}
Params params_of_sliding(std::int64_t permit_limit, Nanos window, std::int64_t segments) {
    Params p{Kind::SlidingWindow, 3, {permit_limit, window, segments}, kSlidingNames};
    p.durations = 1U << 1;
    return p;
}
Params params_of_concurrency(std::int64_t permit_limit, Nanos lease_ttl) {
    // lease_ttl is a parameter: a process that would judge holders dead sooner than they renew is refused.
    Params p{Kind::Concurrency, 2, {permit_limit, lease_ttl}, kConcurrencyNames};
    p.durations = 1U << 1;
    return p;
}

std::shared_ptr<TokenBucket> Store::token_bucket(std::string_view name, const TokenBucketRule& rule,
                                                 QueueOptions queue) {
    return rule_limiter<TokenBucket>(*this, name, rule, params_of(rule), queue);
}

std::shared_ptr<FixedWindow> Store::fixed_window(std::string_view name, const FixedWindowRule& rule,
                                                 QueueOptions queue) {
    return rule_limiter<FixedWindow>(*this, name, rule, params_of(rule), queue);
}

std::shared_ptr<SlidingWindowCounter>
Store::sliding_window_counter(std::string_view name, const SlidingWindowCounterRule& rule, QueueOptions queue) {
    return rule_limiter<SlidingWindowCounter>(*this, name, rule, params_of(rule), queue);
}

std::shared_ptr<SlidingWindow> Store::sliding_window(std::string_view name, std::int64_t permit_limit, Nanos window,
                                                     std::int64_t segments, QueueOptions queue) {
    SlidingWindowState::check(permit_limit, window, segments);
    detail::check_queue(queue);
    const auto words = static_cast<std::uint64_t>(SlidingWindowShape::slots(segments)) + 1;
    NamedSlot& slot = segment().named(name, params_of_sliding(permit_limit, window, segments),
                                      words * sizeof(AtomicPair), now(), [&](char* data, Nanos) {
                                          auto* w = reinterpret_cast<AtomicPair*>(data);
                                          for (std::uint64_t i = 0; i < words; ++i) {
                                              new (w + i) AtomicPair();
                                          }
                                          SlidingWindowState::init_storage(w, segments);
                                      });
    ExternalState ext{segment().at<AtomicPair>(slot.offset), slot.anchor, shared_from_this()};
    std::int64_t values[8] = {};
    std::int64_t highest = 0;
    const std::uint32_t generation = live_values(slot, values, highest);
    const std::int64_t limit = values[0];               // the slot's: as made, or as reconfigured
    SlidingWindowState::check(limit, window, segments); // (a damaged slot's amounts: refused as any)
    // (read against the highest limit the slot had: a limit lowered keeps the counts)
    const SlidingWindowState state = SlidingWindowState::over(highest, window, segments, ext.anchor, ext.word);
    if (const std::string what = state.damage(); !what.empty()) {
        refuse(where_of(name, segment()), what);
    }
    ext.word->rehint(); // (a take's first guess: the head as it is, not a hint no check has seen)
    auto limiter = std::make_shared<SlidingWindow>(clock(), limit, window, segments, queue, ext);
    SlidingWindow* raw = limiter.get();
    limiter->follow(following(segment(), slot, [raw](const std::int64_t(&a)[2]) { raw->take_on(a[0]); }), generation);
    return limiter;
}

std::shared_ptr<SharedLimiter> Store::concurrency(std::string_view name, std::int64_t permit_limit, Nanos lease_ttl,
                                                  QueueOptions queue) {
    const ConcurrencyRule rule(permit_limit); // checks the limit
    detail::check_queue(queue);
    if (lease_ttl < kMs) {
        throw std::invalid_argument("lease_ttl must be at least a millisecond");
    }
    NamedSlot& slot =
        segment().named(name, params_of_concurrency(permit_limit, lease_ttl), ConcurrencyView::bytes(), now(),
                        [&](char* data, Nanos a) { ConcurrencyView::over(data, permit_limit).init(a); });
    // The slot's limit, not the caller's, once a process reconfigured it.
    const ConcurrencyView view = ConcurrencyView::over(segment().at<char>(slot.offset), slot.values[0], &slot);
    view.check(where_of(name, segment()));
    std::int64_t amounts[2] = {};
    const std::uint32_t generation = live_amounts(slot, amounts);
    auto limiter = std::make_shared<SharedConcurrency>(shared_from_this(), view, amounts[0], lease_ttl, queue);
    SharedConcurrency* raw = limiter.get(); // (what follows is the limiter's own: it lives no longer)
    Segment& seg = segment();
    // The available permits change with the limit, in the state's one swap (ConcurrencyView::change_limit).
    auto publish = [&seg, &slot, view](const std::int64_t(&a)[2]) {
        const std::int64_t limit = a[0];
        return seg.publish_amounts(
            banks_of(slot), slot.generation, a, [view] { view.settled(); },
            [view, limit](std::uint32_t was) { view.change_limit(was, limit); });
    };
    limiter->follow(following(
                        seg, slot, [raw](const std::int64_t(&a)[2]) { raw->take_on(a[0]); }, publish),
                    generation);
    return limiter;
}

} // namespace permits::shm

#endif // __linux__
