// What the GIL guarded, kept safe on a free-threaded CPython (3.13t, Py_GIL_DISABLED): a flag
// claimed once, a word read while another thread may set it, a lock for the few tables the
// bindings share. On a GIL build each is the plain operation it was (the GIL serializes them).
#pragma once

#include <Python.h>

#include <atomic>
#include <mutex>

namespace permits::bind {

#ifdef Py_GIL_DISABLED
inline constexpr bool kFreeThreaded = true;
#else
inline constexpr bool kFreeThreaded = false;
#endif

/// Sets `flag` and returns whether this call set it (false: it was set already, by this thread
/// or another). One thread wins a race: a lease released from two threads at once gives back once.
inline bool claim(bool& flag) noexcept {
    if constexpr (kFreeThreaded) {
        return !std::atomic_ref<bool>(flag).exchange(true, std::memory_order_acq_rel);
    } else {
        const bool was = flag;
        flag = true;
        return !was;
    }
}

/// A word another thread may write meanwhile (a flag, a lazily set id).
template <class T> T load_shared(T& word) noexcept {
    if constexpr (kFreeThreaded) {
        return std::atomic_ref<T>(word).load(std::memory_order_acquire);
    } else {
        return word;
    }
}
template <class T> void store_shared(T& word, T value) noexcept {
    if constexpr (kFreeThreaded) {
        std::atomic_ref<T>(word).store(value, std::memory_order_release);
    } else {
        word = value;
    }
}

/// A mutex for state the GIL guards on a GIL build: a no-op there, a std::mutex without the GIL.
/// Held only around C++ work (never while calling Python, which could wait on another thread).
class SharedStateMutex {
public:
    void lock() {
        if constexpr (kFreeThreaded) {
            mutex_.lock();
        }
    }
    void unlock() {
        if constexpr (kFreeThreaded) {
            mutex_.unlock();
        }
    }

private:
    std::mutex mutex_;
};

} // namespace permits::bind
