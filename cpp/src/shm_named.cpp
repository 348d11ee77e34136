// A segment's directory of named limiters and per-key tables: a name's slot created once (the
// only place that takes the segment's lock besides a change of amounts), or checked against what
// its opener asks for; and the amounts reconfigure changes in a slot, which every process reads
// lock-free (a generation and two banks: see NamedSlot).
#include "permits/shm_segment.hpp"

#if defined(__linux__)

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace permits::shm {

namespace {
std::atomic_ref<std::int64_t> word_ref(const std::int64_t* word) noexcept {
    // (const_cast: atomic_ref takes no const object; only loads go through it on a const word)
    return std::atomic_ref<std::int64_t>(*const_cast<std::int64_t*>(word)); // NOLINT
}
const std::int64_t* bank_of(const AmountBanks& banks, std::uint32_t generation) noexcept {
    return generation == 0 ? banks.made : (generation % 2 == 1 ? banks.odd : banks.even);
}
} // namespace

AmountBanks banks_of(NamedSlot& slot) noexcept {
    return {&slot.generation, slot.values, slot.values + 3, slot.values + 5, slot.values + 7};
}

std::uint32_t live_amounts(const NamedSlot& slot, std::int64_t (&out)[2]) noexcept {
    return live_amounts(banks_of(const_cast<NamedSlot&>(slot)), out); // NOLINT: read only
}

std::uint32_t live_amounts(const AmountBanks& banks, std::int64_t (&out)[2]) noexcept {
    for (;;) {
        const std::uint32_t generation = banks.generation->load(std::memory_order_acquire);
        const std::int64_t* bank = bank_of(banks, generation);
        out[0] = word_ref(bank).load(std::memory_order_relaxed);
        out[1] = word_ref(bank + 1).load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        // A writer rewrites this bank only after moving the generation on past it.
        if (banks.generation->load(std::memory_order_relaxed) == generation) {
            return generation;
        }
    }
}

std::int64_t bank_limit(const AmountBanks& banks, std::uint32_t generation) noexcept {
    return word_ref(bank_of(banks, generation)).load(std::memory_order_relaxed);
}

std::int64_t highest_of(const AmountBanks& banks) noexcept {
    return std::max(word_ref(banks.made).load(std::memory_order_relaxed),
                    word_ref(banks.highest).load(std::memory_order_relaxed));
}

std::uint32_t Segment::publish_amounts(NamedSlot& slot, const std::int64_t (&amounts)[2]) {
    return publish_amounts(banks_of(slot), slot.generation, amounts);
}

std::uint32_t Segment::publish_amounts(const AmountBanks& banks, std::atomic<std::uint32_t>& generation,
                                       const std::int64_t (&amounts)[2], const std::function<void()>& prepare,
                                       const std::function<void(std::uint32_t was)>& commit) {
    RobustLock lock(&header_->lock);
    if (prepare) {
        prepare();
    }
    const std::uint32_t was = generation.load();
    const std::uint32_t next = next_generation(was);
    std::int64_t* bank = next % 2 == 1 ? banks.odd : banks.even;
    word_ref(bank).store(amounts[0], std::memory_order_relaxed);
    word_ref(bank + 1).store(amounts[1], std::memory_order_relaxed);
    word_ref(banks.highest).store(std::max(highest_of(banks), amounts[0]), std::memory_order_relaxed);
    if (commit) {
        commit(was);
    } else {
        generation.store(next, std::memory_order_release);
    }
    return next;
}

std::uint32_t amounts_of(Kind kind) noexcept {
    switch (kind) {
    case Kind::TokenBucket: return 0b11U;
    case Kind::FixedWindow:
    case Kind::SlidingWindowCounter:
    case Kind::SlidingWindow:
    case Kind::Concurrency: return 0b1U;
    default: return 0;
    }
}

std::uint32_t amounts_of(Kind kind, const std::int64_t* values) noexcept {
    if (kind != Kind::KeyTable) {
        return amounts_of(kind);
    }
    const auto keys = static_cast<std::uint64_t>(values[0]);
    return keys <= static_cast<std::uint64_t>(Kind::Concurrency) ? amounts_of(static_cast<Kind>(keys)) << 1U : 0U;
}

std::uint32_t live_values(const NamedSlot& slot, std::int64_t (&values)[8], std::int64_t& highest) noexcept {
    std::int64_t amounts[2] = {};
    const std::uint32_t generation = live_amounts(slot, amounts);
    for (std::size_t i = 0; i < 8; ++i) {
        values[i] = word_ref(slot.values + i).load(std::memory_order_relaxed);
    }
    const std::uint32_t mask = generation != 0 ? amounts_of(slot.kind) : 0U;
    for (std::size_t i = 0; i < 2; ++i) {
        if (((mask >> i) & 1U) != 0) {
            values[i] = amounts[i];
        }
    }
    highest = std::max({slot.values[0], values[7], values[0]});
    return generation;
}

NamedSlot* Segment::find(std::string_view name) const noexcept {
    for (auto& slot : header_->named) {
        if (slot.ready.load() == 1 && std::string_view(slot.name, ::strnlen(slot.name, kNameBytes)) == name) {
            return &slot;
        }
    }
    return nullptr;
}

NamedSlot& Segment::named(std::string_view name, const Params& params, std::uint64_t bytes, Nanos anchor,
                          const std::function<void(char*, Nanos)>& init) {
    if (name.empty() || name.size() >= kNameBytes || name.find('\0') != std::string_view::npos) {
        throw std::invalid_argument("name must be 1 to " + std::to_string(kNameBytes - 1) +
                                    " bytes with no NUL character, got " + std::to_string(name.size()) + " bytes");
    }
    static constexpr const char* kKinds[] = {"free",           "token_bucket",           "fixed_window",
                                             "sliding_window", "sliding_window_counter", "concurrency",
                                             "per-key table"};
    const auto kind_name = [](Kind k) {
        const auto i = static_cast<std::uint32_t>(k);
        return i < std::size(kKinds) ? kKinds[i] : "corrupted slot";
    };
    // (a sliding window of segments below zero is the sliding log: specs.SlidingLog)
    const auto described = [&](Kind k, const std::int64_t* values) -> std::string {
        return k == Kind::SlidingWindow && values[2] < 0 ? "sliding_log" : kind_name(k);
    };
    const auto check = [&](NamedSlot& slot) -> NamedSlot& {
        const std::string where = "'" + std::string(name) + "' in segment '" + name_ + "' ";
        if (const std::string was = described(slot.kind, slot.values), asked = described(params.kind, params.values);
            was != asked) {
            throw std::invalid_argument(where + "is a " + was + ", not a " + asked);
        }
        // Once reconfigured, the amounts are the slot's: an opener asking for others takes them on.
        const std::uint32_t skipped = slot.generation.load() != 0 ? amounts_of(params.kind, params.values) : 0U;
        for (std::uint32_t i = 0; i < params.count; ++i) {
            if (((skipped >> i) & 1U) == 0 && slot.values[i] != params.values[i]) {
                const std::string field = params.names != nullptr ? params.names[i] : "parameter";
                const bool duration = ((params.durations >> i) & 1U) != 0;
                const auto show = [duration](std::int64_t v) {
                    if (!duration) {
                        return std::to_string(v);
                    }
                    std::ostringstream out;
                    out.precision(9);
                    out << static_cast<double>(v) / 1e9 << "s";
                    return out.str();
                };
                std::string message = where;
                message += "has " + field + "=";
                message += show(slot.values[i]);
                message += ", not " + field + "=";
                message += show(params.values[i]);
                throw std::invalid_argument(message);
            }
        }
        // (every slot's data starts on a 64-byte boundary: a state word elsewhere is no state word,
        // and a 16-byte compare-and-swap on it faults)
        if (slot.count != params.count || slot.offset < header_->arena_offset || slot.bytes != bytes ||
            slot.offset > size_ || slot.bytes > size_ - slot.offset || slot.offset % 64 != 0) {
            throw std::invalid_argument(where + "is corrupted (its slot's sizes do not add up)");
        }
        if (slot.anchor < 0 || slot.anchor > kMaxTime) {
            throw std::invalid_argument(where + "is corrupted (its slot's anchor, " + std::to_string(slot.anchor) +
                                        " ns, is outside time)");
        }
        return slot;
    };
    if (NamedSlot* slot = find(name)) {
        return check(*slot);
    }
    RobustLock lock(&header_->lock);
    if (NamedSlot* slot = find(name)) {
        return check(*slot);
    }
    NamedSlot* free = nullptr;
    for (auto& slot : header_->named) {
        if (slot.ready.load() == 0) {
            free = &slot;
            break;
        }
    }
    if (free == nullptr) {
        throw std::invalid_argument("segment '" + name_ + "' has no room for another name (" +
                                    std::to_string(kMaxNamed) + " at most)");
    }
    const std::uint64_t need = round_up(bytes, 64);
    if (header_->arena_used > header_->arena_bytes || need > header_->arena_bytes - header_->arena_used ||
        header_->arena_offset + header_->arena_bytes != size_ || header_->arena_used % 64 != 0) {
        // (a damaged header's sizes are never followed out of the segment)
        throw std::invalid_argument("segment '" + name_ + "' has no room left for '" + std::string(name) + "' (" +
                                    std::to_string(bytes) + " bytes): open it with a larger capacity (now " +
                                    std::to_string(header_->capacity) + ")");
    }
    // Every name placed before lies in the arena's used part (its use grows before a name is
    // published, under this lock): a use that says less is damaged, and would place this name over
    // another's data. (A slot whose data is not even inside the segment is no name's: never used.)
    for (const auto& slot : header_->named) {
        if (slot.ready.load() != 0 && slot.offset >= header_->arena_offset && slot.offset <= size_ &&
            slot.bytes <= size_ - slot.offset &&
            slot.offset + slot.bytes > header_->arena_offset + header_->arena_used) {
            throw std::invalid_argument("segment '" + name_ +
                                        "' is corrupted: its arena's use ends before the data of '" +
                                        std::string(slot.name, ::strnlen(slot.name, kNameBytes)) + "' (unlink it)");
        }
    }
    // Reserve first, publish last: a process killed in between leaks the bytes, never shares them.
    const std::uint64_t offset = header_->arena_offset + header_->arena_used;
    header_->arena_used += need;
    // The arena is never reused: its bytes are still the zeros of the new file, and pages nobody
    // has touched take no memory (a table's untouched records cost nothing until keys arrive).
    char* data = base() + offset;
    init(data, anchor);
    std::memset(free->name, 0, kNameBytes);
    std::memcpy(free->name, name.data(), name.size());
    free->kind = params.kind;
    free->count = params.count;
    free->generation.store(0);
    for (std::uint32_t i = 0; i < 8; ++i) {
        free->values[i] = i < params.count ? params.values[i] : 0;
    }
    free->offset = offset;
    free->bytes = bytes;
    free->anchor = anchor;
    free->ready.store(1);
    return *free;
}

} // namespace permits::shm

#endif // __linux__
