#include "lease_targets.hpp"

#include <unordered_map>

namespace permits::bind {
namespace {

struct Entry {
    std::weak_ptr<Limiter> limiter;
    std::weak_ptr<PerKeyLimiter> per_key;
#if defined(__linux__)
    std::weak_ptr<shm::KeyedLimiter> shm_keyed;
#endif
    bool expired() const noexcept {
#if defined(__linux__)
        if (!shm_keyed.expired()) {
            return false;
        }
#endif
        return limiter.expired() && per_key.expired();
    }
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
        std::erase_if(map, [](const auto& kv) { return kv.second.expired(); });
        sweep_at = 2 * map.size() + 64;
    }
    const std::uint64_t id = ++next_id;
    map.emplace(id, std::move(entry));
    return id;
}

} // namespace

std::uint64_t target_of(Limiter& limiter) {
    if (limiter.binding_tag == 0) {
        Entry e;
        e.limiter = limiter.weak_from_this();
        limiter.binding_tag = add(std::move(e));
    }
    return limiter.binding_tag;
}

std::uint64_t target_of(PerKeyLimiter& per_key) {
    if (per_key.binding_tag == 0) {
        Entry e;
        e.per_key = per_key.weak_from_this();
        per_key.binding_tag = add(std::move(e));
    }
    return per_key.binding_tag;
}

#if defined(__linux__)
std::uint64_t target_of(shm::KeyedLimiter& keyed) {
    if (keyed.binding_tag == 0) {
        Entry e;
        e.shm_keyed = keyed.weak_from_this();
        keyed.binding_tag = add(std::move(e));
    }
    return keyed.binding_tag;
}
#endif

Target find_target(std::uint64_t id) {
    auto& map = registry();
    const auto it = map.find(id);
    if (it == map.end()) {
        return {};
    }
    Target t{it->second.limiter.lock(), it->second.per_key.lock()};
#if defined(__linux__)
    t.shm_keyed = it->second.shm_keyed.lock();
#endif
    return t;
}

} // namespace permits::bind
