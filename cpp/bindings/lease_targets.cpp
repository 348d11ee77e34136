#include "lease_targets.hpp"

#include <unordered_map>

namespace permits::bind {
namespace {

struct Entry {
    std::weak_ptr<Limiter> limiter;
    std::weak_ptr<PerKeyLimiter> per_key;
};

// Guarded by the GIL. Entries of limiters that are gone are swept when the map has doubled.
std::unordered_map<std::uint64_t, Entry>& registry() {
    static auto* map = new std::unordered_map<std::uint64_t, Entry>(); // leaked: used until exit
    return *map;
}
std::uint64_t next_id = 0;
std::size_t sweep_at = 64;

std::uint64_t add(Entry entry) {
    auto& map = registry();
    if (map.size() >= sweep_at) {
        std::erase_if(map, [](const auto& kv) { return kv.second.limiter.expired() && kv.second.per_key.expired(); });
        sweep_at = 2 * map.size() + 64;
    }
    const std::uint64_t id = ++next_id;
    map.emplace(id, std::move(entry));
    return id;
}

} // namespace

std::uint64_t target_of(Limiter& limiter) {
    if (limiter.binding_tag == 0) {
        limiter.binding_tag = add({limiter.weak_from_this(), {}});
    }
    return limiter.binding_tag;
}

std::uint64_t target_of(PerKeyLimiter& per_key) {
    if (per_key.binding_tag == 0) {
        per_key.binding_tag = add({{}, per_key.weak_from_this()});
    }
    return per_key.binding_tag;
}

Target find_target(std::uint64_t id) {
    auto& map = registry();
    const auto it = map.find(id);
    if (it == map.end()) {
        return {};
    }
    return {it->second.limiter.lock(), it->second.per_key.lock()};
}

} // namespace permits::bind
