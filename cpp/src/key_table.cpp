#include "permits/key_table.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace permits::detail {

void KeyBytes::assign(std::string_view key) {
    release();
    if (key.size() <= kInline) {
        std::memcpy(b_, key.data(), key.size());
        b_[14] = static_cast<unsigned char>(key.size());
        return;
    }
    char* heap = new char[key.size()];
    std::memcpy(heap, key.data(), key.size());
    const auto len = static_cast<std::uint32_t>(key.size());
    std::memcpy(b_, &heap, sizeof heap);
    std::memcpy(b_ + 8, &len, sizeof len);
    b_[14] = 0xff;
}

void KeyBytes::release() noexcept {
    if (b_[14] == 0xff) {
        char* heap = nullptr;
        std::memcpy(&heap, b_, sizeof heap);
        delete[] heap;
    }
    b_[14] = 0;
}

std::uint32_t KeyTable::allocate() {
    if (free_head_ != kNoRecord) {
        const std::uint32_t i = free_head_;
        free_head_ = static_cast<std::uint32_t>(Pair(at(i).state).a);
        return i;
    }
    if ((used_ & (kChunk - 1)) == 0) { // the first record of a chunk not allocated yet
        chunks_.push_back(std::make_unique<KeyRecord[]>(kChunk));
    }
    return used_++;
}

void KeyTable::free(std::uint32_t i) noexcept {
    KeyRecord& r = at(i);
    if (r.promoted()) {
        delete r.full();
    } else if (r.has_block()) {
        delete[] r.block();
    }
    r.key.release();
    r.key.set_flags(0);
    r.check_at = kNever;
    r.heap_pos = kNoRecord;
    r.state = {static_cast<std::int64_t>(free_head_), 0};
    free_head_ = i;
}

void KeyTable::reset() noexcept {
    std::vector<std::unique_ptr<KeyRecord[]>>().swap(chunks_);
    std::vector<std::uint32_t>().swap(slots_);
    std::vector<std::uint32_t>().swap(checks_);
    used_ = 0;
    free_head_ = kNoRecord;
}

std::uint32_t KeyTable::add(std::string_view key, std::uint64_t hash) {
    const std::uint32_t i = allocate();
    KeyRecord& r = at(i);
    try {
        r.key.assign(key);
        r.key.set_flags(kLive);
        r.state = Pair{};
        r.anchor = 0;
        r.successful = 0;
        r.failed = 0;
        r.check_at = kNever;
        r.heap_pos = kNoRecord;
        if (checks_.size() == checks_.capacity()) { // its check goes in without failing
            // By an eighth: copying 4-byte entries is cheap, slack is 4 bytes a key (by half: 1 B on average).
            checks_.reserve(std::max<std::size_t>(16, checks_.capacity() + checks_.capacity() / 8));
        }
        if ((static_cast<std::size_t>(live_) + 1) * 20 > slots_.size() * 17) {
            rehash(std::max<std::size_t>(16, slots_.size() + slots_.size() / 2));
        }
    } catch (...) {
        free(i);
        throw;
    }
    place(slot_value(hash, i), scale(high_of(hash), slots_.size()));
    ++live_;
    return i;
}

void KeyTable::remove(std::uint32_t i) {
    if (at(i).heap_pos != kNoRecord) {
        cancel_check(i);
    }
    erase(i);
    free(i);
    --live_;
    if (live_ == 0) {
        reset();
    } else if (slots_.size() > 64 && static_cast<std::size_t>(live_) * 8 < slots_.size()) {
        rehash(slots_.size() / 2);
    }
}

void KeyTable::clear() noexcept {
    for (std::uint32_t i = 0; i < used_; ++i) {
        if (at(i).live()) {
            free(i);
        }
    }
    live_ = 0;
    reset();
}

std::uint32_t* KeyTable::attach_block(std::uint32_t i) {
    KeyRecord& r = at(i);
    auto* block = new std::uint32_t[block_words_];
    r.state = Pair{std::bit_cast<std::int64_t>(block), 0};
    r.key.set_flags(static_cast<std::uint8_t>(r.key.flags() | kBlock));
    return block;
}

void KeyTable::release_block(KeyRecord& r) noexcept {
    delete[] r.block();
    r.state = Pair{};
    r.key.set_flags(static_cast<std::uint8_t>(r.key.flags() & ~kBlock));
}

void KeyTable::place(std::uint32_t v, std::size_t p) {
    while (slots_[p] != 0) {
        p = next(p);
    }
    slots_[p] = v;
}

void KeyTable::erase(std::uint32_t index) {
    std::size_t i = home_of(index);
    while (index_of(slots_[i]) != index) {
        i = next(i);
    }
    // Backward shift: later entries of the probe run move up, so no tombstones are needed.
    for (std::size_t j = next(i); slots_[j] != 0; j = next(j)) {
        const std::size_t k = home(slots_[j]);
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            slots_[i] = slots_[j];
            i = j;
        }
    }
    slots_[i] = 0;
}

void KeyTable::rehash(std::size_t capacity) {
    std::vector<std::uint32_t> old;
    old.swap(slots_);
    slots_.assign(capacity, 0);
    for (const std::uint32_t v : old) {
        if (v != 0) {
            place(v, home(v));
        }
    }
}

void KeyTable::sift_up(std::size_t pos) {
    const std::uint32_t i = checks_[pos];
    while (pos > 0 && earlier(i, checks_[(pos - 1) / 2])) {
        put(pos, checks_[(pos - 1) / 2]);
        pos = (pos - 1) / 2;
    }
    put(pos, i);
}

void KeyTable::sift_down(std::size_t pos) {
    const std::uint32_t i = checks_[pos];
    const std::size_t n = checks_.size();
    for (std::size_t child = 2 * pos + 1; child < n; child = 2 * pos + 1) {
        if (child + 1 < n && earlier(checks_[child + 1], checks_[child])) {
            ++child;
        }
        if (!earlier(checks_[child], i)) {
            break;
        }
        put(pos, checks_[child]);
        pos = child;
    }
    put(pos, i);
}

void KeyTable::check_sooner(std::uint32_t i) {
    if (at(i).heap_pos == kNoRecord) {
        checks_.push_back(i);
        at(i).heap_pos = static_cast<std::uint32_t>(checks_.size() - 1);
    }
    sift_up(at(i).heap_pos);
}

void KeyTable::cancel_check(std::uint32_t i) {
    KeyRecord& r = at(i);
    const std::size_t pos = r.heap_pos;
    r.heap_pos = kNoRecord;
    r.check_at = kNever;
    const std::uint32_t last = checks_.back();
    checks_.pop_back();
    if (pos < checks_.size()) {
        put(pos, last);
        sift_down(pos);
        sift_up(at(last).heap_pos);
    }
}

std::uint32_t KeyTable::pop_due_check(Nanos now) {
    if (checks_.empty() || Nanos(at(checks_.front()).check_at) > now) {
        return kNoRecord;
    }
    const std::uint32_t i = checks_.front();
    cancel_check(i);
    return i;
}

KeyTable::Memory KeyTable::memory() const {
    Memory m{chunks_.capacity() * sizeof(void*) + chunks_.size() * kChunk * sizeof(KeyRecord) +
                 slots_.capacity() * sizeof(std::uint32_t) + checks_.capacity() * sizeof(std::uint32_t),
             0};
    for (std::uint32_t i = 0; i < used_; ++i) {
        const KeyRecord& r = at(i);
        if (r.live()) {
            m.key_bytes += r.key.view().size();
            m.bytes += r.key.heap_bytes() + (r.has_block() ? block_words_ * sizeof(std::uint32_t) : 0);
        }
    }
    return m;
}

void KeyTable::check_invariants() const {
    auto require = [](bool ok, const char* what) {
        if (!ok) {
            throw std::logic_error(std::string("key table: ") + what);
        }
    };
    std::uint32_t live = 0;
    std::size_t pending = 0;
    for (std::uint32_t i = 0; i < used_; ++i) {
        const KeyRecord& r = at(i);
        if (!r.live()) {
            require(r.heap_pos == kNoRecord, "a free record has a check");
            continue;
        }
        ++live;
        pending += r.heap_pos != kNoRecord ? 1 : 0;
        require(find(r.key.view(), hash_key(r.key.view())) == i, "a key is not found at its record");
        require(!(r.has_block() && r.promoted()), "a promoted record still has its block");
        require(!r.has_block() || r.block() != nullptr, "a record's block is missing");
        require((r.check_at == kNever) == (r.heap_pos == kNoRecord), "a record's check and heap place disagree");
        require(r.heap_pos == kNoRecord || (r.heap_pos < checks_.size() && checks_[r.heap_pos] == i),
                "a record's heap place does not hold it");
    }
    require(live == live_, "the live count is off");
    require(static_cast<std::size_t>(
                std::count_if(slots_.begin(), slots_.end(), [](std::uint32_t v) { return v != 0; })) == live,
            "the index holds other than the live records");
    require(checks_.size() == pending, "the check heap holds other than the pending checks");
    for (std::size_t k = 1; k < checks_.size(); ++k) {
        require(!earlier(checks_[k], checks_[(k - 1) / 2]), "the check heap is out of order");
    }
}

} // namespace permits::detail
