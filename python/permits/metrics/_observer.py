"""What an instrumented limiter tells its exporters: each outcome, each release, each queued wait's
end. Durations are measured on the limiter's own clock (a ManualClock in tests: exact)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from .._core import Clock, Lease


class Sink(Protocol):
    """One exporter's instruments, bound to one limiter's name."""

    def leased(self, result: str) -> None: ...
    def active(self, delta: int) -> None: ...
    def lease_duration(self, seconds: float) -> None: ...
    def queue_duration(self, result: str, seconds: float) -> None: ...
    def queue(self, delta: int) -> None: ...


class Observer:
    """Fans each event out to the sinks of one instrumented limiter. With a single sink that keeps
    a Meter, a lease is stamped with it (``stamp``): counted there, and ending itself there when
    released, with no Python call of its own; else each event is told to every sink."""

    __slots__ = ("clock", "sinks", "stamp")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.sinks: list[Sink] = []
        self.stamp: Callable[[Lease], bool] | None = None

    def add(self, sink: Sink) -> None:
        self.sinks.append(sink)
        meter = getattr(self.sinks[0], "meter", None) if len(self.sinks) == 1 else None
        self.stamp = None if meter is None else meter.stamp

    def outcome(self, lease: Lease) -> Lease:
        """Counts an outcome: stamps the lease with the sink's meter, or tells every sink (a granted
        lease then comes back wrapped, so that its release is seen)."""
        stamp = self.stamp
        if stamp is not None and stamp(lease):
            return lease
        return self.told(lease)

    def told(self, lease: Lease) -> Lease:
        """Counts an outcome in every sink, unstamped: a granted lease comes back wrapped."""
        if not lease:
            result = lease.reason or "limit_reached"
            for sink in self.sinks:
                sink.leased(result)
            return lease
        for sink in self.sinks:
            sink.leased("acquired")
            sink.active(1)
        held = _Held(lease, self, self.clock.now_ns())
        metadata = lease.metadata
        return Lease.granted(
            lease.permit_count,
            on_release=held.release,
            on_refund=held.refund,
            metadata=metadata or None,
            lost=lease._is_lost,
            on_settle=lease.settle,
        )

    def enqueued(self, permit_count: int) -> tuple[Sink, ...]:
        """A wait about to queue for ``permit_count`` permits, told to the sinks that count the
        queue themselves (not read from ``statistics()``); hand what it returns to ``dequeued``
        when the wait ends, however it ends."""
        sinks = tuple(self.sinks)  # (a sink added meanwhile never sees the wait leave)
        for sink in sinks:
            sink.queue(permit_count)
        return sinks

    def dequeued(self, sinks: tuple[Sink, ...], permit_count: int) -> None:
        for sink in sinks:
            sink.queue(-permit_count)

    def queued(self, result: str, start_ns: int) -> None:
        seconds = (self.clock.now_ns() - start_ns) / 1e9
        for sink in self.sinks:
            sink.queue_duration(result, seconds)

    def waited(self, lease: Lease, start_ns: int) -> Lease:
        """A queued wait's end: its time in the queue, by outcome, then the outcome itself."""
        self.queued("acquired" if lease else lease.reason or "limit_reached", start_ns)
        return self.outcome(lease)

    def ended(self, start_ns: int, used: bool) -> None:
        seconds = (self.clock.now_ns() - start_ns) / 1e9
        for sink in self.sinks:
            sink.active(-1)
            if used:
                sink.lease_duration(seconds)


class _Held:
    """The inner lease of a wrapped one. Released (release(), ``with``), refunded (a chain gave it
    back unused: no duration) or dropped (collected unreleased: released then, as the engine's
    concurrency leases are), each is seen once."""

    __slots__ = ("done", "lease", "observer", "start_ns")

    def __init__(self, lease: Lease, observer: Observer, start_ns: int) -> None:
        self.lease = lease
        self.observer = observer
        self.start_ns = start_ns
        self.done = False

    def release(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.lease.release()
        finally:
            self.observer.ended(self.start_ns, True)

    def refund(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.lease._refund()
        finally:
            self.observer.ended(self.start_ns, False)

    def __del__(self) -> None:
        if not self.done:
            self.done = True
            # (a finalizer: at interpreter exit the exporters may be gone)
            with contextlib.suppress(Exception):
                self.observer.ended(self.start_ns, True)
