#include "permits/key_hash.hpp"

#include <random>

namespace permits::detail {

std::uint64_t key_hash_seed() noexcept {
    try {
        std::random_device device;
        return static_cast<std::uint64_t>(device()) << 32 ^ device();
    } catch (...) { // no entropy source: still a seed, only a predictable one
        return kOdd1;
    }
}

} // namespace permits::detail
