// The layout of a permits.Lease and the pieces its methods share, for the files that make up the
// type: lease_type.cpp (the type, release, the engine's leases), lease_custom.cpp (Lease.granted and
// Lease.denied: custom limiters' leases), lease_settle.cpp (settle()).
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>

#include "permits/limiter.hpp"
#include "permits/outcome.hpp"

namespace permits::py_lease::detail {

struct LeaseObject {
    PyObject_HEAD bool acquired;
    bool released;
    bool must_release; // a concurrency lease: its permits come back only on release
    // settle() is giving permits back: a release on another thread waits for it to end, so that
    // it gives back what the settled lease holds (free-threaded builds; the GIL serializes them else).
    bool settling;
    std::int64_t permit_count;
    double retry_after;   // < 0: none
    PyObject* reason;     // str or nullptr
    PyObject* limiter;    // a failed engine lease: the refusing limiter's name (a str), or nullptr
    PyObject* extra;      // dict of further metadata or nullptr
    PyObject* on_release; // callable or nullptr (leases of custom limiters)
    PyObject* on_refund;  // callable or nullptr: called instead of on_release by a refund
    PyObject* on_settle;  // callable(permit_count) or nullptr: a custom lease's settle()
    bool releases;        // its permits come back on release (concurrency); else only on a refund
    // A plain concurrency lease owns its limiter: every release must reach it.
    std::shared_ptr<Limiter> owner;
    // Any other lease names its limiter or per-key table in the registry (lease_targets.hpp).
    std::uint64_t target;
    // A per-key lease's key (a str, bytes, int or tuple of them: no reference cycle is possible,
    // so the lease stays untracked by the GC).
    PyObject* key;
    std::int64_t tag;
    // Lost: the shared state forgot the lease and the limit did not allow it back (latched once
    // seen). `lost_check`: a custom or wrapping lease's callable that says so (Lease.granted(lost=)).
    bool lost;
    PyObject* lost_check;
    // An instrumented limiter's Meter (meter_type.hpp) this granted lease ends in, or nullptr; and
    // when it was granted, on the meter's clock.
    PyObject* meter;
    std::int64_t meter_start;
};

extern PyTypeObject LeaseType;

/// The interned str of a reason (a new reference), nullptr for Reason::None.
PyObject* reason_string(Reason r);
/// A new lease with every field empty (from the freelist when it can); nullptr with an error set.
LeaseObject* alloc_lease();
/// Has the garbage collector track the lease (once it holds Python objects).
void track(LeaseObject* self);
/// Copies a custom limiter's metadata into the lease; false with an error set.
bool check_metadata(PyObject* metadata);
bool attach_metadata(LeaseObject* self, PyObject* metadata);
/// Gives `n` of the lease's permits back where they came from: the limiter, or the key's record.
/// `ends`: the lease's last (its release or refund); else a part of it (settle), the lease goes on.
void give_back_permits(LeaseObject* self, std::int64_t n, bool ends);

// The methods the type's table names from the other files.
PyObject* lease_granted(PyObject*, PyObject* args, PyObject* kwargs);
PyObject* lease_denied(PyObject*, PyObject* args, PyObject* kwargs);
PyObject* lease_with_permit_count(LeaseObject* self, PyObject* arg);
PyObject* lease_settle(LeaseObject* self, PyObject* arg);
/// Logs a concurrency lease collected unreleased (its `permit_count` given back) on the logger
/// "permits" at WARNING; an error of logging's own is reported as unraisable.
void log_forgotten(std::int64_t permit_count);
/// A release's wait for a settle() running on another thread to end (free-threaded builds).
void wait_for_settle(LeaseObject* self) noexcept;

} // namespace permits::py_lease::detail
