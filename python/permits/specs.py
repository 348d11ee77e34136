"""Limit specifications: one immutable value per algorithm, the single description of a limit.

A spec says what the limit is, its limits and durations, checked once when it is made. How
requests queue, which clock runs it and where its state lives are said where it is used::

    TokenBucket(10, 10, 1.0).limiter(queue_limit=5)          # one limiter
    Partition.of(key, TokenBucket(10, 10, 1.0))              # a partition's limiter
    PartitionedLimiter.per_key(TokenBucket(10, 10, 1.0))     # a limiter per key, in the engine

Specs are equal, and hash alike, when their limits are: durations compare in nanoseconds, so
``FixedWindow(5, 1.0) == FixedWindow(5, timedelta(seconds=1))``.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, Self, TypeVar, cast, final

from . import _core
from ._durations import Duration, count, duration_ns, segments
from .rate_limiter import QueueOrder, RateLimiter

if TYPE_CHECKING:  # engine_limiters.py imports this module; its classes are named in Spec["..."] below
    from .chain import ChainedLimiter
    from .engine_limiters import (  # noqa: F401
        ConcurrencyLimiter,
        FixedWindowLimiter,
        SlidingLogLimiter,
        SlidingWindowCounterLimiter,
        SlidingWindowLimiter,
        TokenBucketLimiter,
        _EngineLimiter,
    )

L = TypeVar("L", bound=RateLimiter, covariant=True)
"""The limiter class a spec's ``limiter()`` builds (``TokenBucketLimiter`` for a ``TokenBucket``...)."""
_set = object.__setattr__  # a spec's __init__ sets its slots past its own __setattr__, which refuses


class Spec(Generic[L]):
    """The base of the limit specifications; ``L`` is the limiter class ``limiter()`` builds."""

    __slots__ = ("_key",)
    __match_args__: ClassVar[tuple[str, ...]] = ()
    #: The public attributes a limiter built from the spec copies (its constructor's names).
    _attributes: ClassVar[tuple[str, ...]] = ()
    #: The engine class of the algorithm: the bindings build from the spec by it.
    _engine: ClassVar[type[_core.Limiter]]
    #: The public limiter class; engine_limiters.py sets it where it defines that class.
    _limiter_type: ClassVar[type[_EngineLimiter]]
    #: Whether limiter() takes auto_replenishment.
    _replenishing: ClassVar[bool] = True
    #: What a limiter keeps through reconfigure(): (public name, the attribute compared), the
    #: durations and segments its state counts in; only the amounts may change.
    _timeline: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The limits as integers (durations in ns): what equality and the hash compare.
    _key: tuple[int, ...]
    #: The amounts reconfigure() may change, in the engine's order (the first of ``_key``).
    _amounts: ClassVar[tuple[str, ...]] = ("permit_limit",)

    def limiter(
        self,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
        clock: Any = None,
        **options: object,
    ) -> L:
        """A new limiter of this limit, e.g. ``TokenBucketLimiter`` for a ``TokenBucket``; the
        time-based ones also take ``auto_replenishment=True``."""
        limiter = self._limiter_type.__new__(self._limiter_type)
        limiter._init(self, queue_limit, queue_order, name, clock, options)
        return cast(L, limiter)

    def _with_amounts(self, amounts: tuple[int, ...]) -> Self:
        """This spec with other amounts (a limit another process set), the rest as it is."""
        if amounts == self._key[: len(self._amounts)]:
            return self
        new = copy.copy(self)
        for name, value in zip(self._amounts, amounts, strict=False):
            _set(new, name, value)
        _set(new, "_key", (*amounts[: len(self._amounts)], *self._key[len(self._amounts) :]))
        return new

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: make a new one")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: make a new one")

    # copy and pickle (every protocol): the slots as they are, set back past __setattr__.
    def __getstate__(self) -> dict[str, object]:
        return {name: getattr(self, name) for cls in type(self).__mro__ for name in getattr(cls, "__slots__", ())}

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            _set(self, name, value)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Spec)
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        durations = {"replenishment_period": "_period_ns", "window": "_window_ns"}
        args = ", ".join(
            f"{name}={_seconds(getattr(self, durations[name])) if name in durations else repr(getattr(self, name))}"
            for name in self.__match_args__
        )
        return f"{type(self).__name__}({args})"


def _seconds(ns: int) -> str:
    """A duration as the spec takes it back exactly: the float of seconds that rounds to these
    nanoseconds (beyond 2**53 ns, ns / 1e9 itself may not), else a timedelta."""
    x = ns / 1e9
    for toward in (math.inf, -math.inf):
        candidate = x
        for _ in range(8):
            if round(candidate * 1e9) == ns:
                return repr(candidate)
            candidate = math.nextafter(candidate, toward)
    if ns % 1_000 == 0:
        return f"timedelta(microseconds={ns // 1_000})"
    return repr(x)  # no float or timedelta states it: not made from one


@final
class TokenBucket(Spec["TokenBucketLimiter"]):
    """``token_limit`` tokens; ``tokens_per_period`` come back every ``replenishment_period``."""

    __slots__ = ("_period_ns", "replenishment_period", "token_limit", "tokens_per_period")
    __match_args__ = ("token_limit", "tokens_per_period", "replenishment_period")
    _attributes = __match_args__
    _timeline = (("replenishment_period", "_period_ns"),)
    _amounts = ("token_limit", "tokens_per_period")
    _engine = _core.TokenBucket
    token_limit: int
    """The most tokens the bucket holds: the largest burst."""
    tokens_per_period: int
    """Tokens added back every ``replenishment_period`` (up to ``token_limit``)."""
    replenishment_period: float  # seconds
    """Seconds between refills (a ``timedelta`` given is kept as its seconds)."""
    _period_ns: int

    def __init__(self, token_limit: int, tokens_per_period: int, replenishment_period: Duration) -> None:
        limit = count(token_limit, "token_limit")
        per_period = count(tokens_per_period, "tokens_per_period")
        period_ns = duration_ns(replenishment_period, "replenishment_period")
        _set(self, "token_limit", limit)
        _set(self, "tokens_per_period", per_period)
        _set(self, "replenishment_period", period_ns / 1e9)
        _set(self, "_period_ns", period_ns)
        _set(self, "_key", (limit, per_period, period_ns))


class _Window(Spec[L]):
    """A limit of ``permit_limit`` grants over a ``window`` (the fixed window, the sliding window counter)."""

    __slots__ = ("_window_ns", "permit_limit", "window")
    __match_args__ = ("permit_limit", "window")
    _attributes = (*__match_args__, "replenishment_period")
    _timeline = (("window", "_window_ns"),)
    permit_limit: int
    """The most grants per window."""
    window: float  # seconds
    """The window's length in seconds (a ``timedelta`` given is kept as its seconds)."""
    _window_ns: int

    def __init__(self, permit_limit: int, window: Duration) -> None:
        limit = count(permit_limit, "permit_limit")
        window_ns = duration_ns(window, "window")
        _set(self, "permit_limit", limit)
        _set(self, "window", window_ns / 1e9)
        _set(self, "_window_ns", window_ns)
        _set(self, "_key", (limit, window_ns))

    @property
    def replenishment_period(self) -> float:
        """Seconds: the window."""
        return self.window


@final
class FixedWindow(_Window["FixedWindowLimiter"]):
    """At most ``permit_limit`` grants per window; windows follow each other from the limiter's start."""

    __slots__ = ()
    _engine = _core.FixedWindow


@final
class SlidingWindow(Spec["SlidingWindowLimiter"]):
    """At most ``permit_limit`` grants in any window, which slides by ``window / segments_per_window``."""

    __slots__ = ("_window_ns", "permit_limit", "segments_per_window", "window")
    __match_args__ = ("permit_limit", "window", "segments_per_window")
    _attributes = (*__match_args__, "replenishment_period")
    _timeline = (("window", "_window_ns"), ("segments_per_window", "segments_per_window"))
    _engine = _core.SlidingWindow
    permit_limit: int
    """The most grants in any window."""
    window: float  # seconds
    """The window's length in seconds (a ``timedelta`` given is kept as its seconds)."""
    segments_per_window: int
    """How many segments a window has: it slides one segment at a time."""
    _window_ns: int

    def __init__(self, permit_limit: int, window: Duration, segments_per_window: int) -> None:
        limit = count(permit_limit, "permit_limit")
        window_ns = duration_ns(window, "window")
        n = segments(segments_per_window, window_ns)
        _set(self, "permit_limit", limit)
        _set(self, "window", window_ns / 1e9)
        _set(self, "segments_per_window", n)
        _set(self, "_window_ns", window_ns)
        _set(self, "_key", (limit, window_ns, n))

    @property
    def replenishment_period(self) -> float:
        """Seconds: one segment (whole nanoseconds, as the engine counts it)."""
        return (self._window_ns // self.segments_per_window) / 1e9

    @property
    def _engine_segments(self) -> int:
        return self.segments_per_window


#: The sliding log's segments per window: a permit is held at most 1/32 of the window longer than
#: its own window (an even pace of 32/33 of the rate is never refused), in a per-key record of 280
#: bytes in process and 544 in shared memory.
_LOG_SEGMENTS = 32


@final
class SlidingLog(Spec["SlidingLogLimiter"]):
    """At most ``permit_limit`` grants in any interval of ``window``; a permit comes back one window
    after it was taken (after the latest grant of its 32nd of the window, at most 1/32 later).
    What ``parse()`` makes: ``Retry-After`` never over the window, the whole limit every window."""

    __slots__ = ("_window_ns", "permit_limit", "window")
    __match_args__ = ("permit_limit", "window")
    _attributes = (*__match_args__, "replenishment_period")
    _timeline = (("window", "_window_ns"),)
    _engine = _core.SlidingWindow
    permit_limit: int
    """The most grants in any interval of ``window``."""
    window: float  # seconds
    """The window's length in seconds (a ``timedelta`` given is kept as its seconds)."""
    _window_ns: int

    def __init__(self, permit_limit: int, window: Duration) -> None:
        limit = count(permit_limit, "permit_limit")
        window_ns = duration_ns(window, "window")
        if window_ns < _LOG_SEGMENTS * _LOG_SEGMENTS:
            raise ValueError(f"window must be at least {_LOG_SEGMENTS * _LOG_SEGMENTS} ns, got {window_ns} ns")
        _set(self, "permit_limit", limit)
        _set(self, "window", window_ns / 1e9)
        _set(self, "_window_ns", window_ns)
        _set(self, "_key", (limit, window_ns))

    @property
    def replenishment_period(self) -> float:
        """Seconds: a 32nd of the window (whole nanoseconds, rounded up), how finely it keeps time."""
        return -(-self._window_ns // _LOG_SEGMENTS) / 1e9

    @property
    def _engine_segments(self) -> int:
        return -_LOG_SEGMENTS  # the engine's sliding window keeps the log for segments below zero


@final
class SlidingWindowCounter(_Window["SlidingWindowCounterLimiter"]):
    """Two fixed windows weighted by the elapsed fraction: O(1) state, no boundary burst."""

    __slots__ = ()
    _engine = _core.SlidingWindowCounter


@final
class Concurrency(Spec["ConcurrencyLimiter"]):
    """At most ``permit_limit`` permits held at once; a lease's ``release()`` gives them back."""

    __slots__ = ("permit_limit",)
    __match_args__ = ("permit_limit",)
    _attributes = __match_args__
    _engine = _core.Concurrency
    _replenishing = False
    permit_limit: int
    """The most permits held at once."""

    def __init__(self, permit_limit: int) -> None:
        limit = count(permit_limit, "permit_limit")
        _set(self, "permit_limit", limit)
        _set(self, "_key", (limit,))


@final
class SpecList:
    """Several limits that all hold: ``parse("10/second;1000/day")``, or ``SpecList(spec, spec, ...)``.

    It works wherever a spec does, and what it makes there is a chain (``permits.chain``) of one
    limiter per spec, in its order: ``limiter()`` a ``ChainedLimiter``, ``PartitionedLimiter.per_key``
    a chain of per-key limiters, a store's ``limiter(name, ...)`` a chain of its limiters named
    ``name#0``, ``name#1``... A request is granted only when every limit has room, and a refusal gives
    back what the limits before it granted. Equal, and hashed alike, when their specs are.
    """

    __slots__ = ("specs",)
    specs: tuple[Spec[Any], ...]
    """The limits, in the order they are asked."""

    def __init__(self, *specs: Spec[Any] | SpecList) -> None:
        flat: list[Spec[Any]] = []
        for i, spec in enumerate(specs):
            if isinstance(spec, SpecList):
                flat.extend(spec.specs)
            elif isinstance(spec, Spec):
                flat.append(spec)
            else:
                raise TypeError(f"SpecList() argument {i} must be a permits.specs spec, got {type(spec).__name__}")
        if not flat:
            raise ValueError("SpecList() needs at least one spec")
        _set(self, "specs", tuple(flat))

    def limiter(
        self,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        name: str | None = None,
        clock: Any = None,
        **options: object,
    ) -> ChainedLimiter:
        """A chain of each spec's limiter, every one made with these options and named ``name``."""
        from .chain import chain

        members: list[RateLimiter] = [
            spec.limiter(queue_limit=queue_limit, queue_order=queue_order, name=name, clock=clock, **options)
            for spec in self.specs
        ]
        return chain(*members, name=name)

    def __iter__(self) -> Iterator[Spec[Any]]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __getitem__(self, index: int) -> Spec[Any]:
        return self.specs[index]

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("SpecList is immutable: make a new one")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("SpecList is immutable: make a new one")

    def __getstate__(self) -> dict[str, object]:
        return {"specs": self.specs}

    def __setstate__(self, state: dict[str, object]) -> None:
        _set(self, "specs", state["specs"])

    def __eq__(self, other: object) -> bool:
        if type(other) is not SpecList:
            return NotImplemented
        assert isinstance(other, SpecList)
        return self.specs == other.specs

    def __hash__(self) -> int:
        return hash(("SpecList", self.specs))

    def __repr__(self) -> str:
        return f"SpecList({', '.join(map(repr, self.specs))})"


_DAY_NS = 86_400_000_000_000
# Units as limits, slowapi, Django REST framework and django-ratelimit users write them: "m" is a
# minute, as in those libraries; a month is 30 days and a year 12 such months, as limits counts them.
_UNIT_NS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1_000_000_000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000_000_000),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3_600_000_000_000),
    **dict.fromkeys(("d", "day", "days"), _DAY_NS),
    **dict.fromkeys(("mo", "month", "months"), 30 * _DAY_NS),
    **dict.fromkeys(("y", "yr", "yrs", "year", "years"), 360 * _DAY_NS),
}
_RATE = re.compile(r"\s*([0-9]+)\s*(?:/|per\b)\s*([0-9]+)?\s*([a-z]+)\s*", re.IGNORECASE)
_SEPARATORS = re.compile(r"[;,|]")


def parse(text: str) -> SlidingLog | SpecList:
    """The spec of a rate as people write it: ``"10/second"``, ``"10 per second"``, ``"100/minute"``,
    ``"5/2 seconds"``, ``"1000/day"`` (a count, ``/`` or ``per``, an optional multiplier, and a unit:
    second, minute, hour, day, month (30 days) or year (360 days, as ``limits`` counts it), singular
    or plural, any case; or short: ``s``/``sec``, ``m``/``min``, ``h``/``hr``, ``d``, ``mo``, ``y``,
    as in ``"5/m"``, ``"100/10m"``, ``"10/sec"``, ``"100/hr"``). Several rates joined by ``;``, ``,``
    or ``|`` (``"10/second;1000/day"``, as ``limits``, Django REST framework and django-ratelimit
    users write them) make a ``SpecList``: every rate holds.

    One rate is a ``SlidingLog`` of the count over the interval: never more than the count in any
    interval of that length (``"10/second"``: at most 10 in any second, wherever the second
    starts), whatever algorithm a server enforcing the same rate uses. That is counted when the
    permits are granted: a server counts arrivals, which the network shifts by a varying delay, so
    a client keeps a margin below the server's limit or retries (docs/clients.md, "What a server
    sees"). A permit comes back one interval after it was taken, so a refusal's ``retry_after``
    is never longer than the interval, and a job that waits for each permit gets the whole count
    every interval. A ``FixedWindow`` or a ``TokenBucket`` of the same numbers does not promise that:
    either can grant the count at the end of one window (or from a full bucket) and the count again
    just after, twice the count in a moment. Malformed text raises ``ValueError`` quoting it.
    """
    if not isinstance(text, str):
        raise TypeError(f"rate must be a str such as '10/second', got {type(text).__name__}")
    pieces = _SEPARATORS.split(text)
    if len(pieces) == 1:
        return _one_rate(text, text)
    return SpecList(*(_one_rate(piece, text) for piece in pieces))


def _one_rate(piece: str, text: str) -> SlidingLog:
    found = _RATE.fullmatch(piece)
    unit_ns = None if found is None else _UNIT_NS.get(found.group(3).lower())
    if found is None or unit_ns is None:
        shown = repr(text) if piece == text else f"{piece!r} in {text!r}"
        raise ValueError(f"not a rate: {shown} (write e.g. '10/second', '10 per minute' or '5/2 seconds')")
    amount, multiplier, _ = found.groups()
    interval_ns = int(multiplier or 1) * unit_ns
    try:
        if interval_ns == 0:
            raise ValueError("the interval must be longer than 0")
        return SlidingLog(int(amount), timedelta(microseconds=interval_ns // 1_000))
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not a usable rate: {text!r}: {exc}") from None


__all__ = [
    "Concurrency",
    "FixedWindow",
    "SlidingLog",
    "SlidingWindow",
    "SlidingWindowCounter",
    "Spec",
    "SpecList",
    "TokenBucket",
    "parse",
]
