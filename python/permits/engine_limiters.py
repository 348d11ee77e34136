"""The engine's limiters: every decision is made in C++ (``permits._core``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import _core, specs
from ._core import Lease
from ._durations import Duration, count, timeout_ns
from ._loop_check import blocks_the_loop
from .awaitables import LeaseWait, _Ready
from .rate_limiter import QueueOrder, RateLimiter, Statistics, _check_permit_count, _no_copies


def _queue_order(value: object) -> bool:
    if not isinstance(value, QueueOrder):
        raise TypeError(f"queue_order must be a permits.QueueOrder, got {type(value).__name__}")
    return value is QueueOrder.NEWEST_FIRST


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _name(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"name must be a str or None, got {type(value).__name__}")
    return value


def _queue_limit(value: object) -> int | None:
    """None: no bound on the queue (the engine's own "no limit", passed as None); 0: a wait that cannot
    be granted at once fails with "queue_full"; N: at most N permits wait."""
    return None if value is None else count(value, "queue_limit", minimum=0)


def _check_queue(queue_limit: object, queue_order: object, name: object) -> tuple[int | None, QueueOrder, str | None]:
    """The options every engine limiter takes, checked as the constructors check them."""
    checked = _queue_limit(queue_limit)
    _queue_order(queue_order)
    assert isinstance(queue_order, QueueOrder)  # (for the type checker: _queue_order refused anything else)
    return checked, queue_order, _name(name)


_E = TypeVar("_E", bound="_EngineLimiter")


def _check_reconfigured(current: specs.Spec[Any], spec: object) -> None:
    """reconfigure(spec) keeps the kind and its window (period, segments): TypeError or ValueError
    naming what differs."""
    if type(spec) is not type(current):
        kind = type(current).__name__
        raise TypeError(f"spec must be a permits.specs.{kind}: a limiter keeps its kind, got {type(spec).__name__}")
    assert isinstance(spec, specs.Spec)  # (for the type checker: the same class as current)
    for public, compared in spec._timeline:
        if getattr(spec, compared) != getattr(current, compared):
            raise ValueError(
                f"spec's {public} is {getattr(spec, public)!r}, this limiter's {getattr(current, public)!r}: "
                f"a limiter keeps its {public} (its state counts in it); make a new limiter for another"
            )


def _reconfigured_queue(
    current: tuple[int | None, bool], queue_limit: object, queue_order: object
) -> tuple[int | None, bool]:
    """The queue options after reconfigure: those given, checked, and the others (``...``) as they are."""
    limit, newest = current
    if queue_limit is not ...:
        limit = _queue_limit(queue_limit)
    if queue_order is not ...:
        newest = _queue_order(queue_order)
    return limit, newest


#: reconfigure() changes the engine's limit and the limiter's attributes (spec, permit_limit...)
#: under it: two at once leave both saying the same.
_RECONFIGURING = threading.Lock()


def _builds(spec_type: type[specs.Spec[Any]]) -> Callable[[type[_E]], type[_E]]:
    """Links a spec class to the public limiter class its limiter() builds."""

    def link(cls: type[_E]) -> type[_E]:
        spec_type._limiter_type = cls
        return cls

    return link


class _EngineLimiter(RateLimiter):
    """Members shared by the engine's limiters; the C++ class before this one in the MRO supplies
    acquire, wait_async, available_permits, try_replenish and close directly (no Python frame on those calls)."""

    spec: specs.Spec[Any]
    """The limit, as a value: ``permits.specs.TokenBucket(...)`` and the like."""

    def _init(
        self,
        spec: specs.Spec[Any],
        queue_limit: object,
        queue_order: object,
        name: str | None,
        clock: Any,
        options: dict[str, object],
    ) -> None:
        """Every engine limiter's construction, from its spec: spec.limiter() and the classes' __init__."""
        manual = False
        if spec._replenishing:
            auto = _flag(options.pop("auto_replenishment", True), "auto_replenishment")
            manual = not auto
        if options:
            unknown = next(iter(options))
            raise TypeError(f"{type(spec).__name__}.limiter() got an unexpected keyword argument {unknown!r}")
        RateLimiter.__init__(self, name=name, clock=clock)
        ql, newest = _queue_limit(queue_limit), _queue_order(queue_order)
        engine: Any = spec._engine  # each engine class's __init__ takes its own spec class
        engine.__init__(self, self._rl_clock, spec, ql, newest, manual)
        self._take_spec(spec)
        if spec._replenishing:
            self.auto_replenishment = auto

    def _core_self(self) -> _core.Limiter:
        return self  # type: ignore[return-value]

    def _take_spec(self, spec: specs.Spec[Any]) -> None:
        """``spec`` and the attributes it gives (``permit_limit``...), those the class computes left out."""
        self.spec = spec
        for attribute in spec._attributes:
            if not isinstance(getattr(type(self), attribute, None), property):
                setattr(self, attribute, getattr(spec, attribute))

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        engine: Any = self  # (each engine class takes its own spec class)
        if not hasattr(engine, "_reconfigure_engine"):
            raise NotImplementedError(f"{type(self).__name__} cannot be reconfigured")
        _check_reconfigured(self.spec, spec)
        assert isinstance(spec, specs.Spec)  # (checked: the same class as self.spec)
        limit, newest = _reconfigured_queue(self._core_self()._queue, queue_limit, queue_order)
        with _RECONFIGURING:  # the engine and these attributes change together
            engine._reconfigure_engine(spec, limit, newest)
            self._take_spec(spec)

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks the calling thread (without holding the GIL) until ``permit_count`` permits are
        granted, and returns the lease; granted at once when it can be.

        ``timeout`` is in seconds (a float, an int or a ``timedelta``): None waits as long as it takes,
        0 never waits. It runs on the limiter's clock, so with a ``ManualClock`` it passes when the
        clock is advanced. The wait ends with a failed lease on ``"timeout"``, ``"queue_full"`` (no
        room in the queue), ``"evicted"`` (pushed out under ``NEWEST_FIRST``) or ``"closed"``. Raises
        ``ValueError`` for a negative timeout or a bad ``permit_count``, ``LimiterClosedError`` if the
        limiter is closed already.
        """
        blocks_the_loop(timeout)
        return self._core_self()._wait(_check_permit_count(permit_count), timeout_ns(timeout))

    def statistics(self) -> Statistics:
        """A snapshot of the counters: permits available now, permits queued, leases granted and
        failed since construction (timeouts, cancellations and close are not failures). Raises
        ``LimiterClosedError`` after ``close()``."""
        return Statistics(*self._core_self()._statistics())

    @property
    def idle_duration(self) -> float | None:
        """Seconds since the limiter became fully idle (every permit available, nothing queued), or
        None while it is in use. As a partition, the limiter is evicted once this passes the idle timeout."""
        ns = self._core_self()._idle_duration_ns()
        return None if ns is None else ns / 1e9

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


# Each class is its spec with the queue options: the spec checks the limits, _init the rest.
@_builds(specs.Concurrency)
class ConcurrencyLimiter(_core.Concurrency, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` permits held at once; a lease's ``release()`` gives them back."""

    spec: specs.Concurrency
    """The limit, as a value: ``permits.specs.Concurrency(permit_limit)``."""
    permit_limit: int
    """Permits held at once, at most."""

    def __init__(
        self,
        permit_limit: int,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        self._init(specs.Concurrency(permit_limit), queue_limit, queue_order, name, clock, {})


@_builds(specs.TokenBucket)
class TokenBucketLimiter(_core.TokenBucket, _EngineLimiter):  # type: ignore[misc]
    """``token_limit`` tokens; ``tokens_per_period`` come back every ``replenishment_period``."""

    spec: specs.TokenBucket
    """The limit, as a value: ``permits.specs.TokenBucket(...)``."""
    token_limit: int
    """Tokens the bucket holds at most: the largest burst."""
    tokens_per_period: int
    """Tokens added every ``replenishment_period``."""
    replenishment_period: float
    """Seconds between refills."""
    auto_replenishment: bool
    """False: tokens are added only by ``try_replenish()``."""

    def __init__(
        self,
        token_limit: int,
        tokens_per_period: int,
        replenishment_period: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        spec = specs.TokenBucket(token_limit, tokens_per_period, replenishment_period)
        self._init(spec, queue_limit, queue_order, name, clock, {"auto_replenishment": auto_replenishment})


@_builds(specs.FixedWindow)
class FixedWindowLimiter(_core.FixedWindow, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` grants per window; windows follow each other from construction."""

    spec: specs.FixedWindow
    """The limit, as a value: ``permits.specs.FixedWindow(permit_limit, window)``."""
    permit_limit: int
    """Grants per window, at most."""
    window: float
    """The window's length in seconds."""
    replenishment_period: float
    """Seconds between replenishments: the window."""
    auto_replenishment: bool
    """False: a new window starts only in ``try_replenish()``."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        spec = specs.FixedWindow(permit_limit, window)
        self._init(spec, queue_limit, queue_order, name, clock, {"auto_replenishment": auto_replenishment})


@_builds(specs.SlidingWindow)
class SlidingWindowLimiter(_core.SlidingWindow, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` grants in any window, which slides by ``window / segments_per_window``."""

    spec: specs.SlidingWindow
    """The limit, as a value: ``permits.specs.SlidingWindow(permit_limit, window, segments_per_window)``."""
    permit_limit: int
    """Grants in any window, at most."""
    window: float
    """The window's length in seconds."""
    segments_per_window: int
    """Segments the window is cut into: it slides by one segment at a time."""
    replenishment_period: float
    """Seconds between replenishments: one segment (whole nanoseconds)."""
    auto_replenishment: bool
    """False: the window slides only in ``try_replenish()``."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        segments_per_window: int,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        spec = specs.SlidingWindow(permit_limit, window, segments_per_window)
        self._init(spec, queue_limit, queue_order, name, clock, {"auto_replenishment": auto_replenishment})


@_builds(specs.SlidingLog)
class SlidingLogLimiter(_core.SlidingWindow, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` grants in any interval of ``window``: a permit comes back one window
    after it was taken (``permits.parse("100/minute")`` builds one)."""

    spec: specs.SlidingLog
    """The limit, as a value: ``permits.specs.SlidingLog(permit_limit, window)``."""
    permit_limit: int
    """Grants in any interval of ``window``, at most."""
    window: float
    """The window's length in seconds."""
    replenishment_period: float
    """Seconds: a 32nd of the window, how finely it keeps time."""
    auto_replenishment: bool
    """False: permits come back only in ``try_replenish()``."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        spec = specs.SlidingLog(permit_limit, window)
        self._init(spec, queue_limit, queue_order, name, clock, {"auto_replenishment": auto_replenishment})


@_builds(specs.SlidingWindowCounter)
class SlidingWindowCounterLimiter(_core.SlidingWindowCounter, _EngineLimiter):  # type: ignore[misc]
    """Two fixed windows weighted by the elapsed fraction: O(1) state, no boundary burst."""

    spec: specs.SlidingWindowCounter
    """The limit, as a value: ``permits.specs.SlidingWindowCounter(permit_limit, window)``."""
    permit_limit: int
    """Grants per window, at most, the previous window's grants counting by how much of it still overlaps."""
    window: float
    """The window's length in seconds."""
    replenishment_period: float
    """Seconds between replenishments: the window."""
    auto_replenishment: bool
    """False: the windows move on only in ``try_replenish()``."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        spec = specs.SlidingWindowCounter(permit_limit, window)
        self._init(spec, queue_limit, queue_order, name, clock, {"auto_replenishment": auto_replenishment})


class NoLimiter(RateLimiter):
    """Grants every request, any count; never queues. Idle since its last grant (as a partition,
    it is evicted once unused for the idle timeout)."""

    __reduce_ex__ = _no_copies

    def __init__(self, *, name: str | None = None, clock: Any = None) -> None:
        super().__init__(name=name, clock=clock)
        self._last_used_ns = self._rl_clock.now_ns()

    def _acquire(self, permit_count: int) -> Lease:
        self._last_used_ns = self._rl_clock.now_ns()
        return Lease.granted(permit_count)

    def _try_now(self, permit_count: int) -> Lease | None:
        return self.acquire(permit_count)

    def acquire_async(self, permit_count: int = 1) -> LeaseWait:
        """``acquire()``, as an awaitable of its (granted) lease; also an async context manager."""
        return _Ready(self.acquire(permit_count))

    async def _wait_async(self, permit_count: int) -> Lease:
        return self._acquire(permit_count)  # counted by wait_async, as every wait's outcome

    @property
    def idle_duration(self) -> float | None:
        """Seconds since the last grant (or construction); never None."""
        return max(0, self._rl_clock.now_ns() - self._last_used_ns) / 1e9

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """``acquire()``: granted at once, never waits (``timeout`` is checked, then unused)."""
        timeout_ns(timeout)
        return self.acquire(permit_count)

    def _statistics(self) -> Statistics:
        return Statistics(2**63 - 1, 0, self._rl_tally.granted, 0)

    def __repr__(self) -> str:
        return f"<NoLimiter name={self.name!r}>"
