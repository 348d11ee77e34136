"""What the conformance tests drive: a :class:`Subject` (one limiter, or one key of a partitioned
limiter, with the key bound) made by an :class:`Implementation` (a factory and its capabilities).

The implementations themselves are listed in ``conftest.py``; tests declare the capabilities they
need with ``@needs(...)`` and are generated only for the implementations that have them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

import permits

from _support import OLDEST

#: What an implementation can do beyond what every limiter does. A test marked ``@needs(cap, ...)``
#: runs only for the implementations that have every capability named.
CAPABILITIES: dict[str, str] = {
    "plain": "a RateLimiter of its own: it can be a Partition.custom partition and has try_replenish()",
    "keyed": "one key of a partitioned limiter: every call takes the key first",
    "timed": "permits come back with time (restore advances the clock); failed leases carry retry_after",
    "releases": "permits come back when leases are released (restore releases them); no retry_after",
    "queues": (
        "a bounded wait queue (queue_limit, queue_order): waits that cannot be granted queue and are served in order"
    ),
    "polls": (
        "no queue: wait() and wait_async() ask again until granted, pausing for retry_after (10 ms without one), "
        "as RateLimiter's defaults do (custom limiters)"
    ),
    "close_fails_waiters": (
        "close() ends the waits queued in the limiter with a failed lease (a chain's close() closes "
        "the chain only: its members, which may be shared, keep their queues)"
    ),
    "refunds": (
        "a grant given back unused (a chain refused further on, an acquire_async cancelled before it runs) "
        "returns its permits (a custom limiter's lease does so through Lease.granted(on_refund=...))"
    ),
    "settles": (
        "lease.settle(n) keeps n of a lease's permits and gives the rest back by the refund rule (a custom "
        "limiter's lease does so through Lease.granted(on_settle=...))"
    ),
    "releases_dropped_leases": (
        "a concurrency lease dropped without release() gives its permits back when collected, with a "
        "ResourceWarning (leases the engine makes; a custom Lease.granted(on_release=...) has no such net)"
    ),
    "resets": (
        "keyed.reset(key): a time-based key's whole limit is available at once, its queued waits are "
        "served from it and nothing granted before comes back into it; a concurrency key's held leases stay held"
    ),
    "reconfigures": (
        "limiter.reconfigure(spec) (a keyed one: every key's): the new limit from now on, what is taken "
        "stays taken, queued waits stay queued (a queue beyond a new queue_limit fails its requests served last)"
    ),
    "replenishes_manually": "auto_replenishment=False: permits come back only in try_replenish()",
    "clock_serves_queue": (
        "the limiter's own clock serves its queue: an advance grants the waiters that came due inside "
        "advance() itself, each at the time it came due (a store's queue asks its server when a waiter "
        "wakes, at the time it asks: after a jump of the clock, the permits of that moment)"
    ),
}


# The markers are registered by conftest.py's pytest_configure, which runs after this module is
# imported (by that conftest): they are looked up when a test module applies them.
def needs(*capabilities: str) -> pytest.MarkDecorator:
    """``@needs(cap, ...)``: the test is generated only for implementations having every one."""
    return pytest.mark.needs(*capabilities)


def known_bug(*implementation_ids: str, reason: str) -> pytest.MarkDecorator:
    """``@known_bug("impl-id", ..., reason="...")``: the test fails for those implementations because
    of a bug in them (a strict xfail: it must fail, so a fix shows)."""
    return pytest.mark.known_bug(*implementation_ids, reason=reason)


#: The custom limiters of ``custom.py`` (their ids in conftest.IMPLEMENTATIONS).
CUSTOM = ("custom-fixed_window", "custom-concurrency", "custom_keyed-concurrency")

#: The key a keyed subject is bound to.
KEY = ("tenant", "a")

#: Partitioned limiters keep their partitions for the whole test (eviction is not what is tested
#: here: an evicted key would start its counts again).
IDLE_TIMEOUT = 1e6


class _NoKey:
    def __repr__(self) -> str:
        return "NO_KEY"


NO_KEY: Any = _NoKey()


@dataclass(frozen=True)
class Spec:
    """What a test asks of a subject: its limit and its queue."""

    limit: int
    queue_limit: int = 0
    queue_order: permits.QueueOrder = OLDEST
    auto_replenishment: bool = True


@dataclass
class Built:
    """What an implementation's factory returns: the limiter, the key to bind (or NO_KEY), and
    limiters it made that the limiter does not close itself (a chain's members)."""

    limiter: Any
    key: Any = NO_KEY
    members: tuple[Any, ...] = ()


Factory = Callable[[permits.ManualClock, Spec], Built]


@dataclass(frozen=True)
class Implementation:
    """One implementation of the model: ``factory(clock, spec)`` builds it; ``recovery`` is how
    long after a use at a period boundary all its permits are back (time-based ones)."""

    id: str
    factory: Factory
    caps: frozenset[str]
    recovery: float = 0.0

    def __post_init__(self) -> None:
        unknown = self.caps - CAPABILITIES.keys()
        assert not unknown, f"{self.id}: unknown capabilities {sorted(unknown)}"
        assert ("timed" in self.caps) != ("releases" in self.caps), f"{self.id}: timed or releases"
        assert ("plain" in self.caps) != ("keyed" in self.caps), f"{self.id}: plain or keyed"
        assert ("queues" in self.caps) != ("polls" in self.caps), f"{self.id}: queues or polls"
        assert "releases_dropped_leases" not in self.caps or "releases" in self.caps, self.id
        assert ("timed" in self.caps) == (self.recovery > 0), f"{self.id}: a recovery time iff timed"

    def __repr__(self) -> str:
        return self.id

    def make(self, clock: permits.ManualClock, spec: Spec) -> Subject:
        if spec.queue_limit or spec.queue_order is not OLDEST:
            assert "queues" in self.caps, f"{self.id} has no queue: mark the test @needs('queues')"
        if not spec.auto_replenishment:
            assert "replenishes_manually" in self.caps, f"{self.id}: mark the test @needs('replenishes_manually')"
        built = self.factory(clock, spec)
        return Subject(self, clock, spec.limit, built.limiter, built.key, built.members)


@dataclass(eq=False)
class Subject:
    """A limiter seen through one interface, the key bound for keyed ones: ``acquire(n)``,
    ``acquire_async(n)``, ``wait(n, timeout)``, ``wait_async(n)``, ``available_permits()``,
    ``statistics()``, ``close()``, ``aclose()``; ``restore(*leases)`` makes permits come back."""

    implementation: Implementation
    clock: permits.ManualClock
    limit: int
    limiter: Any  # the object itself: `with subject.limiter:` closes it
    key: Any = NO_KEY
    members: tuple[Any, ...] = field(default=())

    def __repr__(self) -> str:
        return f"<Subject {self.implementation.id} limit={self.limit}>"

    # ---- capabilities ----
    @property
    def caps(self) -> frozenset[str]:
        return self.implementation.caps

    def has(self, cap: str) -> bool:
        assert cap in CAPABILITIES, cap
        return cap in self.caps

    @property
    def recovery(self) -> float:
        return self.implementation.recovery

    # ---- the limiter's members, key bound ----
    def _args(self, *args: Any) -> tuple[Any, ...]:
        return args if self.key is NO_KEY else (self.key, *args)

    def acquire(self, permit_count: int = 1) -> permits.Lease:
        lease: permits.Lease = self.limiter.acquire(*self._args(permit_count))
        return lease

    def acquire_async(self, permit_count: int = 1) -> Any:  # an awaitable, and an async context manager
        return self.limiter.acquire_async(*self._args(permit_count))

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> permits.Lease:
        lease: permits.Lease = self.limiter.wait(*self._args(permit_count), timeout=timeout)
        return lease

    def wait_async(self, permit_count: int = 1) -> Any:
        return self.limiter.wait_async(*self._args(permit_count))

    def available_permits(self) -> int:
        n: int = self.limiter.available_permits(*self._args())
        return n

    def statistics(self) -> permits.Statistics:
        s: permits.Statistics = self.limiter.statistics(*self._args())
        return s

    def reset(self) -> None:
        assert self.has("resets"), "mark the test @needs('resets')"
        self.limiter.reset(self.key)

    def reconfigure(self, limit: int, **queue: Any) -> None:
        """The limiter's spec with ``limit`` (its shape kept: a token bucket's period refills it)."""
        assert self.has("reconfigures"), "mark the test @needs('reconfigures')"
        spec = self.limiter.spec
        args = [getattr(spec, name) for name in spec.__match_args__]
        args[0] = limit
        if isinstance(spec, permits.specs.TokenBucket):
            args[1] = limit
        self.limiter.reconfigure(type(spec)(*args), **queue)

    def try_replenish(self) -> bool:
        assert self.has("plain"), "partitioned limiters have no try_replenish()"
        return bool(self.limiter.try_replenish())

    def close(self) -> None:
        self.limiter.close()

    async def aclose(self) -> None:
        await self.limiter.aclose()

    # ---- the tests' levers ----
    def restore(self, *leases: permits.Lease) -> None:
        """Makes the permits come back: releases ``leases`` (concurrency-style), or advances the
        clock by the recovery time (time-based: assumes every permit in use was taken at the
        current reading, a period boundary, as the tests do)."""
        if self.has("releases"):
            for lease in leases:
                lease.release()
        else:
            self.clock.advance(self.recovery)

    def exhaust(self) -> permits.Lease:
        """Takes every permit; returns the lease (kept by the caller: a dropped concurrency lease
        is released when collected)."""
        lease = self.acquire(self.limit)
        assert lease, lease.reason
        return lease

    def chained(self, *, before: Iterable[Any] = (), after: Iterable[Any] = ()) -> Subject:
        """This subject's limiter in a chain with other limiters, as a subject (same key)."""
        chain = permits.chain(*before, self.limiter, *after)
        return Subject(self.implementation, self.clock, self.limit, chain, self.key, self.members)

    def with_key(self, key: Any) -> Subject:
        """Another key of the same partitioned limiter."""
        assert self.has("keyed")
        return Subject(self.implementation, self.clock, self.limit, self.limiter, key, self.members)

    def close_all(self) -> None:
        """Closes the limiter and the members it does not close itself (teardown)."""
        for limiter in (self.limiter, *self.members):
            limiter.close()


#: The ``make`` fixture: ``make(limit, queue_limit=0, queue_order=OLDEST, auto_replenishment=True)``.
Make = Callable[..., Subject]
