// An algorithm's arithmetic over a state kept elsewhere: one limiter's atomic word, a record in
// the per-key table (per_key.hpp), a slot in a shared store. Rules are pure functions of
// (state, anchor, now), so every place that holds a state applies the same rules.
//
// The engine has two algorithm seams. The token bucket, fixed window, sliding window counter and
// concurrency are Rules: their whole state is one 16-byte Pair, changed by one compare-and-swap.
// The sliding window is not: besides its head it keeps a ring of per-segment counts (up to 65,536
// segments), which no single atomic word holds, so it overrides Limiter's virtual functions instead
// (sliding_window.hpp), and the per-key table keeps a compact state of its own for each of its keys
// (CompactSlidingWindow: the head and a 32-bit count per segment, out of the record). For a
// shared-memory store this means: the four Rules can live in a shared slot as they are (the Pair,
// with a 16-byte compare-and-swap that works across processes, and the anchor beside it); the
// sliding window would need its ring in the shared region too, and a store protocol of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "permits/atomic_pair.hpp"
#include "permits/time.hpp"

namespace permits {

namespace detail {
/// A rule's amount that reconfigure changes while requests read it: a relaxed atomic (a plain
/// load where it matters), copied by value. A request reads each amount once; one deciding as
/// it changes is decided under the old or the new value.
template <class T> class Live {
public:
    Live(T v) noexcept : v_(v) {} // NOLINT(google-explicit-constructor): used as the T it holds
    Live(const Live& o) noexcept : v_(o.get()) {}
    Live& operator=(const Live& o) noexcept {
        set(o.get());
        return *this;
    }
    ~Live() = default;
    operator T() const noexcept { return get(); } // NOLINT(google-explicit-constructor)
    T get() const noexcept { return v_.load(std::memory_order_relaxed); }
    void set(T v) noexcept { v_.store(v, std::memory_order_relaxed); }

private:
    std::atomic<T> v_;
};
} // namespace detail

/// A copy of a limiter's state onto which future grants are applied in order, without touching
/// the real state: it answers "when could these requests be served, one after the other?"
class Projection {
public:
    virtual ~Projection() = default;
    /// The earliest time >= `not_before` at which `n` permits (n == 0: any permit available)
    /// could be taken; with `apply`, takes them in the projection. Times are exact (128-bit).
    virtual i128 grant(std::int64_t n, i128 not_before, bool apply) = 0;
};

/// The state is a Pair whose meaning belongs to the rule; `anchor` is when the state's timeline
/// starts (the limiter's or the partition's creation).
class Rule {
public:
    virtual ~Rule() = default;
    /// The most one request may ask for.
    virtual std::int64_t max_permits() const noexcept = 0;
    /// True when permits come back on release (concurrency), not with time.
    virtual bool releases_permits() const noexcept { return false; }
    /// The state of a new, full limiter anchored at `anchor`.
    virtual Pair initial(Nanos anchor) const noexcept = 0;
    /// Takes n > 0 permits if that many are available at `now`: true, with the state after and
    /// the grant's tag (where the permits were taken, for refunds): the time-based rules tag a grant
    /// with the start of its window or period in clock time, not its index from the anchor, so that
    /// a state made again at a later anchor (a per-key record evicted and made anew, a shared slot
    /// reused) never takes back the permits of a grant its predecessor made: every window of the
    /// new state starts after that grant's.
    virtual bool take(Pair s, Nanos anchor, std::int64_t n, Nanos now, Pair& next,
                      std::int64_t& tag) const noexcept = 0;
    virtual std::int64_t available(Pair s, Nanos anchor, Nanos now) const noexcept = 0;
    /// Time from `now` until `needed` permits are available if nothing else happens; kNever
    /// when time alone never brings them (concurrency) or beyond the int64 range.
    virtual Nanos time_until(Pair s, Nanos anchor, std::int64_t needed, Nanos now) const noexcept = 0;
    /// Gives n permits back: false when that changes nothing (a refund for a window gone by).
    virtual bool give_back(Pair s, Nanos anchor, std::int64_t n, std::int64_t tag, Nanos now,
                           Pair& next) const noexcept = 0;
    /// When the state is full (all permits available), or will be if nothing else happens;
    /// kNever when time alone never fills it.
    virtual Nanos full_at(Pair s, Nanos anchor) const noexcept = 0;
    /// A projection of the state; nullptr when time does not bring permits back.
    virtual std::unique_ptr<Projection> project(Pair s, Nanos anchor) const = 0;

    /// What breaks the invariants this rule keeps in `s`, anchored at `anchor` (within 0..kMaxTime):
    /// a count beyond the limit or below zero, an index before the first period or past the end of
    /// time; nullptr when nothing does. (A state in memory other processes share may be damaged.)
    virtual const char* damage(Pair /*s*/, Nanos /*anchor*/) const noexcept { return nullptr; }
    /// The state with its whole limit taken at `now`: what a damaged state is repaired to (what it
    /// really held is unknown; from here it never grants more than its limit allows).
    virtual Pair exhausted(Nanos anchor, Nanos /*now*/) const noexcept { return initial(anchor); }

    /// Why this rule cannot take over a state `before` kept (reconfigure): another kind, another
    /// window or period (the state counts in those); nullptr when it can. Only the amounts change.
    virtual const char* cannot_follow(const Rule& before) const noexcept = 0;
    /// Takes `next`'s amounts (its limit, its rate), in place: the states it keeps are read as
    /// they are (the time-based kinds count what was taken, which any limit reads). Only after
    /// cannot_follow(*this) said nothing; under the owner's lock, requests deciding meanwhile.
    virtual void adopt(const Rule& next) noexcept = 0;
    /// The amounts adopt() takes, as two numbers (a shared state keeps them): the limit, and a
    /// rate where the kind has one.
    virtual void amounts(std::int64_t (&out)[2]) const noexcept {
        out[0] = max_permits();
        out[1] = 0;
    }
};

namespace detail {
/// A rule's cannot_follow: `before` must be of the same kind R, with the same `timeline` (its
/// window, its period), which `message` names otherwise.
template <class R, class T>
const char* cannot_follow_as(const R& next, const Rule& before, T R::*timeline, const char* message) noexcept {
    const auto* was = dynamic_cast<const R*>(&before);
    if (was == nullptr) {
        return "a limiter keeps its kind";
    }
    return was->*timeline != next.*timeline ? message : nullptr;
}
} // namespace detail

} // namespace permits
