"""The engine's limiters: every decision is made in C++ (``permits._core``)."""

from __future__ import annotations

from typing import Any

from . import _core
from ._core import Lease
from ._durations import Duration, count, duration_ns, timeout_ns
from .awaitables import LeaseWait, _Ready
from .limiter import QueueOrder, RateLimiter, Statistics, _check_permit_count, _no_copies


def _queue_order(value: object) -> bool:
    if not isinstance(value, QueueOrder):
        raise TypeError(f"queue_order must be a permits.QueueOrder, got {type(value).__name__}")
    return value is QueueOrder.NEWEST_FIRST


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _segments(segments_per_window: object, window_ns: int) -> int:
    segments = count(segments_per_window, "segments_per_window")  # a plain int from here on
    if segments > 65536:
        raise ValueError(f"segments_per_window must be <= 65536, got {segments}")
    if window_ns // segments < 1:
        raise ValueError("window must be at least segments_per_window nanoseconds")
    return segments


def _name(value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"name must be a str or None, got {type(value).__name__}")


def _check_queue(queue_limit: object, queue_order: object, name: object) -> None:
    """The options every engine limiter takes, checked as the constructors check them."""
    count(queue_limit, "queue_limit", minimum=0)
    _queue_order(queue_order)
    _name(name)


_NOT_REPLENISHING = object()  # what the concurrency limiter passes for auto_replenishment


class _EngineLimiter(RateLimiter):
    """Members shared by the engine's limiters; the C++ class before this one in the MRO supplies
    acquire, wait_async, available_permits, try_replenish and close directly (no Python frame on those calls)."""

    def _setup(
        self,
        name: str | None,
        clock: object,
        queue_limit: object,
        queue_order: object,
        auto_replenishment: object = _NOT_REPLENISHING,
    ) -> tuple[int, bool, bool]:
        """Checks the options the engine limiters share: (queue_limit, newest_first, manual)."""
        RateLimiter.__init__(self, name=name, clock=clock)
        manual = False
        if auto_replenishment is not _NOT_REPLENISHING:  # the replenishing limiters
            self.auto_replenishment = _flag(auto_replenishment, "auto_replenishment")
            manual = not self.auto_replenishment
        return count(queue_limit, "queue_limit", minimum=0), _queue_order(queue_order), manual

    def _core_self(self) -> _core.Limiter:
        return self  # type: ignore[return-value]

    def acquire_async(self, permit_count: int = 1) -> LeaseWait:
        return _Ready(self.acquire(permit_count))  # the C++ class's acquire: no frame between

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        return self._core_self()._wait(_check_permit_count(permit_count), timeout_ns(timeout))

    def statistics(self) -> Statistics:
        return Statistics(*self._core_self()._statistics())

    @property
    def idle_duration(self) -> float | None:
        ns = self._core_self()._idle_duration_ns()
        return None if ns is None else ns / 1e9

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


class ConcurrencyLimiter(_core.Concurrency, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` permits held at once; a lease's ``release()`` gives them back."""

    def __init__(
        self,
        permit_limit: int,
        *,
        queue_limit: int = 0,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        ql, newest, _ = self._setup(name, clock, queue_limit, queue_order)
        _core.Concurrency.__init__(self, self._rl_clock, count(permit_limit, "permit_limit"), ql, newest)
        self.permit_limit = permit_limit


class TokenBucketLimiter(_core.TokenBucket, _EngineLimiter):  # type: ignore[misc]
    """``token_limit`` tokens; ``tokens_per_period`` come back every ``replenishment_period``."""

    def __init__(
        self,
        token_limit: int,
        tokens_per_period: int,
        replenishment_period: Duration,
        *,
        queue_limit: int = 0,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        ql, newest, manual = self._setup(name, clock, queue_limit, queue_order, auto_replenishment)
        period_ns = duration_ns(replenishment_period, "replenishment_period")
        _core.TokenBucket.__init__(
            self,
            self._rl_clock,
            count(token_limit, "token_limit"),
            count(tokens_per_period, "tokens_per_period"),
            period_ns,
            ql,
            newest,
            manual,
        )
        self.token_limit = token_limit
        self.tokens_per_period = tokens_per_period
        self.replenishment_period = period_ns / 1e9


class FixedWindowLimiter(_core.FixedWindow, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` grants per window; windows follow each other from construction."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int = 0,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        ql, newest, manual = self._setup(name, clock, queue_limit, queue_order, auto_replenishment)
        window_ns = duration_ns(window, "window")
        _core.FixedWindow.__init__(
            self, self._rl_clock, count(permit_limit, "permit_limit"), window_ns, ql, newest, manual
        )
        self.permit_limit = permit_limit
        self.window = window_ns / 1e9
        self.replenishment_period = self.window


class SlidingWindowLimiter(_core.SlidingWindow, _EngineLimiter):  # type: ignore[misc]
    """At most ``permit_limit`` grants in any window, which slides by ``window / segments_per_window``."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        segments_per_window: int,
        *,
        queue_limit: int = 0,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        ql, newest, manual = self._setup(name, clock, queue_limit, queue_order, auto_replenishment)
        window_ns = duration_ns(window, "window")
        segments = _segments(segments_per_window, window_ns)
        _core.SlidingWindow.__init__(
            self, self._rl_clock, count(permit_limit, "permit_limit"), window_ns, segments, ql, newest, manual
        )
        self.permit_limit = permit_limit
        self.window = window_ns / 1e9
        self.segments_per_window = segments
        self.replenishment_period = (window_ns // segments) / 1e9


class SlidingWindowCounterLimiter(_core.SlidingWindowCounter, _EngineLimiter):  # type: ignore[misc]
    """Two fixed windows weighted by the elapsed fraction: O(1) state, no boundary burst."""

    def __init__(
        self,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int = 0,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        auto_replenishment: bool = True,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        ql, newest, manual = self._setup(name, clock, queue_limit, queue_order, auto_replenishment)
        window_ns = duration_ns(window, "window")
        _core.SlidingWindowCounter.__init__(
            self, self._rl_clock, count(permit_limit, "permit_limit"), window_ns, ql, newest, manual
        )
        self.permit_limit = permit_limit
        self.window = window_ns / 1e9
        self.replenishment_period = self.window


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
        return _Ready(self.acquire(permit_count))

    async def _wait_async(self, permit_count: int) -> Lease:
        return self.acquire(permit_count)

    @property
    def idle_duration(self) -> float | None:
        return max(0, self._rl_clock.now_ns() - self._last_used_ns) / 1e9

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        timeout_ns(timeout)
        return self.acquire(permit_count)

    def _statistics(self) -> Statistics:
        return Statistics(2**63 - 1, 0, self._rl_successful, 0)

    def __repr__(self) -> str:
        return f"<NoLimiter name={self.name!r}>"
