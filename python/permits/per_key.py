"""PerKeyLimiter: a limit per key whose every key's limiter lives in the engine's table."""

from __future__ import annotations

from typing import Any

from . import _core
from ._core import Lease, LimiterClosedError
from ._durations import duration_ns, timeout_ns
from ._loop_check import blocks_the_loop
from .engine_limiters import _RECONFIGURING, _check_reconfigured, _reconfigured_queue
from .keyed_limiter import KeyedRateLimiter
from .partition import Partition, _check_options, _template_of
from .rate_limiter import QueueOrder, RateLimiter, Statistics, _check_permit_count
from .specs import Spec, SpecList


class PerKeyLimiter(_core.PerKey, KeyedRateLimiter):  # type: ignore[misc]
    """What ``PartitionedLimiter.per_key`` returns for the engine's limiter kinds: every key's
    limiter lives in the engine's table; ``acquire`` makes no Python call per key."""

    def __init__(
        self,
        template: Partition | Spec[RateLimiter] | str,
        *,
        idle_timeout: float = 10.0,
        max_partitions: int | None = None,
        clock: Any = None,
        name: str | None = None,
    ) -> None:
        _check_options(max_partitions, name)
        template = _template_of(template)
        if isinstance(template.spec, SpecList):
            raise TypeError("several limits (a SpecList) make a chain: PartitionedLimiter.per_key(...) builds it")
        if template.spec is None:
            raise TypeError(f"the engine keeps per-key state for specs only, not for {template!r}")
        queue_limit, queue_order, template_name = template._options
        if name is None:
            name = template_name  # the template's name names every key's limit (metadata, headers, metrics)
        idle_ns = duration_ns(idle_timeout, "idle_timeout", allow_zero=True)
        newest_first = queue_order is QueueOrder.NEWEST_FIRST
        KeyedRateLimiter.__init__(self, name=name, clock=clock)
        _core.PerKey.__init__(
            self, self._rl_clock, template.spec, queue_limit, newest_first, idle_ns, max_partitions or 0
        )
        self.spec = template.spec
        """Every key's limit, as a value (``permits.specs.TokenBucket(...)`` and the like)."""
        self.idle_timeout = idle_ns / 1e9
        """Seconds a key stays fully idle (all permits back, nothing queued) before it is evicted."""
        self.max_partitions = max_partitions
        """The most keys held at once, or None for no bound; a new key beyond it fails with reason
        ``"partition_limit"`` unless an idle key can make room."""

    def _core_self(self) -> _core.PerKey:
        return self

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        _check_reconfigured(self.spec, spec)
        assert isinstance(spec, Spec)  # (checked: the same class as self.spec)
        limit, newest = _reconfigured_queue(self._core_self()._queue, queue_limit, queue_order)
        with _RECONFIGURING:  # the engine's template and self.spec change together
            self._core_self()._reconfigure_engine(spec, limit, newest)
            self.spec = spec

    def _check_open(self) -> None:
        if self._core_self().closed:
            raise LimiterClosedError("the limiter is closed")

    async def aclose(self) -> None:
        """``close()`` for async code (``contextlib.aclosing(limiter)`` calls it at the end of a block)."""
        self.close()  # the engine's table: no partition limiters of their own to await

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks the calling thread until ``resource``'s permits are granted, and returns the lease.

        ``timeout`` is in seconds (None: as long as it takes; 0: never waits), on the limiter's
        clock. The wait ends with a failed lease on ``"timeout"``, ``"queue_full"``, ``"evicted"``,
        ``"closed"`` or ``"partition_limit"``. Raises ``TypeError`` for a key that is not a ``str``,
        ``bytes``, ``int`` or a tuple of them, ``ValueError`` for a negative timeout or a bad
        ``permit_count``, ``LimiterClosedError`` if the limiter is closed already.
        """
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        result = self._core_self()._enqueue(resource, n, timeout_ns(timeout), None)
        return result if isinstance(result, Lease) else result.block()

    def available_permits(self, resource: object) -> int:
        """The permits a request for ``resource`` could take now (a new key is added with its full
        limit; 0 when ``max_partitions`` leaves no room for it). Raises ``LimiterClosedError`` after
        ``close()``."""
        return _core.PerKey._available(self, resource)  # (as _core_self(): a request's headers ask it)

    def statistics(self, resource: object = None) -> Statistics:
        """``resource``'s counters (a new key is added, as in ``available_permits``), or with no
        resource the totals over every key, evicted keys' grants and failures included. Raises
        ``LimiterClosedError`` after ``close()``."""
        if resource is None:
            return Statistics(*self._core_self()._totals())
        stats = self._core_self()._statistics(resource)
        return Statistics(0, 0, 0, 0) if stats is None else Statistics(*stats)

    def __repr__(self) -> str:
        return f"<PerKeyLimiter name={self.name!r} partitions={self._core_self().partition_count}>"


__all__ = ["PerKeyLimiter"]
