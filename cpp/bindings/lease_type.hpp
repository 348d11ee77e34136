// permits.Lease: a CPython type written against the C API, because a lease is built on every
// acquire and pybind11's instance machinery costs several times the whole acquire.
#pragma once

#include <Python.h>

#include <memory>

#include "permits/limiter.hpp"
#include "permits/per_key.hpp"

#if defined(__linux__)
namespace permits::shm {
class KeyedLimiter;
} // namespace permits::shm
#endif

namespace permits::py_lease {

/// Registers the type as `Lease` in module `m`; returns false with a Python error set on failure.
bool register_type(PyObject* m);
/// A new reference to a lease for `o`, holding `owner` so that release() / refunds reach it; a
/// failed one carries `source.name` (the Python limiter that refused) as metadata["limiter"].
/// (`owner` is taken by reference: converting a derived class's shared_ptr would cost two atomic
/// operations per lease; only a concurrency lease takes a shared_ptr of its limiter.)
PyObject* from_outcome(const Outcome& o, Limiter* owner, PyObject* source);
/// A lease for `o` granted by the record of `key` in `per_key`: its permits go back to that key.
PyObject* from_per_key_outcome(const Outcome& o, PerKeyLimiter& per_key, PyObject* key);
#if defined(__linux__)
/// A lease for `o` decided by the record of `key` in a shared per-key table (not by the key's
/// Limiter): a time-based grant, whose refund goes back to that key's record; a failed one carries
/// `source.name`.
PyObject* from_shm_key_outcome(const Outcome& o, shm::KeyedLimiter& keyed, PyObject* key, PyObject* source);
#endif
bool check(PyObject* obj);
/// How many leases were allocated (not taken from the freelist) so far: for tests.
std::uint64_t allocations() noexcept;
/// Gives the lease's permits back (a concurrency release or a refund); idempotent with release().
void refund(PyObject* lease);

} // namespace permits::py_lease
