"""Custom limiters written in Python, as a user would write them: subclasses of
``permits.RateLimiter`` built only on the public hooks (``super().__init__()``, ``_acquire``,
``_acquire_async``, ``_statistics``), thread-safe with a lock, reading time from a ``permits`` clock.

* :class:`CustomFixedWindow`: at most ``permit_limit`` permits per window, windows following each
  other from construction (the engine's ``FixedWindowLimiter`` rules, without a queue). A grant a
  chain gives back (``on_refund``) leaves its window's count, if that window is still current.
* :class:`CustomConcurrency`: at most ``permit_limit`` permits held at once; a lease's
  ``release()`` gives them back (``Lease.granted(..., on_release=...)``).
* :class:`CustomKeyedConcurrency`: the same per key, a ``permits.KeyedRateLimiter`` (the hooks
  take the resource first).

Neither has a wait queue: ``wait`` and ``wait_async`` are the base class's, which ask again until
granted. Every decision is made by ``_decide(permit_count)``; ``_acquire_async`` yields to the
event loop once before deciding, as a limiter asking a server would, so ``acquire_async()`` of the
limiter, of a chain holding it and of a partition made of it go through a real await.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import permits


def _check_limit(permit_count: int, limit: int) -> None:
    if permit_count > limit:
        raise ValueError(f"permit_count {permit_count} exceeds the limiter's limit of {limit}")


class CustomFixedWindow(permits.RateLimiter):
    """``permit_limit`` permits per ``window`` seconds; a failed lease says when the window ends."""

    def __init__(
        self, permit_limit: int, window: float, *, clock: permits.ManualClock | permits.MonotonicClock
    ) -> None:
        super().__init__(name="custom-fixed-window", clock=clock)
        self.permit_limit = permit_limit
        self._clock = clock
        self._window_ns = round(window * 1e9)
        self._lock = threading.Lock()
        self._start_ns = clock.now_ns()  # the current window's start
        self._count = 0  # permits granted in the current window

    def _roll_locked(self) -> int:
        """Moves to the window holding now; returns now (ns)."""
        now = self._clock.now_ns()
        passed = (now - self._start_ns) // self._window_ns
        if passed > 0:
            self._start_ns += passed * self._window_ns
            self._count = 0
        return now

    def _decide(self, permit_count: int) -> permits.Lease:
        _check_limit(permit_count, self.permit_limit)
        with self._lock:
            now = self._roll_locked()
            free = self.permit_limit - self._count
            if permit_count <= free and (permit_count > 0 or free > 0):
                self._count += permit_count
                window = self._start_ns
                # Released or not, the window counts it; given back unused, it leaves the count.
                return permits.Lease.granted(permit_count, on_refund=lambda: self._undo(window, permit_count))
            retry_after = (self._start_ns + self._window_ns - now) / 1e9
            return permits.Lease.denied("limit_reached", retry_after=retry_after)

    def _undo(self, window: int, permit_count: int) -> None:
        with self._lock:
            self._roll_locked()
            if self._start_ns == window:
                self._count -= permit_count

    def _acquire(self, permit_count: int) -> permits.Lease:
        return self._decide(permit_count)

    async def _acquire_async(self, permit_count: int) -> permits.Lease:
        await asyncio.sleep(0)  # the round trip of a limiter that asks a server
        return self._decide(permit_count)

    def _statistics(self) -> permits.Statistics:
        with self._lock:
            self._roll_locked()
            free = self.permit_limit - self._count
        return dataclasses.replace(super()._statistics(), current_available_permits=free)


class CustomConcurrency(permits.RateLimiter):
    """At most ``permit_limit`` permits held at once; releasing a lease gives its permits back."""

    def __init__(self, permit_limit: int) -> None:
        super().__init__(name="custom-concurrency")
        self.permit_limit = permit_limit
        self._lock = threading.Lock()
        self._held = 0

    def _refund(self, permit_count: int) -> None:
        with self._lock:
            self._held -= permit_count

    def _decide(self, permit_count: int) -> permits.Lease:
        _check_limit(permit_count, self.permit_limit)
        with self._lock:
            free = self.permit_limit - self._held
            if permit_count <= free and (permit_count > 0 or free > 0):
                self._held += permit_count
                # The lease calls on_release once, however often it is released.
                return permits.Lease.granted(permit_count, on_release=lambda: self._refund(permit_count))
            return permits.Lease.denied("limit_reached")

    def _acquire(self, permit_count: int) -> permits.Lease:
        return self._decide(permit_count)

    async def _acquire_async(self, permit_count: int) -> permits.Lease:
        await asyncio.sleep(0)
        return self._decide(permit_count)

    def _statistics(self) -> permits.Statistics:
        with self._lock:
            free = self.permit_limit - self._held
        return dataclasses.replace(super()._statistics(), current_available_permits=free)


class CustomKeyedConcurrency(permits.KeyedRateLimiter):
    """At most ``permit_limit`` permits held at once per key."""

    def __init__(self, permit_limit: int) -> None:
        super().__init__(name="custom-keyed-concurrency")
        self.permit_limit = permit_limit
        self._lock = threading.Lock()
        self._held: dict[object, int] = {}
        self._granted: dict[object, int] = {}
        self._refused: dict[object, int] = {}

    def _refund(self, resource: object, permit_count: int) -> None:
        with self._lock:
            self._held[resource] -= permit_count

    def _decide(self, resource: object, permit_count: int) -> permits.Lease:
        _check_limit(permit_count, self.permit_limit)
        with self._lock:
            free = self.permit_limit - self._held.get(resource, 0)
            if permit_count <= free and (permit_count > 0 or free > 0):
                self._held[resource] = self._held.get(resource, 0) + permit_count
                return permits.Lease.granted(permit_count, on_release=lambda: self._refund(resource, permit_count))
            return permits.Lease.denied("limit_reached")

    def _acquire(self, resource: object, permit_count: int) -> permits.Lease:
        return self._decide(resource, permit_count)

    async def _acquire_async(self, resource: object, permit_count: int) -> permits.Lease:
        await asyncio.sleep(0)
        return self._decide(resource, permit_count)

    def _on_outcome(self, resource: object, lease: permits.Lease) -> None:
        # The outcomes that count (a polling wait's attempts do not): counted per key.
        with self._lock:
            counts = self._granted if lease else self._refused
            counts[resource] = counts.get(resource, 0) + 1

    def _statistics(self, resource: object) -> permits.Statistics:
        if resource is None:
            return super()._statistics(None)
        with self._lock:
            free = self.permit_limit - self._held.get(resource, 0)
            granted, refused = self._granted.get(resource, 0), self._refused.get(resource, 0)
        return permits.Statistics(free, 0, granted, refused)
