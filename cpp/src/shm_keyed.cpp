#include "permits/shm_keyed.hpp"

#if defined(__linux__)

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "permits/key_hash.hpp"

namespace permits::shm {

namespace {
/// Entries looked at, least recently used first, to make room for a new key: one that cannot be
/// dropped (a request queued, a lease or a wait holding its Limiter) is moved to the front.
constexpr int kDropTries = 8;
} // namespace

class KeyedLimiter::Guard {
public:
    explicit Guard(KeyedLimiter& k) : k_(k) {
        const std::uint64_t me = current_pid();
        for (;;) {
            std::uint64_t seen = 0;
            if (k_.lock_.compare_exchange_weak(seen, me, std::memory_order_acquire)) {
                return;
            }
            // Held by another pid: a thread of the parent this forked child does not have.
            if (seen != 0 && seen != me && k_.lock_.compare_exchange_strong(seen, me, std::memory_order_acquire)) {
                // The parent's keys may be torn mid-change: never read again (left, not freed).
                static_cast<void>(k_.kept_.release());
                k_.kept_ = std::make_unique<Kept>();
                return;
            }
            std::this_thread::yield();
        }
    }
    ~Guard() { k_.lock_.store(0, std::memory_order_release); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

private:
    KeyedLimiter& k_;
};

KeyedLimiter::KeyedLimiter(std::shared_ptr<KeyTable> table, std::size_t keys_kept)
    : table_(std::move(table)), keys_kept_(std::max<std::size_t>(keys_kept, 1)), queue_(table_->tmpl().queue),
      direct_(!table_->releases_permits()), kept_(std::make_unique<Kept>()) {}

KeyedLimiter::~KeyedLimiter() = default;

bool KeyedLimiter::through_limiter(const Entry& e) const noexcept {
    return !direct_ || (e.limiter && e.limiter->queued_requests() > 0);
}

KeyedLimiter::Entry& KeyedLimiter::entry_locked(std::string_view key,
                                                std::vector<std::shared_ptr<SharedLimiter>>& dropped) {
    Kept& k = *kept_;
    const Probe probe{key, hash_key(key)};
    if (const auto found = k.index.find(probe); found != k.index.end()) {
        if (found->second != k.order.begin()) {
            k.order.splice(k.order.begin(), k.order, found->second);
        }
        return *found->second;
    }
    for (int tries = 0; k.index.size() >= keys_kept_ && tries < kDropTries && !k.order.empty(); ++tries) {
        auto last = std::prev(k.order.end());
        const bool busy = last->limiter && (last->limiter.use_count() > 1 || last->limiter->queued_requests() > 0);
        if (busy) {
            k.order.splice(k.order.begin(), k.order, last); // (kept past the bound while it is busy)
        } else {
            drop_locked(last, dropped);
        }
    }
    Entry made;
    made.bytes.assign(key);
    made.key = table_->key_of(key);
    k.order.push_front(std::move(made));
    try {
        k.index.emplace(Probe{k.order.front().bytes, probe.hash}, k.order.begin());
    } catch (...) {
        k.order.pop_front();
        throw;
    }
    return k.order.front();
}

void KeyedLimiter::drop_locked(std::list<Entry>::iterator it, std::vector<std::shared_ptr<SharedLimiter>>& dropped) {
    dropped_successful_ += it->successful;
    dropped_failed_ += it->failed;
    if (it->limiter) {
        const Statistics s = it->limiter->statistics();
        dropped_successful_ += s.total_successful_leases;
        dropped_failed_ += s.total_failed_leases;
        dropped.push_back(std::move(it->limiter)); // destroyed once the guard is let go
    }
    kept_->index.erase(Probe{it->bytes, hash_key(it->bytes)});
    kept_->order.erase(it);
}

const std::shared_ptr<SharedLimiter>& KeyedLimiter::limiter_locked(Entry& e) {
    if (!e.limiter) {
        e.limiter = table_->limiter_for(e.bytes, queue_);
    }
    return e.limiter;
}

Outcome KeyedLimiter::refused(const KeyTable::Key& key, std::int64_t n, Nanos now) {
    // As Limiter::acquire refuses: no room for the key, else why and when to retry (retry_after_alone).
    if (table_->no_room(key)) {
        return Outcome::failed(n, Reason::PartitionLimit);
    }
    const Reason why = table_->refusal(key, n);
    const Nanos wait = table_->time_until(key, std::max<std::int64_t>(n, 1), now);
    if (wait != kNever) {
        return Outcome::failed(n, why, std::max<i128>(0, wait));
    }
    auto projection = table_->project(key);
    if (!projection) {
        return Outcome::failed(n, why, -1);
    }
    return Outcome::failed(n, why, std::max<i128>(0, projection->grant(n, now, false) - now));
}

KeyedLimiter::Result KeyedLimiter::acquire(std::string_view key, std::int64_t n) {
    table_->catch_up();
    detail::check_permit_count(n, table_->limit());
    std::vector<std::shared_ptr<SharedLimiter>> dropped;
    std::shared_ptr<SharedLimiter> through;
    Result result;
    {
        Guard guard(*this);
        if (closed_.load()) {
            throw ClosedError();
        }
        Entry& e = entry_locked(key, dropped);
        if (through_limiter(e)) {
            through = limiter_locked(e);
        } else {
            // Limiter::acquire's grant, on the record: a zero-permit request succeeds while any
            // permit is available.
            const Nanos now = table_->store().now();
            std::int64_t tag = 0;
            const bool ok = n == 0 ? table_->available(e.key, now) > 0 : table_->take(e.key, n, now, tag);
            if (ok) {
                ++e.successful;
                result.outcome = Outcome::granted(n, tag);
            } else {
                ++e.failed;
                result.outcome = refused(e.key, n, now);
            }
        }
    }
    if (through) {
        result.outcome = through->acquire(n);
        result.limiter = std::move(through);
    }
    return result;
}

std::optional<KeyedLimiter::Result> KeyedLimiter::try_now(std::string_view key, std::int64_t n) {
    table_->catch_up();
    detail::check_permit_count(n, table_->limit());
    std::vector<std::shared_ptr<SharedLimiter>> dropped;
    std::shared_ptr<SharedLimiter> through;
    {
        Guard guard(*this);
        if (closed_.load()) {
            throw ClosedError();
        }
        Entry& e = entry_locked(key, dropped);
        if (through_limiter(e)) {
            through = limiter_locked(e);
        } else {
            const Nanos now = table_->store().now();
            std::int64_t tag = 0;
            if (!(n == 0 ? table_->available(e.key, now) > 0 : table_->take(e.key, n, now, tag))) {
                return std::nullopt; // nothing counted: the caller goes on to the queue
            }
            ++e.successful;
            return Result{Outcome::granted(n, tag), nullptr};
        }
    }
    auto o = through->try_now(n);
    if (!o) {
        return std::nullopt;
    }
    return Result{*o, std::move(through)};
}

std::shared_ptr<SharedLimiter> KeyedLimiter::limiter(std::string_view key) {
    std::vector<std::shared_ptr<SharedLimiter>> dropped;
    Guard guard(*this);
    if (closed_.load()) {
        throw ClosedError();
    }
    return limiter_locked(entry_locked(key, dropped));
}

void KeyedLimiter::give_back(std::string_view key, std::int64_t n, std::int64_t tag) {
    if (n <= 0) {
        return;
    }
    // (after close() too: other processes count on the permits, as Limiter::give_back does)
    table_->give_back(table_->key_of(key), n, tag, table_->store().now());
    recheck_kept(key); // permits came back: serve the key's queue
}

void KeyedLimiter::recheck_kept(std::string_view key) {
    std::shared_ptr<SharedLimiter> queued;
    {
        Guard guard(*this);
        const auto found = kept_->index.find(Probe{key, hash_key(key)});
        if (found != kept_->index.end() && found->second->limiter) {
            queued = found->second->limiter;
        }
    }
    if (queued) {
        queued->recheck(); // (outside the guard: it serves waiters)
    }
}

bool KeyedLimiter::reset(std::string_view key) {
    if (closed_.load() || !table_->reset(table_->key_of(key), table_->store().now())) {
        return false;
    }
    recheck_kept(key); // the whole limit is there: serve the key's queue
    return true;
}

void KeyedLimiter::reconfigure(const Params& params, QueueOptions queue) {
    detail::check_queue(queue);
    if (closed_.load()) {
        throw ClosedError();
    }
    table_->reconfigure(params); // (refused: nothing changed)
    std::vector<std::shared_ptr<SharedLimiter>> limiters;
    {
        Guard guard(*this);
        queue_ = queue;
        for (const Entry& e : kept_->order) {
            if (e.limiter) {
                limiters.push_back(e.limiter);
            }
        }
    }
    for (const auto& l : limiters) { // (outside the guard: a failed wait's completion may call back in)
        try {
            table_->take_on(*l, queue);
        } catch (const ClosedError&) {
            // (closed meanwhile: its requests failed already)
        }
    }
}

QueueOptions KeyedLimiter::queue_options() {
    Guard guard(*this);
    return queue_;
}

Statistics KeyedLimiter::statistics(std::string_view key) {
    std::vector<std::shared_ptr<SharedLimiter>> dropped;
    Guard guard(*this);
    if (closed_.load()) {
        throw ClosedError();
    }
    Entry& e = entry_locked(key, dropped);
    Statistics s{table_->available(e.key, table_->store().now()), 0, e.successful, e.failed};
    if (e.limiter) {
        const Statistics l = e.limiter->statistics();
        s.current_queued_count = l.current_queued_count;
        s.total_successful_leases += l.total_successful_leases;
        s.total_failed_leases += l.total_failed_leases;
    }
    return s;
}

Statistics KeyedLimiter::totals() {
    Guard guard(*this);
    if (closed_.load()) {
        throw ClosedError();
    }
    Statistics s{0, 0, dropped_successful_, dropped_failed_};
    const Nanos now = table_->store().now();
    for (const Entry& e : kept_->order) {
        s.current_available_permits += table_->available(e.key, now);
        s.total_successful_leases += e.successful;
        s.total_failed_leases += e.failed;
        if (e.limiter) {
            const Statistics l = e.limiter->statistics();
            s.current_queued_count += l.current_queued_count;
            s.total_successful_leases += l.total_successful_leases;
            s.total_failed_leases += l.total_failed_leases;
        }
    }
    return s;
}

void KeyedLimiter::close() {
    std::vector<std::shared_ptr<SharedLimiter>> limiters;
    {
        Guard guard(*this);
        if (closed_.exchange(true)) {
            return;
        }
        for (const Entry& e : kept_->order) {
            if (e.limiter) {
                limiters.push_back(e.limiter);
            }
        }
    }
    for (const auto& l : limiters) {
        l->close(); // (outside the guard: a closed wait's completion may call back in)
    }
}

std::size_t KeyedLimiter::kept() noexcept {
    Guard guard(*this);
    return kept_->index.size();
}

std::size_t KeyedLimiter::limiters() noexcept {
    Guard guard(*this);
    return static_cast<std::size_t>(
        std::count_if(kept_->order.begin(), kept_->order.end(), [](const Entry& e) { return e.limiter != nullptr; }));
}

} // namespace permits::shm

#endif // __linux__
