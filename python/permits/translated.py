"""A keyed limiter seen through a key mapping: ``keyed.with_translated_key(fn)`` (.NET's
``PartitionedRateLimiter.WithTranslatedKey``). One limiter's state serves callers that name its
keys differently: user names case-folded, a request turned into its client's id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._core import Lease
from .awaitables import LeaseWait
from .keyed_limiter import KeyedRateLimiter
from .rate_limiter import Statistics, _no_copies


class TranslatedKeyLimiter(KeyedRateLimiter):
    """What ``keyed.with_translated_key(translate)`` returns: every call maps its resource with
    ``translate`` and goes to ``limiter`` with the result, so both see one state per translated key
    (its permits, its queue, its statistics). Its ``close()`` closes this view only: the limiter
    behind it (which others may use) stays open."""

    __reduce_ex__ = _no_copies

    def __init__(self, limiter: KeyedRateLimiter, translate: Callable[[Any], object]) -> None:
        if not isinstance(limiter, KeyedRateLimiter):
            raise TypeError(f"limiter must be a permits.KeyedRateLimiter, got {type(limiter).__name__}")
        if not callable(translate):
            raise TypeError(f"translate must be callable, got {type(translate).__name__}")
        super().__init__(name=limiter.name, clock=limiter._rl_clock)
        self.limiter = limiter
        """The keyed limiter whose state this view shares."""
        self.translate = translate
        """The key mapping: ``translate(resource)`` is the key the limiter is asked for."""

    def acquire(self, resource: object, permit_count: int = 1) -> Lease:
        self._check_open()
        return self.limiter.acquire(self.translate(resource), permit_count)

    def acquire_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        self._check_open()
        return self.limiter.acquire_async(self.translate(resource), permit_count)

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        self._check_open()
        return self.limiter.wait(self.translate(resource), permit_count, timeout)

    def wait_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        self._check_open()
        return self.limiter.wait_async(self.translate(resource), permit_count)

    def available_permits(self, resource: object) -> int:
        self._check_open()
        return self.limiter.available_permits(self.translate(resource))

    def statistics(self, resource: object = None) -> Statistics:
        """The translated key's statistics, or with no resource the limiter's totals."""
        self._check_open()
        return self.limiter.statistics(None if resource is None else self.translate(resource))

    def _reconfigure(self, spec: Any, queue_limit: Any, queue_order: Any) -> None:
        self.limiter.reconfigure(spec, queue_limit=queue_limit, queue_order=queue_order)  # (every key's)

    def reset(self, resource: object) -> None:
        """The limiter's ``reset(translate(resource))``."""
        self._check_open()
        self.limiter.reset(self.translate(resource))

    @property
    def partition_count(self) -> int:
        """The limiter's live partitions (this view keeps none of its own)."""
        return self.limiter.partition_count

    def evict_idle(self) -> int:
        """The limiter's ``evict_idle()``."""
        return self.limiter.evict_idle()

    def close(self) -> None:
        """Closes this view: its calls raise ``LimiterClosedError`` from now on. The limiter behind
        it stays open."""
        self._rl_mark_closed()

    def __repr__(self) -> str:
        return f"<TranslatedKeyLimiter of {self.limiter!r}>"


__all__ = ["TranslatedKeyLimiter"]
