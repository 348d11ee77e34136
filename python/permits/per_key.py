"""PerKeyLimiter: a limit per key whose every key's limiter lives in the engine's table."""

from __future__ import annotations

from typing import Any

from . import _core
from ._core import Lease, LimiterClosedError
from ._durations import duration_ns, timeout_ns
from .awaitables import LeaseWait, _Ready
from .keyed_limiter import KeyedRateLimiter
from .partition import Partition, _check_options, _template_of
from .rate_limiter import QueueOrder, RateLimiter, Statistics, _check_permit_count
from .specs import Spec


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
        if template.spec is None:
            raise TypeError(f"the engine keeps per-key state for specs only, not for {template!r}")
        queue_limit, queue_order, _ = template._options
        idle_ns = duration_ns(idle_timeout, "idle_timeout", allow_zero=True)
        newest_first = queue_order is QueueOrder.NEWEST_FIRST
        KeyedRateLimiter.__init__(self, name=name, clock=clock)
        _core.PerKey.__init__(
            self, self._rl_clock, template.spec, queue_limit, newest_first, idle_ns, max_partitions or 0
        )
        self.spec = template.spec
        self.idle_timeout = idle_ns / 1e9
        self.max_partitions = max_partitions

    def _core_self(self) -> _core.PerKey:
        return self

    def _check_open(self) -> None:
        if self._core_self().closed:
            raise LimiterClosedError("the limiter is closed")

    async def aclose(self) -> None:
        self.close()  # the engine's table: no partition limiters of their own to await

    def acquire_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        return _Ready(self._core_self().acquire(resource, permit_count))

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        n = _check_permit_count(permit_count)
        result = self._core_self()._enqueue(resource, n, timeout_ns(timeout), None)
        return result if isinstance(result, Lease) else result.block()

    def available_permits(self, resource: object) -> int:
        stats = self._core_self()._statistics(resource)
        return 0 if stats is None else stats[0]

    def statistics(self, resource: object = None) -> Statistics:
        if resource is None:
            return Statistics(*self._core_self()._totals())
        stats = self._core_self()._statistics(resource)
        return Statistics(0, 0, 0, 0) if stats is None else Statistics(*stats)

    def __repr__(self) -> str:
        return f"<PerKeyLimiter name={self.name!r} partitions={self._core_self().partition_count}>"


__all__ = ["PerKeyLimiter"]
