// Running C++ with the GIL released, in a way a thread ended at interpreter exit survives.
#pragma once

#include <Python.h>

#include <exception>
#include <utility>

namespace permits::bind {

/// Runs `f()` with the GIL released and returns its result.
///
/// Not pybind11's gil_scoped_release: its destructor re-takes the GIL, and at interpreter exit
/// CPython ends a daemon thread that re-takes the GIL with a forced unwind (pthread_exit), which
/// cannot leave a destructor (noexcept): std::terminate, the process aborts. Here the GIL is
/// re-taken in a plain call, so the unwind passes through; only errors of `f` itself are caught
/// (std::exception: never the unwind, which is not one).
template <class F> auto without_gil(F&& f) {
    PyThreadState* state = PyEval_SaveThread();
    try {
        auto result = std::forward<F>(f)();
        PyEval_RestoreThread(state);
        return result;
    } catch (const std::exception&) {
        PyEval_RestoreThread(state);
        throw;
    }
}

} // namespace permits::bind
