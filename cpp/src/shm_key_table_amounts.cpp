// The keys' amounts of a per-key table (reconfigure): published in the table's head for every
// process, and taken on by each at its next use, every shard locked while its rule changes.
#include "permits/shm_key_table.hpp"

#if defined(__linux__)

#include <vector>

#include "shm_table_layout.hpp"

namespace permits::shm {

using namespace table_layout;

AmountBanks KeyTable::banks() const noexcept {
    TableHead& head = head_of(data_);
    // (the keys' amounts as made are the table's parameters 1 and 2: its keys' kind comes first)
    return {&slot_->generation, slot_->values + 1, head.odd, head.even, &head.highest};
}

void KeyTable::amounts(std::int64_t (&out)[2]) const noexcept {
    if (rule_) {
        rule_->amounts(out);
    } else {
        out[0] = limit();
        out[1] = 0;
    }
}

void KeyTable::reconfigure(const Params& params) {
    const Kind kind = tmpl_.params.kind;
    const std::uint32_t changeable = amounts_of(kind);
    if (params.kind != kind) {
        throw std::invalid_argument("a limiter keeps its kind");
    }
    for (std::uint32_t i = 0; i < tmpl_.params.count; ++i) {
        if (((changeable >> i) & 1U) == 0 && params.values[i] != tmpl_.params.values[i]) {
            throw std::invalid_argument("a limiter keeps its window, period and segments");
        }
    }
    (void)checked_rule_of(kind, params.values); // (the amounts checked as a limiter of the kind checks them)
    const std::int64_t a[2] = {params.values[0], (changeable & 2U) != 0 ? params.values[1] : 0};
    store_->segment().publish_amounts(banks(), slot_->generation, a);
    catch_up();
}

void KeyTable::catch_up_slow() {
    const std::uint64_t me = current_pid();
    std::uint64_t was = changing_.load();
    // Another thread of this process is at it: this one decides with the amounts it has meanwhile
    // (a decision as a change lands is under the old amounts or the new ones).
    if (was == me || !changing_.compare_exchange_strong(was, me)) {
        return;
    }
    std::int64_t a[2] = {};
    const std::uint32_t generation = live_amounts(banks(), a);
    if (generation != seen_.load()) {
        adopt(a, highest_of(banks()));
        seen_.store(generation, std::memory_order_release);
    }
    changing_.store(0);
}

void KeyTable::adopt(const std::int64_t (&a)[2], std::int64_t highest) {
    const Kind kind = tmpl_.params.kind;
    std::int64_t v[3] = {tmpl_.params.values[0], tmpl_.params.values[1], tmpl_.params.values[2]};
    put_amounts(kind, v, a);
    highest = std::max({highest, limit(), a[0]});
    std::int64_t most[3] = {highest, v[1], v[2]};
    std::unique_ptr<Rule> next;
    std::unique_ptr<Rule> next_most;
    try {
        next = checked_rule_of(kind, v);
        next_most = rule_of(kind, most);
    } catch (const std::invalid_argument&) {
        return; // amounts no limiter could have (a damaged bank): the keys keep theirs
    }
    // Every shard, in order (a use of the table holds one at a time): no key decides meanwhile.
    std::vector<std::unique_ptr<RobustLock>> locks;
    locks.reserve(shards_);
    for (std::uint32_t s = 0; s < shards_; ++s) {
        locks.push_back(std::make_unique<RobustLock>(lock_of(data_, s)));
    }
    if (rule_) {
        rule_->adopt(*next);
        most_->adopt(*next_most);
    }
    highest_.store(highest);
    limit_.store(a[0]);
}

} // namespace permits::shm

#endif // __linux__
