#include "lease_type.hpp"

#include "lease_object.hpp"

#include <string>

#include "free_threading.hpp"
#include "key_encoding.hpp"
#include "lease_targets.hpp"
#include "meter_type.hpp"
#include "raised_error.hpp"

#if defined(__linux__)
#include "permits/shm_keyed.hpp"
#include "permits/shm_limiters.hpp"
#endif

#include <atomic>
#include <cmath>
#include <iterator>
#include <new>
#include <structmember.h>

namespace permits::py_lease {
namespace detail {

using bind::claim;
using bind::kFreeThreaded;
using bind::load_shared;
using bind::store_shared;

PyTypeObject LeaseType = {PyVarObject_HEAD_INIT(nullptr, 0)};
// Made when the type is registered (never lazily: two threads without the GIL would both make one).
PyObject* reason_strings[static_cast<std::size_t>(Reason::ProcessLimit) + 1] = {}; // the last reason

PyObject* reason_string(Reason r) {
    if (r == Reason::None) {
        return nullptr;
    }
    PyObject* s = reason_strings[static_cast<std::size_t>(r)];
    Py_XINCREF(s);
    return s;
}

// A small freelist: a lease is made on nearly every acquire, and reusing the memory of one that
// died saves the allocator and the GC header set-up on the hot path. Not on a free-threaded build:
// threads would share it, and its allocator (mimalloc, a heap per thread) is fast already.
constexpr int kFreelistSize = kFreeThreaded ? 0 : 128;
LeaseObject* freelist[kFreelistSize > 0 ? kFreelistSize : 1];
int freelist_len = 0;
// Leases the freelist could not serve (tests read it): this thread's count on a free-threaded build.
#ifdef Py_GIL_DISABLED
thread_local
#endif
    std::uint64_t allocator_calls = 0;

// Leases start untracked by the garbage collector: most hold no Python references (only the
// engine's limiter); track() is called when one gets on_release or metadata.
LeaseObject* alloc_lease() {
    LeaseObject* self = nullptr;
    if (kFreelistSize > 0 && freelist_len > 0) {
        self = freelist[--freelist_len];
        PyObject_Init(reinterpret_cast<PyObject*>(self), &LeaseType);
    } else {
        self = PyObject_GC_New(LeaseObject, &LeaseType);
        if (self == nullptr) {
            return nullptr;
        }
        ++allocator_calls;
        self->limiter = nullptr; // a freed lease's is cleared in dealloc: the hot path stores nothing
    }
    self->acquired = false;
    self->released = false;
    self->must_release = false;
    self->permit_count = 0;
    self->retry_after = -1.0;
    self->reason = nullptr;
    self->extra = nullptr;
    self->on_release = nullptr;
    self->on_refund = nullptr;
    self->on_settle = nullptr;
    self->settling = false;
    self->releases = false;
    new (&self->owner) std::shared_ptr<Limiter>();
    self->target = 0;
    self->key = nullptr;
    self->tag = 0;
    self->lost = false;
    self->lost_check = nullptr;
    self->meter = nullptr;
    return self;
}

void track(LeaseObject* self) {
    if (!PyObject_GC_IsTracked(reinterpret_cast<PyObject*>(self))) {
        PyObject_GC_Track(self);
    }
}

bool check_metadata(PyObject* metadata) {
    // A mapping has keys(): sequences (str, list, tuple) pass PyMapping_Check but are not mappings.
    const bool mapping =
        PyDict_Check(metadata) || (PyMapping_Check(metadata) && PyObject_HasAttrString(metadata, "keys"));
    if (metadata != Py_None && !mapping) {
        PyErr_SetString(PyExc_TypeError, "metadata must be a mapping or None");
        return false;
    }
    return true;
}

// Copies a custom limiter's metadata into the lease; false with an error set.
bool attach_metadata(LeaseObject* self, PyObject* metadata) {
    if (metadata == Py_None) {
        return true;
    }
    self->extra = PyDict_New();
    if (self->extra == nullptr || PyDict_Update(self->extra, metadata) != 0) {
        return false;
    }
    track(self);
    return true;
}

void give_back_permits(LeaseObject* self, std::int64_t n, bool ends) {
    if (self->owner) {
#if defined(__linux__)
        if (self->owner->shares_state()) {
            if (auto* shared = dynamic_cast<shm::SharedLimiter*>(self->owner.get())) {
                if (ends ? shared->give_back_lease(n, self->tag) : shared->give_back_part(n, self->tag)) {
                    store_shared(self->lost, true); // nothing was given back
                }
                return;
            }
        }
#endif
        self->owner->give_back(n, self->tag);
        return;
    }
    if (self->target == 0) {
        return;
    }
    const bind::Target t = bind::find_target(self->target);
#if defined(__linux__)
    if (t.shm_keyed) {
        bind::KeyBuffer key;
        if (bind::encode_key(self->key, key)) { // it was encoded once already: it cannot fail
            t.shm_keyed->give_back(key.view(), n, self->tag);
        } else {
            PyErr_Clear();
        }
        return;
    }
#endif
    if (t.limiter) {
        t.limiter->give_back(n, self->tag);
    } else if (t.per_key) {
        bind::KeyBuffer key;
        if (bind::encode_key(self->key, key)) { // it was encoded once already: it cannot fail
            t.per_key->give_back(key.view(), n, self->tag);
        } else {
            PyErr_Clear();
        }
    }
}

bool owner_closed(const LeaseObject* self) {
    if (self->owner) {
        return self->owner->closed();
    }
    const bind::Target t = bind::find_target(self->target);
#if defined(__linux__)
    if (t.shm_keyed) {
        return t.shm_keyed->closed();
    }
#endif
    return t.limiter ? t.limiter->closed() : !t.per_key || t.per_key->closed();
}

PyObject* name_attribute = nullptr; // interned "name", made when the type is registered

// The name of the limiter that refused: `source.name` ("default" for an object without one).
// Read only when a lease fails, so that a grant pays nothing for it. nullptr with an error set.
PyObject* name_of(PyObject* source) {
    PyObject* name = PyObject_GetAttr(source, name_attribute);
    if (name == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        name = PyUnicode_FromString("default");
    }
    return name;
}

// False with an error set (reading the name).
bool set_failure(LeaseObject* self, const Outcome& o, PyObject* source) {
    self->reason = reason_string(o.reason);
    if (o.retry_after >= 0) {
        self->retry_after = o.retry_seconds; // exact even past 2**63 ns
    }
    if (source != nullptr && self->reason != nullptr) { // (dealloc clears the name with the reason)
        self->limiter = name_of(source);
        if (self->limiter == nullptr) {
            return false;
        }
    }
    return true;
}

// Whether the lease is lost (latched): asked of a shared limiter while the lease is held (it
// takes back what the shared state forgot, when it can), or of the lease's `lost` callable.
// 1, 0, or -1 with an error set (from the callable).
int check_lost(LeaseObject* self) {
    if (load_shared(self->lost) || !self->acquired) {
        return load_shared(self->lost) ? 1 : 0;
    }
    if (self->owner && !load_shared(self->released) && self->owner->shares_state()) {
        if (self->owner->lost(self->tag)) {
            store_shared(self->lost, true);
        }
    } else if (self->lost_check != nullptr) {
        PyObject* r = PyObject_CallNoArgs(self->lost_check);
        if (r == nullptr) {
            return -1;
        }
        const int truth = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (truth < 0) {
            return -1;
        }
        if (truth == 1) {
            store_shared(self->lost, true);
        }
    }
    return load_shared(self->lost) ? 1 : 0;
}

// A custom limiter's lease: on_refund for a refund when it has one (an undo: the permits were
// never used), else on_release. Returns 0 or -1 with an error set (from the callback).
int run_callback(LeaseObject* self, bool refund) {
    PyObject* cb = refund && self->on_refund != nullptr ? self->on_refund : self->on_release;
    Py_XINCREF(cb);
    Py_CLEAR(self->on_release);
    Py_CLEAR(self->on_refund);
    Py_CLEAR(self->on_settle);
    if (cb == nullptr) {
        return 0;
    }
    PyObject* r = PyObject_CallNoArgs(cb);
    Py_DECREF(cb);
    if (r == nullptr) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

// Returns 0 or -1 with an error set (from a callback).
int do_release(LeaseObject* self, bool refund) {
    if (load_shared(self->released)) {
        return 0;
    }
    if (self->lost_check != nullptr && check_lost(self) < 0) {
        return -1; // (still held: the error is the callable's)
    }
    if (!claim(self->released)) {
        return 0; // released meanwhile by another thread: once is all
    }
    if (!self->acquired) {
        return 0;
    }
    if (refund || self->releases) {
        wait_for_settle(self);
        give_back_permits(self, load_shared(self->permit_count), true);
    }
    if (self->meter != nullptr) {
        py_meter::end(self->meter, self->meter_start, !refund); // (a refund: never used, no duration)
    }
    if (self->on_release == nullptr && self->on_refund == nullptr) {
        Py_CLEAR(self->on_settle); // (a custom lease with on_settle alone)
        return 0;                  // an engine lease
    }
    return run_callback(self, refund);
}

int lease_traverse(LeaseObject* self, visitproc visit, void* arg) {
    Py_VISIT(self->extra);
    Py_VISIT(self->on_release);
    Py_VISIT(self->on_refund);
    Py_VISIT(self->on_settle);
    Py_VISIT(self->lost_check);
    return 0;
}

int lease_clear(LeaseObject* self) {
    Py_CLEAR(self->reason);
    Py_CLEAR(self->limiter);
    Py_CLEAR(self->extra);
    Py_CLEAR(self->on_release);
    Py_CLEAR(self->on_refund);
    Py_CLEAR(self->on_settle);
    Py_CLEAR(self->lost_check);
    return 0;
}

// An unreleased concurrency lease gives its permits back when it dies, with a ResourceWarning
// and a log record. Done in dealloc (no resurrection): the warning machinery never sees the
// lease itself. A lease of a closed limiter gives nothing back: neither is said then.
void release_forgotten(LeaseObject* self) {
    if (!self->must_release || !self->acquired || self->released) {
        return;
    }
    bind::RaisedError kept = bind::RaisedError::take();
    const bool closed = owner_closed(self);
    self->released = true;
    give_back_permits(self, self->permit_count, true);
    if (!closed) {
        if (PyErr_WarnEx(PyExc_ResourceWarning,
                         "a concurrency lease was garbage-collected without release(); "
                         "its permits were released",
                         1) != 0) {
            PyErr_WriteUnraisable(nullptr);
        }
        log_forgotten(self->permit_count);
    }
    kept.restore();
}

void lease_dealloc(LeaseObject* self) {
    PyObject_GC_UnTrack(self);
    if (self->meter != nullptr) { // a stamped lease collected unreleased ends as released
        if (self->acquired && !self->released) {
            py_meter::end(self->meter, self->meter_start, true);
        }
        Py_CLEAR(self->meter);
    }
    release_forgotten(self);
    if (self->reason != nullptr) { // only a failed lease has a reason, and a limiter name
        Py_DECREF(self->reason);
        self->reason = nullptr;
        Py_CLEAR(self->limiter);
    }
    // Metadata and callbacks: a custom limiter's lease (the engine's have none; a call spared).
    if (self->extra != nullptr || self->on_release != nullptr || self->on_refund != nullptr ||
        self->on_settle != nullptr || self->lost_check != nullptr) {
        lease_clear(self);
    }
    self->owner.~shared_ptr<Limiter>();
    Py_CLEAR(self->key);
    if (kFreelistSize > 0 && freelist_len < kFreelistSize) {
        freelist[freelist_len++] = self;
    } else {
        PyObject_GC_Del(self);
    }
}

PyObject* lease_release(LeaseObject* self, PyObject*) {
    if (do_release(self, false) != 0) {
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject* lease_refund(LeaseObject* self, PyObject*) {
    if (do_release(self, true) != 0) {
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject* lease_is_lost(LeaseObject* self, PyObject*) {
    const int lost = check_lost(self);
    if (lost < 0) {
        return nullptr;
    }
    return PyBool_FromLong(lost);
}

PyObject* lease_enter(PyObject* self, PyObject*) {
    Py_INCREF(self);
    return self;
}

// METH_FASTCALL: `with lease:` calls this on every exit; no argument tuple is built.
PyObject* lease_exit(LeaseObject* self, PyObject* const*, Py_ssize_t) {
    if (do_release(self, false) != 0) {
        return nullptr;
    }
    Py_RETURN_FALSE;
}

int lease_bool(LeaseObject* self) {
    return self->acquired ? 1 : 0;
}

PyObject* lease_retry_after(LeaseObject* self, void*) {
    if (self->retry_after < 0) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(self->retry_after);
}

PyObject* lease_reason(LeaseObject* self, void*) {
    if (self->reason == nullptr) {
        Py_RETURN_NONE;
    }
    Py_INCREF(self->reason);
    return self->reason;
}

PyObject* lease_acquired(LeaseObject* self, void*) {
    return PyBool_FromLong(self->acquired);
}
PyObject* lease_permit_count(LeaseObject* self, void*) {
    return PyLong_FromLongLong(load_shared(self->permit_count));
}

PyObject* lease_metadata(LeaseObject* self, void*) {
    PyObject* d = self->extra != nullptr ? PyDict_Copy(self->extra) : PyDict_New();
    if (d == nullptr) {
        return nullptr;
    }
    if (self->retry_after >= 0) {
        PyObject* v = PyFloat_FromDouble(self->retry_after);
        if (v == nullptr || PyDict_SetItemString(d, "retry_after", v) != 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return nullptr;
        }
        Py_DECREF(v);
    }
    if (self->reason != nullptr && PyDict_SetItemString(d, "reason", self->reason) != 0) {
        Py_DECREF(d);
        return nullptr;
    }
    if (self->limiter != nullptr && PyDict_SetItemString(d, "limiter", self->limiter) != 0) {
        Py_DECREF(d);
        return nullptr;
    }
    const int lost = check_lost(self);
    if (lost < 0 || (lost == 1 && PyDict_SetItemString(d, "lost", Py_True) != 0)) {
        Py_DECREF(d);
        return nullptr;
    }
    PyObject* proxy = PyDictProxy_New(d);
    Py_DECREF(d);
    return proxy;
}

PyObject* lease_repr(LeaseObject* self) {
    if (self->acquired) {
        return PyUnicode_FromFormat("<Lease acquired permit_count=%lld%s>", static_cast<long long>(self->permit_count),
                                    self->released ? " released" : "");
    }
    PyObject* retry = lease_retry_after(self, nullptr);
    PyObject* r = PyUnicode_FromFormat("<Lease failed permit_count=%lld reason=%R retry_after=%R>",
                                       static_cast<long long>(self->permit_count),
                                       self->reason != nullptr ? self->reason : Py_None, retry);
    Py_XDECREF(retry);
    return r;
}

PyMethodDef lease_methods[] = {
    {"release", reinterpret_cast<PyCFunction>(lease_release), METH_NOARGS,
     "release($self, /)\n--\n\nReturns the lease's permits (concurrency limiters); idempotent. A no-op on "
     "time-based limiters."},
    {"settle", reinterpret_cast<PyCFunction>(lease_settle), METH_O,
     "settle($self, permit_count, /)\n--\n\nKeeps only permit_count of the lease's permits (what the work used) and "
     "gives the rest back: a concurrency lease's now, a time-based lease's as a refund (never letting the limiter "
     "grant more in any interval than had they never been taken). permit_count is from 0 to the lease's; "
     "settle again to give back more. ValueError on a failed or released lease."},
    {"_refund", reinterpret_cast<PyCFunction>(lease_refund), METH_NOARGS,
     "_refund($self, /)\n--\n\nReturns the permits to the limiter as if never taken (refund); idempotent "
     "with release()."},
    {"_with_permit_count", reinterpret_cast<PyCFunction>(lease_with_permit_count), METH_O,
     "_with_permit_count($self, permit_count, /)\n--\n\n"},
    {"_is_lost", reinterpret_cast<PyCFunction>(lease_is_lost), METH_NOARGS,
     "_is_lost($self, /)\n--\n\nmetadata.get('lost', False), without building the mapping (a wrapping lease's "
     "lost=)."},
    {"__enter__", lease_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n"},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(lease_exit)), METH_FASTCALL,
     "__exit__($self, exc_type, exc, tb, /)\n--\n\nReleases the lease."},
    {"granted", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(lease_granted)),
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "granted($type, /, permit_count=1, *, on_release=None, on_refund=None, metadata=None, lost=None, "
     "on_settle=None)\n--\n\n"
     "A successful lease: on_release() runs on its first release(), on_refund() (default: on_release) when a chain "
     "gives it back unused; lost() (asked when its metadata is read, and before its release) returns True once the "
     "shared state forgot it: metadata['lost'] is True from then on. on_settle(permit_count) gives back what "
     "lease.settle(permit_count) leaves (without it, settle() gives nothing back: the permits stay counted)."},
    {"denied", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(lease_denied)),
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "denied($type, /, reason='limit_reached', *, retry_after=None, metadata=None)\n--\n\nA failed lease."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef lease_getset[] = {
    {"acquired", reinterpret_cast<getter>(lease_acquired), nullptr, "True when the permits were granted.", nullptr},
    {"permit_count", reinterpret_cast<getter>(lease_permit_count), nullptr,
     "Permits requested (of a granted lease: held, after settle()).", nullptr},
    {"retry_after", reinterpret_cast<getter>(lease_retry_after), nullptr,
     "Seconds until the request could succeed, when known.", nullptr},
    {"reason", reinterpret_cast<getter>(lease_reason), nullptr, "Why the lease failed; None on success.", nullptr},
    {"metadata", reinterpret_cast<getter>(lease_metadata), nullptr,
     "Read-only mapping: retry_after and reason when set, limiter (the refusing limiter's name) on a failed "
     "lease, lost (True) on a lease the shared state forgot, plus what a custom limiter adds.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyNumberMethods lease_as_number = {};

} // namespace detail

using namespace detail;

bool register_type(PyObject* m) {
    for (std::size_t i = 1; i < std::size(reason_strings); ++i) {
        reason_strings[i] = PyUnicode_InternFromString(reason_name(static_cast<Reason>(i)));
        if (reason_strings[i] == nullptr) {
            return false;
        }
    }
    name_attribute = PyUnicode_InternFromString("name");
    if (name_attribute == nullptr) {
        return false;
    }
    lease_as_number.nb_bool = reinterpret_cast<inquiry>(lease_bool);
    LeaseType.tp_name = "permits.Lease";
    LeaseType.tp_basicsize = sizeof(LeaseObject);
    LeaseType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    LeaseType.tp_doc = "The outcome of an acquisition: acquired or failed, with retry_after and reason.";
    LeaseType.tp_dealloc = reinterpret_cast<destructor>(lease_dealloc);
    LeaseType.tp_traverse = reinterpret_cast<traverseproc>(lease_traverse);
    LeaseType.tp_clear = reinterpret_cast<inquiry>(lease_clear);
    LeaseType.tp_repr = reinterpret_cast<reprfunc>(lease_repr);
    LeaseType.tp_as_number = &lease_as_number;
    LeaseType.tp_methods = lease_methods;
    LeaseType.tp_getset = lease_getset;
    if (PyType_Ready(&LeaseType) < 0) {
        return false;
    }
    Py_INCREF(&LeaseType);
    if (PyModule_AddObject(m, "Lease", reinterpret_cast<PyObject*>(&LeaseType)) < 0) {
        Py_DECREF(&LeaseType);
        return false;
    }
    return true;
}

PyObject* from_outcome(const Outcome& o, Limiter* owner, PyObject* source) {
    LeaseObject* self = alloc_lease();
    if (self == nullptr) {
        return nullptr;
    }
    self->acquired = o.acquired;
    self->permit_count = o.permits;
    self->tag = o.tag;
    if (o.acquired) {
        self->releases = owner->releases_permits();
        if (self->releases) {
            self->owner = owner->shared_from_this();
        } else {
            self->target = bind::target_of(*owner);
        }
        self->must_release = self->releases && o.permits > 0;
    } else if (!set_failure(self, o, source)) {
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject*>(self);
}

PyObject* from_per_key_outcome(const Outcome& o, PerKeyLimiter& per_key, PyObject* key) {
    LeaseObject* self = alloc_lease();
    if (self == nullptr) {
        return nullptr;
    }
    self->acquired = o.acquired;
    self->permit_count = o.permits;
    self->tag = o.tag;
    if (o.acquired) {
        self->releases = per_key.releases_permits();
        self->target = bind::target_of(per_key);
        self->key = Py_NewRef(key);
        self->must_release = self->releases && o.permits > 0;
    } else if (!set_failure(self, o, nullptr)) {
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject*>(self);
}

#if defined(__linux__)
PyObject* from_shm_key_outcome(const Outcome& o, shm::KeyedLimiter& keyed, PyObject* key, PyObject* source) {
    LeaseObject* self = alloc_lease();
    if (self == nullptr) {
        return nullptr;
    }
    self->acquired = o.acquired;
    self->permit_count = o.permits;
    self->tag = o.tag;
    if (o.acquired) {
        self->target = bind::target_of(keyed); // (a time-based grant: given back only by a refund)
        self->key = Py_NewRef(key);
    } else if (!set_failure(self, o, source)) {
        Py_DECREF(self);
        return nullptr;
    }
    return reinterpret_cast<PyObject*>(self);
}
#endif

std::uint64_t allocations() noexcept {
    return allocator_calls;
}

bool check(PyObject* obj) {
    return PyObject_TypeCheck(obj, &LeaseType) != 0;
}

void refund(PyObject* lease) {
    if (check(lease)) {
        if (do_release(reinterpret_cast<LeaseObject*>(lease), true) != 0) {
            PyErr_WriteUnraisable(lease);
        }
    }
}

} // namespace permits::py_lease
