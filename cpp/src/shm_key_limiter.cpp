// A key's limiter in this process (KeyTable::limiter_for): the engine's queue, leases and waits
// over the key's record, following the keys' amounts any process may reconfigure.
#include "permits/shm_key_table.hpp"

#if defined(__linux__)

#include <stdexcept>

#include "shm_table_layout.hpp"

namespace permits::shm {

using namespace table_layout;

// ---- a key's limiter in this process ----

namespace {
class KeyLimiter final : public SharedLimiter {
public:
    KeyLimiter(std::shared_ptr<KeyTable> table, KeyTable::Key key, std::int64_t max_permits, QueueOptions queue)
        : SharedLimiter(table->store().clock(), max_permits, queue, false), table_(std::move(table)),
          key_(std::move(key)) {}

    /// The keys' limit `limit` (a change of the table's amounts) and queue options `queue`.
    void take_on(std::int64_t limit, QueueOptions queue) {
        apply_change(limit, queue, [] {});
    }

    bool releases_permits() const noexcept override { return table_->releases_permits(); }
    Nanos full_at() const override { return table_->full_at(key_); }
    bool queued() const noexcept override { return queued_requests() > 0; }
    void poll() override {
        table_->reclaim(key_);
        recheck();
    }

protected:
    bool take_held(std::int64_t n, Nanos now, std::int64_t& tag) override {
        if (table_->take(key_, n, now, tag)) {
            if (table_->releases_permits()) {
                watch(table_->store(), table_->tmpl().lease_ttl / 3, false);
            }
            return true;
        }
        return false;
    }
    std::int64_t available_at(Nanos now) const override { return table_->available(key_, now); }
    Nanos time_until(std::int64_t needed, Nanos now) const override { return table_->time_until(key_, needed, now); }
    void give_back_held(std::int64_t n, std::int64_t tag, Nanos now) override {
        if (table_->give_back(key_, n, tag, now)) {
            table_->store().segment().notify();
        }
    }
    bool still_held(std::int64_t tag, std::int64_t permits) override { return table_->still_held(key_, tag, permits); }
    void let_go(std::int64_t tag, std::int64_t permits) override {
        if (table_->let_go(key_, tag, permits, state_now())) {
            table_->store().segment().notify();
        }
    }
    void told_lost(std::int64_t leases) override { table_->note_lost(leases); }
    std::unique_ptr<Projection> project() const override { return table_->project(key_); }
    void on_queued() override {
        if (table_->releases_permits()) {
            watch(table_->store(), table_->tmpl().lease_ttl / 3, true);
        }
    }
    bool no_room() override { return table_->no_room(key_); }
    Reason refusal(std::int64_t n) override { return table_->refusal(key_, n); }

private:
    std::shared_ptr<KeyTable> table_;
    KeyTable::Key key_;
};
} // namespace

void KeyTable::take_on(SharedLimiter& key_limiter, QueueOptions queue) {
    static_cast<KeyLimiter&>(key_limiter).take_on(limit(), queue);
}

std::shared_ptr<SharedLimiter> KeyTable::limiter_for(std::string_view key, QueueOptions queue) {
    detail::check_queue(queue);
    // The generation first: a limit read after it is as new or newer (taken on again, to no effect).
    const std::uint32_t seen = seen_.load(std::memory_order_acquire);
    auto limiter = std::make_shared<KeyLimiter>(shared_from_this(), key_of(key), limit(), queue);
    // It follows the keys' amounts: a change another process makes reaches its queue (requests it can
    // never serve fail, a raise serves) at its next decision. (The limiter keeps the table alive.)
    auto shared = std::make_unique<SharedAmounts>();
    shared->generation = &slot_->generation;
    shared->read = [this](std::int64_t(&a)[2]) {
        catch_up();
        amounts(a);
        return seen_.load(std::memory_order_acquire);
    };
    shared->publish = [](const std::int64_t(&)[2]) -> std::uint32_t {
        throw std::logic_error("a key's limit changes with every key's (KeyTable::reconfigure)");
    };
    KeyLimiter* raw = limiter.get();
    shared->apply = [raw](const std::int64_t(&a)[2]) { raw->take_on(a[0], raw->queue_options()); };
    limiter->follow(std::move(shared), seen);
    return limiter;
}

} // namespace permits::shm

#endif // __linux__
