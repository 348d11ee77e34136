"""The limiter makers every store has (token_bucket, fixed_window, ...): each is ``limiter(name,
spec)`` with the spec of its arguments."""

from __future__ import annotations

from typing import Any

from .. import specs
from .._durations import Duration
from ..rate_limiter import QueueOrder, RateLimiter


def member_name(name: str, index: int) -> str:
    """The state's name of a store limiter's ``index``-th limit when it has several (a ``SpecList``)."""
    return f"{name}#{index}"


def spec_of(spec: object, argument: str = "spec") -> specs.Spec[Any] | specs.SpecList:
    """A store limiter's spec: a ``permits.specs`` value (or several, a ``SpecList``), or a rate
    such as "10/second" parsed."""
    if isinstance(spec, str):
        try:
            return specs.parse(spec)
        except ValueError as error:
            raise ValueError(f"{argument}: {error}") from None
    if not isinstance(spec, specs.Spec | specs.SpecList):
        raise TypeError(
            f"{argument} must be a permits.specs spec or a rate such as '10/second', got {type(spec).__name__}"
        )
    return spec


class StoreFactories:
    """The limiter makers of a store; each is ``limiter(name, spec)`` with the spec of its arguments."""

    def limiter(
        self,
        name: str,
        spec: specs.Spec[Any] | specs.SpecList | str,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        lease_ttl: Duration = 60.0,
    ) -> RateLimiter:
        raise NotImplementedError

    def token_bucket(
        self,
        name: str,
        token_limit: int,
        tokens_per_period: int,
        replenishment_period: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
    ) -> RateLimiter:
        """The store's token bucket named ``name``: ``token_limit`` tokens, ``tokens_per_period``
        back every ``replenishment_period`` (seconds, or a ``timedelta``). As ``limiter(name,
        TokenBucket(...))``; raises ``ValueError`` or ``TypeError`` for a bad option."""
        spec = specs.TokenBucket(token_limit, tokens_per_period, replenishment_period)
        return self.limiter(name, spec, queue_limit=queue_limit, queue_order=queue_order)

    def fixed_window(
        self,
        name: str,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
    ) -> RateLimiter:
        """The store's fixed window named ``name``: at most ``permit_limit`` grants per ``window``
        (seconds, or a ``timedelta``). As ``limiter(name, FixedWindow(...))``; raises ``ValueError``
        or ``TypeError`` for a bad option."""
        spec = specs.FixedWindow(permit_limit, window)
        return self.limiter(name, spec, queue_limit=queue_limit, queue_order=queue_order)

    def sliding_window(
        self,
        name: str,
        permit_limit: int,
        window: Duration,
        segments_per_window: int,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
    ) -> RateLimiter:
        """The store's sliding window named ``name``: at most ``permit_limit`` grants in any
        ``window`` (seconds, or a ``timedelta``), sliding by ``window / segments_per_window``. As
        ``limiter(name, SlidingWindow(...))``; raises ``ValueError`` or ``TypeError`` for a bad option."""
        spec = specs.SlidingWindow(permit_limit, window, segments_per_window)
        return self.limiter(name, spec, queue_limit=queue_limit, queue_order=queue_order)

    def sliding_window_counter(
        self,
        name: str,
        permit_limit: int,
        window: Duration,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
    ) -> RateLimiter:
        """The store's sliding window counter named ``name``: ``permit_limit`` grants per ``window``
        (seconds, or a ``timedelta``), the previous window weighted by how much of it is still in
        view. As ``limiter(name, SlidingWindowCounter(...))``; raises ``ValueError`` or ``TypeError``
        for a bad option."""
        spec = specs.SlidingWindowCounter(permit_limit, window)
        return self.limiter(name, spec, queue_limit=queue_limit, queue_order=queue_order)

    def concurrency(
        self,
        name: str,
        permit_limit: int,
        *,
        lease_ttl: Duration = 60.0,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
    ) -> RateLimiter:
        """The store's concurrency limiter named ``name``: at most ``permit_limit`` permits held at
        once, every process together; ``lease.release()`` gives them back. The permits of a process
        that died holding them come back at the latest ``lease_ttl`` seconds after it last renewed
        them. As ``limiter(name, Concurrency(permit_limit), lease_ttl=...)``."""
        spec = specs.Concurrency(permit_limit)
        return self.limiter(name, spec, queue_limit=queue_limit, queue_order=queue_order, lease_ttl=lease_ttl)
