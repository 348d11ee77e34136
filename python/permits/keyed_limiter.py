"""KeyedRateLimiter: the interface of every limiter that keeps a limit per resource (key), and
what a custom keyed limiter written in Python subclasses."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from . import _polling
from ._core import Lease
from ._durations import timeout_ns
from ._limiter_base import LimiterBase
from ._loop_check import blocks_the_loop
from .awaitables import Attempt, LeaseWait, PolledLeaseWait
from .rate_limiter import QueueOrder, Statistics, _check_permit_count

if TYPE_CHECKING:
    from .specs import Spec
    from .translated import TranslatedKeyLimiter

# A keyed limiter has no permit without a key; what a user of ``with limiter:`` means is one key's.
_WITH_NEEDS_A_KEY = "a keyed limiter needs a key: use `with keyed.wait(key):` or `async with keyed.wait_async(key):`"


class KeyedRateLimiter(LimiterBase):
    """The interface of every keyed limiter: the members of ``RateLimiter``, each taking
    the resource first.

    A custom keyed limiter subclasses it, calls ``super().__init__()`` and implements
    ``_acquire(resource, permit_count) -> Lease``; optionally ``_acquire_async``,
    ``_wait_async``, ``_statistics(resource)`` (``resource`` None: the totals) and
    ``_on_outcome(resource, lease)`` (to count per resource). The public members validate their
    arguments, then call these hooks.
    """

    _rl_keyed = True

    # ---- hooks for custom keyed limiters ----
    def _acquire(self, resource: object, permit_count: int) -> Lease:
        raise NotImplementedError(f"{type(self).__name__} must implement _acquire(resource, permit_count)")

    async def _acquire_async(self, resource: object, permit_count: int) -> Lease:
        """The attempt of ``acquire_async``; by default ``_acquire``'s."""
        return self._acquire(resource, permit_count)

    async def _wait_async(self, resource: object, permit_count: int) -> Lease:
        # As RateLimiter's: ask, pause for retry_after (or a short pause), ask again.
        async def attempt() -> Lease:
            return self._rl_checked(await self._acquire_async(resource, permit_count), permit_count, "_acquire_async")

        return await _polling.wait_async(attempt, lambda: self._rl_closed, permit_count, self._rl_clock)

    def _try_now(self, resource: object, permit_count: int) -> Lease | None:
        """A wait's immediate grant, made without an event loop; None sends it to ``_wait_async``."""
        return None

    def _on_outcome(self, resource: object, lease: Lease) -> None:
        """Called with every outcome that counts in the statistics (a grant, or a failure that is
        not a timeout or a close; not the attempts of a polling wait): where a custom keyed limiter
        counts per resource."""

    def _reset(self, resource: object) -> None:
        """What ``reset(resource)`` does: a custom keyed limiter that can forget a key overrides it."""
        raise NotImplementedError(f"{type(self).__name__} cannot reset a key: it implements no _reset(resource)")

    def _statistics(self, resource: object) -> Statistics:
        """Without an override: the counts of successful and failed leases over every resource."""
        if resource is None:
            return Statistics(0, 0, self._rl_tally.granted, self._rl_tally.refused)
        return Statistics(0, 0, 0, 0)

    # ---- the public API ----
    def _rl_count(self, lease: Lease, resource: object) -> Lease:
        if lease or _polling.counts(lease):
            if lease:
                self._rl_tally.grant()
            else:
                self._rl_tally.refuse()
            try:
                self._on_outcome(resource, lease)
            except BaseException:
                if lease:
                    lease._refund()  # nobody will have the grant: it goes back before the error
                raise
        return lease

    def _rl_counted(self, lease: object, permit_count: int, resource: object, hook: str = "_acquire") -> Lease:
        return self._rl_count(self._rl_checked(lease, permit_count, hook), resource)

    def _rl_waited(self, lease: object, permit_count: int, resource: object) -> Lease:
        """The outcome of a wait_async, whichever hook made it: checked, counted once."""
        return self._rl_counted(lease, permit_count, resource, "_wait_async")

    def acquire(self, resource: object, permit_count: int = 1) -> Lease:
        """Takes permits for ``resource`` now or returns a failed lease; never blocks."""
        n = _check_permit_count(permit_count)
        self._check_open()
        return self._rl_counted(self._acquire(resource, n), n, resource)

    def acquire_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """The same attempt as ``acquire``, as an awaitable asking through ``_acquire_async``."""
        n = _check_permit_count(permit_count)
        self._check_open()

        async def attempt() -> Lease:
            self._check_open()
            return self._rl_counted(await self._acquire_async(resource, n), n, resource, "_acquire_async")

        return Attempt(attempt)

    def wait(self, resource: object, permit_count: int = 1, timeout: float | None = None) -> Lease:
        """Blocks until acquired, rejected, timed out (reason "timeout") or closed."""
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        limit = timeout_ns(timeout)
        self._check_open()
        attempt = lambda: self._rl_checked(self._acquire(resource, n), n)  # noqa: E731
        # (checked again: the wait's own "timeout" or "closed" names this limiter too)
        waited = _polling.wait(attempt, lambda: self._rl_closed, n, limit, self._rl_clock)
        return self._rl_counted(waited, n, resource, "wait")

    def wait_async(self, resource: object, permit_count: int = 1) -> LeaseWait:
        """Waits for ``resource``'s permits (asyncio or trio); also an async context manager."""
        n = _check_permit_count(permit_count)
        self._check_open()
        return PolledLeaseWait(_OneResource(self, resource), n)

    def _rl_block_wait(self) -> Lease:
        raise TypeError(f"{_WITH_NEEDS_A_KEY} (with {type(self).__name__})")

    async def _rl_block_wait_async(self) -> Lease:
        raise TypeError(f"{_WITH_NEEDS_A_KEY} (async with {type(self).__name__})")

    def available_permits(self, resource: object) -> int:
        """The permits a request for ``resource`` could take now: its ``current_available_permits``."""
        return self.statistics(resource).current_available_permits

    def statistics(self, resource: object = None) -> Statistics:
        """One resource's statistics, or with no resource the totals."""
        self._check_open()
        return self._statistics(resource)

    def reconfigure(
        self,
        spec: Spec[Any] | str,
        *,
        queue_limit: int | EllipsisType | None = ...,
        queue_order: QueueOrder | EllipsisType = ...,
    ) -> None:
        """Makes ``spec`` every key's limit from now on, present keys and future ones, as
        ``RateLimiter.reconfigure`` does for one limiter: each key keeps what it has taken (a lower
        limit holds as its permits come back) and its queued requests, served from the new limit; the
        queue options change too (``...``: as they are), a key's queue beyond a new ``queue_limit``
        failing its requests served last with ``"queue_full"``. ``spec`` (or a rate such as
        "10/second") is of the limiter's kind, with its window (period, segments): ``TypeError`` or
        ``ValueError`` otherwise. Raises
        ``LimiterClosedError`` once closed; ``NotImplementedError`` for a keyed limiter that cannot
        change (a custom one without ``_reconfigure``)."""
        self._check_open()
        self._reconfigure(self._spec_given(spec), queue_limit, queue_order)

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        """What ``reconfigure`` does: a custom keyed limiter whose limit can change overrides it."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot be reconfigured: "
            "it implements no _reconfigure(spec, queue_limit, queue_order)"
        )

    def reset(self, resource: object) -> None:
        """Forgets what ``resource``'s limit has counted (support staff unblocking a user): its whole
        limit is available from now, and requests queued for it are served from it. A refund of a
        lease granted before gives nothing back. A concurrency limit's permits are those its leases
        hold: they stay held until released. The key's statistics (its counts) stay. Raises
        ``LimiterClosedError`` once closed."""
        self._check_open()
        self._reset(resource)

    @property
    def partition_count(self) -> int:
        """Live partitions (per-key states); 0 for a limiter that keeps none."""
        return 0

    def evict_idle(self) -> int:
        """Evicts the partitions idle for longer than the idle timeout; returns how many."""
        return 0

    def with_translated_key(self, translate: Callable[[Any], object]) -> TranslatedKeyLimiter:
        """This limiter's state seen through a key mapping: a keyed limiter whose every call asks
        this one for ``translate(resource)`` (``users.with_translated_key(str.casefold)``: "Alice"
        and "alice" share one limit). Closing it closes the view only; raises
        ``LimiterClosedError`` once this limiter is closed."""
        from .translated import TranslatedKeyLimiter

        self._check_open()
        return TranslatedKeyLimiter(self, translate)


class _OneResource:
    """One resource of a keyed limiter, seen as a limiter by PolledLeaseWait."""

    __slots__ = ("_owner", "_resource")

    def __init__(self, owner: KeyedRateLimiter, resource: object) -> None:
        self._owner = owner
        self._resource = resource

    def _try_now(self, permit_count: int) -> Lease | None:
        return self._owner._try_now(self._resource, permit_count)

    def _wait_async(self, permit_count: int) -> Coroutine[Any, Any, Lease]:
        return self._owner._wait_async(self._resource, permit_count)

    def _rl_waited(self, lease: object, permit_count: int) -> Lease:
        return self._owner._rl_waited(lease, permit_count, self._resource)

    @property
    def _rl_closed(self) -> bool:
        return self._owner._rl_closed


__all__ = ["KeyedRateLimiter"]
