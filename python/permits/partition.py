"""Partition: which limiter a resource belongs to (a key, and how to build that key's limiter).

The factories (``Partition.token_bucket`` and the like) and the checks of the options that
``PartitionedLimiter`` and ``PerKeyLimiter`` share live here, so that neither limiter's module
imports the other's for them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import timedelta
from typing import Any

from .engine_limiters import NoLimiter, _check_queue
from .rate_limiter import QueueOrder, RateLimiter
from .specs import Concurrency, FixedWindow, SlidingWindow, SlidingWindowCounter, Spec, SpecList, TokenBucket, parse

Factory = Callable[[Hashable, Any], RateLimiter]
"""A partition's ``factory``: ``factory(key, clock)`` builds the limiter of ``key`` on ``clock``."""


# A partitioner makes a partition on every request, mostly with the same options: the templates
# (partitions with key None) already made are remembered, up to a bound, by the exact option
# values and their types (True == 1 but is no count). The factories' are found by their own
# arguments, with no spec made or hashed on the way.
_CACHE_BOUND = 256
_PLAIN_TYPES = frozenset({int, float, str, type(None), QueueOrder, timedelta})
_TEMPLATES: dict[tuple[object, ...], Partition] = {}  # Partition.of's
_FACTORY_TEMPLATES: dict[tuple[object, ...], Partition] = {}  # Partition.token_bucket's and the like


def _remember(cache: dict[tuple[object, ...], Partition], found: tuple[object, ...], template: Partition) -> None:
    if len(cache) >= _CACHE_BOUND:
        cache.clear()  # options that change all the time: the recent ones stay cheap
    cache[found] = template


def _made(
    key: Hashable,
    spec_type: Callable[..., Spec[RateLimiter]],
    limits: tuple[object, ...],
    queue_limit: int | None,
    queue_order: QueueOrder,
    name: str | None,
) -> Partition:
    """Partition.of(key, spec_type(*limits), ...): what the factories are."""
    options = (*limits, queue_limit, queue_order, name)
    types = tuple(map(type, options))
    found = (spec_type, options, types)
    try:
        return _FACTORY_TEMPLATES[found].with_key(key)
    except (KeyError, TypeError):  # TypeError: an unhashable option, which the checks refuse
        pass
    template = Partition.of(None, spec_type(*limits), queue_limit=queue_limit, queue_order=queue_order, name=name)
    if _PLAIN_TYPES.issuperset(types):
        _remember(_FACTORY_TEMPLATES, found, template)
    return template.with_key(key)


class _SpecFactory:
    """``Partition.of``'s factory: ``spec``'s limiter with the partition's queue options and name.
    A partition without a name is its partitioned limiter's: ``build`` names it so, for a failed
    lease and the headers to say which limit refused."""

    __slots__ = ("_options", "_spec")

    def __init__(self, spec: Spec[RateLimiter] | SpecList, options: tuple[int | None, QueueOrder, str | None]) -> None:
        self._spec = spec
        self._options = options

    def __call__(self, _key: Hashable, clock: Any) -> RateLimiter:
        return self.build(clock, None)

    def build(self, clock: Any, owner_name: str | None) -> RateLimiter:
        queue_limit, queue_order, name = self._options
        name = owner_name if name is None else name
        return self._spec.limiter(queue_limit=queue_limit, queue_order=queue_order, name=name, clock=clock)


def _no_limiter(_key: Hashable, clock: Any) -> RateLimiter:
    return NoLimiter(clock=clock)  # idle since its last grant, on the partitioned limiter's clock


class Partition:
    """Which limiter a resource belongs to: a key and how to build that key's limiter.

    ``spec`` is the limit (a ``permits.specs`` value), None for ``no_limiter`` and ``custom``.
    The factories check their options when called, as the limiters' constructors do. ``factory``
    is public: ``partition.factory(key, clock)`` builds the limiter the partition describes.
    """

    __slots__ = ("_options", "factory", "key", "spec")

    def __init__(
        self,
        key: Hashable,
        spec: Spec[RateLimiter] | SpecList | None,
        factory: Factory,
        options: tuple[int | None, QueueOrder, str | None] = (None, QueueOrder.OLDEST_FIRST, None),
    ) -> None:
        self.key = key
        """The partition's key: which limiter of a ``PartitionedLimiter`` the resource counts against."""
        self.spec = spec
        """The limit, a ``permits.specs`` value (a ``SpecList`` for several); None for ``no_limiter``
        and ``custom`` partitions."""
        self.factory = factory  # (key, clock) -> RateLimiter, called once per key
        """``factory(key, clock)`` builds the limiter the partition describes, on ``clock``; a
        ``PartitionedLimiter`` calls it once per key, on first use."""
        self._options = options  # queue_limit, queue_order, name: the spec's limiter's, checked

    def with_key(self, key: Hashable) -> Partition:
        """The same partition (spec, factory, queue options and name) for ``key``."""
        return Partition(key, self.spec, self.factory, self._options)

    def __repr__(self) -> str:
        if self.spec is None:
            if self.factory is _no_limiter:
                return f"Partition.no_limiter({self.key!r})"
            return f"Partition.custom({self.key!r}, ...)"
        queue_limit, queue_order, name = self._options
        options = "" if queue_limit is None else f", queue_limit={queue_limit}"
        if queue_order is not QueueOrder.OLDEST_FIRST:
            options += f", queue_order=QueueOrder.{queue_order.name}"
        if name is not None:
            options += f", name={name!r}"
        return f"Partition.of({self.key!r}, {self.spec!r}{options})"

    @staticmethod
    def of(
        key: Hashable,
        spec: Spec[RateLimiter] | SpecList | str,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited by ``spec``; the queue options and the name are those
        of its limiter (``spec.limiter(...)``). ``spec`` may be a rate such as ``"5/second"``
        (``permits.specs.parse``), or several (``"5/second;100/hour"``, a ``SpecList``: a chain)."""
        found = (spec, queue_limit, queue_order, name, type(spec), type(queue_limit), type(queue_order), type(name))
        try:
            return _TEMPLATES[found].with_key(key)
        except (KeyError, TypeError):  # TypeError: an unhashable option, which the checks refuse
            pass
        if isinstance(spec, str):
            spec = parse(spec)
        if not isinstance(spec, Spec | SpecList):
            raise TypeError(
                f"spec must be a permits.specs spec (TokenBucket, ...) or a rate such as '5/second', "
                f"got {type(spec).__name__}"
            )
        options = _check_queue(queue_limit, queue_order, name)
        template = Partition(None, spec, _SpecFactory(spec, options), options)
        if _PLAIN_TYPES.issuperset(found[5:]):
            _remember(_TEMPLATES, found, template)
        return template.with_key(key)

    @staticmethod
    def token_bucket(
        key: Hashable,
        token_limit: int,
        tokens_per_period: int,
        replenishment_period: float,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited by a token bucket: ``Partition.of(key,
        TokenBucket(token_limit, tokens_per_period, replenishment_period), ...)``. The period is in
        seconds (or a ``timedelta``). Raises ``ValueError`` or ``TypeError`` for a bad option, now."""
        limits = (token_limit, tokens_per_period, replenishment_period)
        return _made(key, TokenBucket, limits, queue_limit, queue_order, name)

    @staticmethod
    def fixed_window(
        key: Hashable,
        permit_limit: int,
        window: float,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited by a fixed window: ``Partition.of(key,
        FixedWindow(permit_limit, window), ...)``, ``window`` in seconds (or a ``timedelta``). Raises
        ``ValueError`` or ``TypeError`` for a bad option, now."""
        return _made(key, FixedWindow, (permit_limit, window), queue_limit, queue_order, name)

    @staticmethod
    def sliding_window(
        key: Hashable,
        permit_limit: int,
        window: float,
        segments_per_window: int,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited by a sliding window: ``Partition.of(key,
        SlidingWindow(permit_limit, window, segments_per_window), ...)``, ``window`` in seconds (or a
        ``timedelta``). Raises ``ValueError`` or ``TypeError`` for a bad option, now."""
        limits = (permit_limit, window, segments_per_window)
        return _made(key, SlidingWindow, limits, queue_limit, queue_order, name)

    @staticmethod
    def sliding_window_counter(
        key: Hashable,
        permit_limit: int,
        window: float,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited by a sliding window counter: ``Partition.of(key,
        SlidingWindowCounter(permit_limit, window), ...)``, ``window`` in seconds (or a
        ``timedelta``). Raises ``ValueError`` or ``TypeError`` for a bad option, now."""
        return _made(key, SlidingWindowCounter, (permit_limit, window), queue_limit, queue_order, name)

    @staticmethod
    def concurrency(
        key: Hashable,
        permit_limit: int,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
    ) -> Partition:
        """The partition of ``key`` limited to ``permit_limit`` permits held at once:
        ``Partition.of(key, Concurrency(permit_limit), ...)``. Raises ``ValueError`` or ``TypeError``
        for a bad option, now."""
        return _made(key, Concurrency, (permit_limit,), queue_limit, queue_order, name)

    @staticmethod
    def no_limiter(key: Hashable) -> Partition:
        """The partition of ``key`` with no limit: its limiter (a ``NoLimiter``) grants every request."""
        return Partition(key, None, _no_limiter)

    @staticmethod
    def custom(key: Hashable, factory: Callable[[Hashable], RateLimiter]) -> Partition:
        """The partition of ``key`` whose limiter ``factory(key)`` builds, on the key's first use; the
        limiter runs on its own clock. Raises ``TypeError`` now if ``factory`` is not callable, and
        when the limiter is built if it is not a ``permits.RateLimiter``."""
        if not callable(factory):
            raise TypeError("factory must be callable: factory(key) -> RateLimiter")

        def make(k: Hashable, _clock: Any) -> RateLimiter:
            limiter = factory(k)
            if not isinstance(limiter, RateLimiter):
                raise TypeError(
                    f"the partition factory must return a permits.RateLimiter, got {type(limiter).__name__}"
                )
            return limiter

        return Partition(key, None, make)


def _check_options(max_partitions: object, name: object) -> None:
    if max_partitions is not None and (isinstance(max_partitions, bool) or not isinstance(max_partitions, int)):
        raise TypeError(f"max_partitions must be an int or None, got {type(max_partitions).__name__}")
    if max_partitions is not None and int.__int__(max_partitions) < 1:
        raise ValueError(f"max_partitions must be >= 1, got {int.__int__(max_partitions)}")
    if max_partitions is not None and int.__int__(max_partitions) > 2**63 - 1:
        raise ValueError(f"max_partitions is too large: {int.__int__(max_partitions)} (at most 2**63 - 1)")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")


def _members(template: Partition) -> list[Partition]:
    """A template of several limits (a ``SpecList``) as one template per limit, each with its options."""
    assert isinstance(template.spec, SpecList)
    queue_limit, queue_order, name = template._options
    return [
        Partition.of(None, spec, queue_limit=queue_limit, queue_order=queue_order, name=name) for spec in template.spec
    ]


def _template_of(template: object) -> Partition:
    """per_key's template: a spec (or a rate such as "10/minute") stands for its partition with the
    default queue options."""
    if isinstance(template, Spec | SpecList | str):
        return Partition.of(None, template)
    if not isinstance(template, Partition):
        raise TypeError(
            f"template must be a permits.Partition, a spec or a rate such as '10/minute', got {type(template).__name__}"
        )
    if template.key is not None:
        raise ValueError("a per_key template is made with key None, e.g. Partition.token_bucket(None, ...)")
    return template


__all__ = ["Partition"]
