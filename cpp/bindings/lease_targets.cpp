#include "lease_targets.hpp"

#include <mutex>
#include <unordered_map>

#include "free_threading.hpp"

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

// Guarded by the GIL, and by this mutex without it (a free-threaded build). Entries of limiters
// that are gone are swept when the map has doubled.
SharedStateMutex registry_mutex;
std::unordered_map<std::uint64_t, Entry>& registry() {
    static auto* map = new std::unordered_map<std::uint64_t, Entry>(); // leaked: used until exit
    return *map;
}
std::uint64_t next_id = 0;
std::size_t sweep_at = 64;

// Called with the registry's mutex held.
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

// The id of `owner` (a limiter or table whose `binding_tag` it is), registered on first use: read
// without the lock once set (a lease is made on every acquire), set once under it.
template <class T> std::uint64_t registered(T& owner, std::weak_ptr<T> Entry::*slot) {
    if (const std::uint64_t tag = load_shared(owner.binding_tag); tag != 0) {
        return tag;
    }
    const std::lock_guard lock(registry_mutex);
    if (owner.binding_tag == 0) {
        Entry e;
        e.*slot = owner.weak_from_this();
        store_shared(owner.binding_tag, add(std::move(e)));
    }
    return owner.binding_tag;
}

} // namespace

std::uint64_t target_of(Limiter& limiter) {
    return registered(limiter, &Entry::limiter);
}

std::uint64_t target_of(PerKeyLimiter& per_key) {
    return registered(per_key, &Entry::per_key);
}

#if defined(__linux__)
std::uint64_t target_of(shm::KeyedLimiter& keyed) {
    return registered(keyed, &Entry::shm_keyed);
}
#endif

Target find_target(std::uint64_t id) {
    const std::lock_guard lock(registry_mutex);
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
