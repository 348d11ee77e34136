// PerKeyLimiter: its keys' records, their decisions, waits, reads and reconfiguration (its places and
// idle eviction are in per_key_eviction.cpp).
#include "permits/per_key.hpp"

#include "per_key_shard.hpp"
#include "permits/key_hash.hpp"
#include "permits/key_table.hpp"
#include "permits/sliding_window.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

namespace permits {

namespace {
/// `p` read as two 8-byte loads. A rule writes its out-parameter (take's and give_back's next
/// state) with two 8-byte stores; copied whole, the compiler loads it with one 16-byte load,
/// which cannot be forwarded from those stores and waits for them to reach the cache
/// (benchmarks/bench_per_key.py; the figures: benchmarks/RESULTS.md).
inline Pair gpr_pair(const Pair& p) noexcept {
    std::int64_t a = p.a;
    std::int64_t b = p.b;
    asm("" : "+r"(a), "+r"(b)); // keeps them in general registers: no 16-byte load
    return {a, b};
}
} // namespace

PerKeyTemplate PerKeyTemplate::sliding_window(const std::shared_ptr<Clock>& clock, std::int64_t permit_limit,
                                              Nanos window, std::int64_t segments, QueueOptions queue) {
    // A compact state per key, not a full SlidingWindow: its ring of AtomicPairs (32 bytes a
    // segment), wait queue and lock took "10/second" (20 segments) to 1,160 B a key
    // (benchmarks/RESULTS.md, issue 35).
    auto w = std::make_shared<CompactSlidingWindow>(permit_limit, window, segments);
    PerKeyTemplate t;
    t.queue = queue;
    t.promote = [clock, w, queue](Nanos anchor, Pair) -> std::shared_ptr<Limiter> {
        return w->promote(clock, queue, anchor, nullptr);
    };
    t.window = w;
    t.adopt = [w](const PerKeyTemplate& next) { w->set_limit(next.window->permit_limit()); };
    t.reconfigure_full = [w](Limiter& full, QueueOptions q) {
        static_cast<SlidingWindow&>(full).reconfigure(w->permit_limit(), w->window(), w->given_segments(), q);
    };
    return t;
}

PerKeyLimiter::PerKeyLimiter(std::shared_ptr<Clock> clock, PerKeyTemplate tmpl, Nanos idle_timeout,
                             std::int64_t max_partitions)
    : clock_(std::move(clock)), tmpl_(std::move(tmpl)), releases_(tmpl_.rule && tmpl_.rule->releases_permits()),
      idle_timeout_(idle_timeout), max_partitions_(max_partitions),
      shards_(std::make_unique<std::array<Shard, kShards>>()) {
    if (idle_timeout < 0) {
        throw std::invalid_argument("idle_timeout must not be negative");
    }
    if (max_partitions < 0) {
        throw std::invalid_argument("max_partitions must be >= 1");
    }
    if (!tmpl_.promote) {
        throw std::invalid_argument("a keyed limiter needs a way to build a key's limiter");
    }
    if (tmpl_.window) {
        for (auto& shard : *shards_) {
            shard.table.set_block_words(tmpl_.window->words());
        }
    }
    detail::ForkRegistry::add(this);
}

PerKeyLimiter::~PerKeyLimiter() {
    detail::ForkRegistry::remove(this);
    clock_->scheduler().cancel(this);
    for (auto& shard : *shards_) {
        shard.table.clear();
    }
}

std::uint32_t PerKeyLimiter::find_or_create_locked(Located& at, std::string_view key, std::uint64_t hash) {
    detail::KeyTable& table = at.shard.table;
    if (const std::uint32_t found = table.find(key, hash); found != detail::kNoRecord) {
        return found;
    }
    if (closed_.load()) {
        throw ClosedError(); // close() may have emptied this shard since the caller looked
    }
    const Nanos now = clock_->now();
    // Reserve the new partition's place first: shards insert concurrently, the bound is global.
    if (std::uint64_t busy = 0; !reserve_place() && !(free_a_place_locked(at.shard, now, busy) && reserve_place())) {
        if (busy == 0) {
            return detail::kNoRecord;
        }
        // Shards another thread held (a statistics() read, an eviction, a request) were skipped: an
        // idle partition there still gives its place. Looked at with this shard's lock let go (one
        // lock at a time: no deadlock), then this shard is looked at again: the key may be there now.
        at.lock.unlock();
        const bool freed = free_a_place_in(busy, now);
        at.lock.lock();
        if (const std::uint32_t found = table.find(key, hash); found != detail::kNoRecord) {
            return found;
        }
        if (closed_.load()) {
            throw ClosedError();
        }
        if (!freed || !reserve_place()) {
            return detail::kNoRecord;
        }
    }
    if (std::uint64_t busy = 0; table.full() && !free_a_place_locked(at.shard, now, busy)) {
        size_.fetch_sub(1); // 16.7 million keys in one shard (a billion in all): treated as the bound
        return detail::kNoRecord;
    }
    std::uint32_t i = detail::kNoRecord;
    try {
        i = table.add(key, hash);
        Record& r = table.at(i);
        if (tmpl_.rule) {
            r.state = tmpl_.rule->initial(now);
        } else if (tmpl_.window) {
            tmpl_.window->init(table.attach_block(i));
        } else {
            r.set_full(new std::shared_ptr<Limiter>(tmpl_.promote(now, Pair{})));
            r.key.set_flags(detail::kLive | detail::kPromoted);
        }
        r.anchor = now;
    } catch (...) {
        if (i != detail::kNoRecord) {
            table.remove(i);
        }
        size_.fetch_sub(1);
        throw;
    }
    check_at_locked(at.shard, i, sat_add(now, sat_add(idle_timeout_, 1)));
    return i;
}

bool PerKeyLimiter::reserve_place() noexcept {
    std::int64_t size = size_.load();
    do {
        if (max_partitions_ > 0 && size >= max_partitions_) {
            return false;
        }
    } while (!size_.compare_exchange_weak(size, size + 1));
    return true;
}

Nanos PerKeyLimiter::full_at_locked(Record& r, bool& poll) const {
    poll = false;
    if (!r.promoted()) {
        return record_full_at(r); // kNever: held; its release comes through give_back
    }
    const Limiter& full = *r.limiter();
    // Its queue and the leases it granted change it without telling us: check again later.
    const Nanos at = full.queued_requests() > 0 ? kNever : full.full_at();
    poll = at == kNever;
    return at;
}

void PerKeyLimiter::check_at_locked(Shard& shard, std::uint32_t i, Nanos when) {
    if (shard.table.schedule_check(i, when)) {
        schedule(when);
    } // else an earlier check will see it and set the next one
}

void PerKeyLimiter::schedule(Nanos when) {
    Nanos at = scheduled_at_.load();
    while (when < at) {
        if (scheduled_at_.compare_exchange_weak(at, when)) {
            clock_->scheduler().schedule(weak_from_this(), when);
            return;
        }
    }
}

void PerKeyLimiter::reconfigure(const PerKeyTemplate& next) {
    if (!tmpl_.adopt || !tmpl_.reconfigure_full) {
        throw std::logic_error("this keyed limiter's template cannot change its limit");
    }
    if (tmpl_.rule && next.rule) {
        if (const char* why = next.rule->cannot_follow(*tmpl_.rule); why != nullptr) {
            throw std::invalid_argument(why);
        }
    } else if (tmpl_.window && next.window) {
        const CompactSlidingWindow& was = *tmpl_.window;
        const CompactSlidingWindow& now = *next.window;
        if (was.window() != now.window() || was.given_segments() != now.given_segments()) {
            throw std::invalid_argument("a limiter keeps its window and its segments");
        }
    } else {
        throw std::invalid_argument("a limiter keeps its kind");
    }
    detail::check_queue(next.queue);
    // Every shard, in order (a request holds one at a time; one at the bound only tries others):
    // no key decides while the template and the keys' full limiters change.
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(kShards);
    for (auto& shard : *shards_) {
        locks.emplace_back(shard.mu);
    }
    if (closed_.load()) {
        throw ClosedError();
    }
    tmpl_.adopt(next);
    tmpl_.queue = next.queue;
    reconfigured_ = true;
    std::vector<std::shared_ptr<Limiter>> full; // reconfigured once the shards are let go
    for (auto& shard : *shards_) {
        for (std::uint32_t i = 0; i < shard.table.used(); ++i) {
            Record& r = shard.table.at(i);
            if (r.live() && r.promoted()) {
                full.push_back(r.limiter());
            }
        }
    }
    const QueueOptions queue = tmpl_.queue;
    locks.clear(); // (64 locks and a limiter's would be more than ThreadSanitizer follows at once)
    for (auto& limiter : full) {
        tmpl_.reconfigure_full(*limiter, queue); // a key promoted meanwhile got them already
    }
}

QueueOptions PerKeyLimiter::queue_options() {
    std::lock_guard<std::mutex> lock((*shards_)[0].mu); // (reconfigure changes them under every one)
    return tmpl_.queue;
}

std::shared_ptr<Limiter>& PerKeyLimiter::promote_locked(Record& r) {
    if (!r.promoted()) {
        // Built before the record changes: if it throws, the record goes on as it was.
        auto full = r.has_block() ? tmpl_.window->promote(clock_, tmpl_.queue, r.anchor, r.block())
                                  : tmpl_.promote(r.anchor, r.state);
        if (reconfigured_ && !r.has_block()) {
            tmpl_.reconfigure_full(*full, tmpl_.queue); // built with the queue options it was made with
        }
        auto* holder = new std::shared_ptr<Limiter>(std::move(full));
        if (r.has_block()) {
            detail::KeyTable::release_block(r); // its state is the full limiter's now
        }
        r.set_full(holder);
        r.key.set_flags(detail::kLive | detail::kPromoted);
    }
    return *r.full();
}

std::int64_t PerKeyLimiter::available_locked(const Record& r, Nanos now) const {
    return tmpl_.window ? tmpl_.window->available(r.block(), r.anchor, now)
                        : tmpl_.rule->available(r.state, r.anchor, now);
}

Nanos PerKeyLimiter::record_full_at(const Record& r) const {
    return tmpl_.window ? tmpl_.window->full_at(r.block(), r.anchor) : tmpl_.rule->full_at(r.state, r.anchor);
}

bool PerKeyLimiter::grant_locked(Record& r, std::int64_t n, Nanos now, std::int64_t& tag) {
    if (tmpl_.window) [[unlikely]] {
        const CompactSlidingWindow& w = *tmpl_.window;
        detail::check_permit_count(n, w.permit_limit());
        if (n == 0 ? w.available(r.block(), r.anchor, now) <= 0 : !w.take(r.block(), r.anchor, n, now, tag)) {
            return false;
        }
        ++r.successful;
        return true;
    }
    const Rule& rule = *tmpl_.rule;
    detail::check_permit_count(n, rule.max_permits());
    // A record has no queue: nothing waits ahead, a request is decided on the state alone.
    Pair next{};
    if (n == 0 ? rule.available(r.state, r.anchor, now) <= 0 : !rule.take(r.state, r.anchor, n, now, next, tag)) {
        return false;
    }
    if (n > 0) {
        r.state = gpr_pair(next);
    }
    ++r.successful;
    return true;
}

i128 PerKeyLimiter::retry_after(const Record& r, std::int64_t n, Nanos now) const {
    const std::int64_t needed = std::max<std::int64_t>(n, 1);
    const Nanos wait = tmpl_.window ? tmpl_.window->time_until(r.block(), r.anchor, needed, now)
                                    : tmpl_.rule->time_until(r.state, r.anchor, needed, now);
    if (wait != kNever) {
        return wait;
    }
    // Never by time (concurrency), or beyond the int64 range: ask a projection, exact in 128 bits.
    auto projection =
        tmpl_.window ? tmpl_.window->project(r.block(), r.anchor) : tmpl_.rule->project(r.state, r.anchor);
    return projection ? std::max<i128>(0, projection->grant(n, now, false) - now) : -1;
}

bool PerKeyLimiter::promoted_locked(Record& r) {
    if (!r.promoted() && (r.successful >= count_limit_ || r.failed >= count_limit_)) {
        promote_locked(r); // its own counts are 64-bit; statistics add the record's
    }
    return r.promoted();
}

PerKeyLimiter::Located PerKeyLimiter::locate(std::string_view key, bool create) {
    if (create && closed_.load()) {
        throw ClosedError();
    }
    const std::uint64_t hash = hash_key(key);
    Shard& shard = (*shards_)[hash % kShards];
    Located at{shard, std::unique_lock<std::mutex>(shard.mu)};
    at.index = create ? find_or_create_locked(at, key, hash) : shard.table.find(key, hash);
    return at;
}

PerKeyLimiter::Result PerKeyLimiter::acquire(std::string_view key, std::int64_t n) {
    auto at = locate(key, true);
    if (!at.found()) {
        return {Outcome::failed(n, Reason::PartitionLimit), false};
    }
    Record& r = at.shard.table.at(at.index);
    if (promoted_locked(r)) {
        return {r.limiter()->acquire(n), true};
    }
    const Nanos now = clock_->now();
    if (std::int64_t tag = 0; grant_locked(r, n, now, tag)) {
        return {Outcome::granted(n, tag), false};
    }
    ++r.failed;
    return {Outcome::failed(n, Reason::LimitReached, retry_after(r, n, now)), false};
}

std::optional<PerKeyLimiter::Result> PerKeyLimiter::try_now(std::string_view key, std::int64_t n) {
    auto at = locate(key, true);
    if (!at.found()) {
        return Result{Outcome::failed(n, Reason::PartitionLimit), false};
    }
    Record& r = at.shard.table.at(at.index);
    if (promoted_locked(r)) {
        auto o = r.limiter()->try_now(n);
        return o ? std::optional<Result>(Result{*o, true}) : std::nullopt;
    }
    std::int64_t tag = 0;
    return grant_locked(r, n, clock_->now(), tag) ? std::optional<Result>(Result{Outcome::granted(n, tag), false})
                                                  : std::nullopt;
}

PerKeyLimiter::Queued PerKeyLimiter::enqueue(std::string_view key, std::int64_t n, Nanos timeout,
                                             std::shared_ptr<Notifier> notifier, std::uint64_t id) {
    auto at = locate(key, true);
    if (!at.found()) {
        return {{Outcome::failed(n, Reason::PartitionLimit), nullptr}, nullptr};
    }
    Record& r = at.shard.table.at(at.index);
    if (!promoted_locked(r)) {
        const Nanos now = clock_->now();
        if (std::int64_t tag = 0; grant_locked(r, n, now, tag)) {
            return {{Outcome::granted(n, tag), nullptr}, nullptr};
        }
        // The queue is empty: a request fits iff it is within the queue limit (Limiter::enqueue).
        if (n > tmpl_.queue.queue_limit) {
            ++r.failed;
            return {{Outcome::failed(n, Reason::QueueFull, retry_after(r, n, now)), nullptr}, nullptr};
        }
        if (timeout == 0) {
            return {{Outcome::failed(n, Reason::Timeout), nullptr}, nullptr};
        }
    }
    // It has to queue: from now on the key is a full limiter with its own queue.
    auto& full = promote_locked(r);
    return {full->enqueue(n, timeout, std::move(notifier), id), full};
}

void PerKeyLimiter::give_back(std::string_view key, std::int64_t n, std::int64_t tag) {
    if (n <= 0 || closed_.load()) {
        return;
    }
    auto at = locate(key, false);
    if (!at.found()) {
        return; // evicted: it was full, nothing to give back to
    }
    Record& r = at.shard.table.at(at.index);
    if (r.promoted()) {
        r.limiter()->give_back(n, tag);
    } else if (tmpl_.window) {
        if (!tmpl_.window->give_back(r.block(), r.anchor, n, tag, clock_->now())) {
            return;
        }
    } else {
        Pair next{};
        if (!tmpl_.rule->give_back(r.state, r.anchor, n, tag, clock_->now(), next)) {
            return;
        }
        r.state = gpr_pair(next);
    }
    // Idle sooner than the pending check expects (a release, a refund): check it then.
    bool poll = false;
    const Nanos when = full_at_locked(r, poll);
    if (when != kNever) {
        check_at_locked(at.shard, at.index, sat_add(when, sat_add(idle_timeout_, 1)));
    }
}

void PerKeyLimiter::recheck(std::string_view key) {
    if (closed_.load()) {
        return;
    }
    auto at = locate(key, false);
    if (at.found()) {
        bool poll = false;
        const Nanos when = full_at_locked(at.shard.table.at(at.index), poll);
        if (when != kNever) {
            check_at_locked(at.shard, at.index, sat_add(when, sat_add(idle_timeout_, 1)));
        }
    }
}

bool PerKeyLimiter::reset(std::string_view key) {
    if (closed_.load()) {
        return false;
    }
    std::shared_ptr<Limiter> full;
    {
        auto at = locate(key, false);
        if (!at.found()) {
            return false; // a key made at its next request starts full
        }
        Record& r = at.shard.table.at(at.index);
        if (r.promoted()) {
            full = r.limiter(); // reset outside the shard's lock: it serves the key's queue
        } else {
            if (releases_) {
                return false;
            }
            // Anchored just after now: every window (segment, period) of the new state starts after
            // every grant made so far, so their refunds give nothing back (Rule::take's tags).
            const Nanos anchor = sat_add(clock_->now(), 1);
            if (tmpl_.window) {
                tmpl_.window->init(r.block());
            } else {
                r.state = tmpl_.rule->initial(anchor);
            }
            r.anchor = anchor;
            check_at_locked(at.shard, at.index, sat_add(record_full_at(r), sat_add(idle_timeout_, 1)));
            return true;
        }
    }
    const bool done = full->reset();
    recheck(key); // idle now, maybe: its eviction check
    return done;
}

std::optional<Statistics> PerKeyLimiter::statistics(std::string_view key) {
    auto at = locate(key, true);
    if (!at.found()) {
        return std::nullopt;
    }
    Record& r = at.shard.table.at(at.index);
    if (r.promoted()) {
        Statistics s = r.limiter()->statistics();
        s.total_successful_leases += r.successful;
        s.total_failed_leases += r.failed;
        return s;
    }
    return Statistics{available_locked(r, clock_->now()), 0, r.successful, r.failed};
}

PerKeyLimiter::Memory PerKeyLimiter::memory() {
    Memory m{sizeof(PerKeyLimiter) + sizeof(*shards_), 0};
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        const detail::KeyTable::Memory t = shard.table.memory();
        m.bytes += t.bytes;
        m.key_bytes += t.key_bytes;
    }
    return m;
}

Statistics PerKeyLimiter::totals() {
    if (closed_.load()) {
        throw ClosedError();
    }
    Statistics total{0, 0, dropped_successful_.load(), dropped_failed_.load()};
    const Nanos now = clock_->now();
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        for (std::uint32_t i = 0; i < shard.table.used(); ++i) {
            const Record& r = shard.table.at(i);
            if (!r.live()) {
                continue;
            }
            total.total_successful_leases += r.successful;
            total.total_failed_leases += r.failed;
            if (r.promoted()) {
                const Statistics s = r.limiter()->statistics();
                total.current_available_permits += s.current_available_permits;
                total.current_queued_count += s.current_queued_count;
                total.total_successful_leases += s.total_successful_leases;
                total.total_failed_leases += s.total_failed_leases;
            } else {
                total.current_available_permits += available_locked(r, now);
            }
        }
    }
    return total;
}

void PerKeyLimiter::check_invariants() {
    for (auto& shard : *shards_) {
        std::lock_guard<std::mutex> lock(shard.mu);
        shard.table.check_invariants();
    }
}

void PerKeyLimiter::close() {
    if (closed_.exchange(true)) {
        return;
    }
    for (auto& shard : *shards_) {
        std::vector<std::shared_ptr<Limiter>> full;
        {
            std::lock_guard<std::mutex> lock(shard.mu);
            for (std::uint32_t i = 0; i < shard.table.used(); ++i) {
                const Record& r = shard.table.at(i);
                if (r.live() && r.promoted()) {
                    full.push_back(r.limiter());
                }
            }
            shard.table.clear();
        }
        for (auto& limiter : full) {
            limiter->close(); // queued requests complete with reason "closed"
        }
    }
    size_.store(0);
    clock_->scheduler().cancel(this); // nothing left to evict: its timers would only pin it
}

} // namespace permits
