// What the libFuzzer targets share (fuzz_engine.cpp, fuzz_per_key.cpp, fuzz_shm_segment.cpp): the verbose
// switch for triage, the trace and CHECK macros, the limiter kinds, and the entry point's body. Each target
// is one translation unit that includes this header once.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace permits_fuzz {

// Set PERMITS_FUZZ_VERBOSE=1 to print a trace and which invariant broke before the trap (for triage).
inline bool verbose() {
    static const bool v = std::getenv("PERMITS_FUZZ_VERBOSE") != nullptr;
    return v;
}

inline long long ll(std::int64_t v) {
    return static_cast<long long>(v);
}

enum class Kind { Concurrency, TokenBucket, FixedWindow, SlidingWindow, SlidingWindowCounter };

// The body of LLVMFuzzerTestOneInput: inputs shorter than min_size are skipped, others run as one program
// of Harness (constructed from the input, then run()).
template <class Harness> int run_input(const std::uint8_t* data, std::size_t size, std::size_t min_size) {
    if (size < min_size) {
        return 0;
    }
    FuzzedDataProvider in(data, size);
    Harness h(in);
    h.run();
    return 0;
}

} // namespace permits_fuzz

#define trace(...)                                                                                                     \
    do {                                                                                                               \
        if (permits_fuzz::verbose()) {                                                                                 \
            std::fprintf(stderr, __VA_ARGS__);                                                                         \
        }                                                                                                              \
    } while (0)

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            if (permits_fuzz::verbose()) {                                                                             \
                std::fprintf(stderr, "invariant broken at line %d: %s\n", __LINE__, #cond);                            \
            }                                                                                                          \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)
