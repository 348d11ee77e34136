// Python partition keys as engine keys: bytes tagged with their type, so "7" and 7 differ.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>
#include <string_view>

namespace permits::bind {

/// An encoded key under construction: on the stack up to 120 bytes (UUIDs, IPv6 addresses, most
/// tuples), so that a check on such a key calls no allocator (benchmarks/bench_per_key.py); longer
/// ones move to a std::string.
class KeyBuffer {
public:
    void push_back(char c) { append(&c, 1); }
    void append(const char* p, std::size_t n) {
        if (spilled_.empty() && size_ + n <= kInline) {
            std::memcpy(inline_ + size_, p, n);
            size_ += n;
            return;
        }
        if (spilled_.empty()) {
            spilled_.assign(inline_, size_);
        }
        spilled_.append(p, n);
    }
    std::string_view view() const noexcept {
        return spilled_.empty() ? std::string_view(inline_, size_) : std::string_view(spilled_);
    }

private:
    static constexpr std::size_t kInline = 120;
    char inline_[kInline];
    std::size_t size_ = 0;
    std::string spilled_; // non-empty once the key outgrew inline_
};

/// Appends the key's encoding to `out`; false with a Python error set for a key of another type
/// (str, bytes, int or tuples of them, nested at most 16 deep).
bool encode_key(PyObject* key, KeyBuffer& out, int depth = 0);
/// The key's encoding; throws pybind11::error_already_set for a bad key.
std::string key_of(pybind11::handle resource);

} // namespace permits::bind
