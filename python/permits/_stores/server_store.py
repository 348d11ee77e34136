"""ServerStore: what RedisStore and PostgresStore share: checking their options, making their
limiters (named, or one per key), giving permits back, closing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from .. import specs
from .._core import LimiterClosedError
from .._durations import Duration, duration_ns
from ..chain import ChainedPartitionedLimiter, chain
from ..clock import ManualClock, resolve
from ..engine_limiters import _queue_limit, _queue_order
from ..errors import BackendError
from ..partition import Partition, _check_options, _members, _template_of
from ..partitioned import PartitionedLimiter
from ..rate_limiter import QueueOrder, RateLimiter
from .factories import StoreFactories, member_name, spec_of
from .followed_rules import RuleBook
from .renewal import Renewal
from .reserving import ReservingLimiter
from .rules import Rule, rule_of
from .store_keyed import StoreKeyed
from .store_limiter import ON_ERROR, UNBOUNDED, StoreLimiter

_log = logging.getLogger("permits")


def check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    if not 0 < timeout <= 3600:
        raise ValueError(f"timeout must be more than 0 and at most 3600 seconds, got {timeout!r}")
    return float(timeout)


class ServerStore(StoreFactories):
    """Limiters whose state is in a server. Subclasses set up ``self._backend`` and call
    ``_setup``."""

    _backend: Any
    timeout: float

    def _setup(self, on_error: object, clock: object) -> None:
        if not isinstance(on_error, str) or on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {on_error!r}")
        if clock is not None and not isinstance(clock, ManualClock):
            raise TypeError(f"clock must be a permits.ManualClock or None, got {type(clock).__name__}")
        self.on_error = on_error
        self.clock = clock
        #: The clock the steps pass to the server (tests: a ManualClock); None: the server's own.
        self._time = clock
        #: The clock waits pause on: the test's, else this host's monotonic clock.
        self._pause_clock = resolve(clock)
        self._renewal = Renewal(self._backend, lambda: None if clock is None else clock.now_ns())
        self._limiters: weakref.WeakSet[Any] = weakref.WeakSet()
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()
        self._rules = RuleBook(self, self._backend)

    def _check_open(self) -> None:
        if self._closed:
            raise LimiterClosedError(f"the store {self!r} is closed")

    def _housekeep(self) -> None:
        """The store is in use: its background housekeeping (if any) runs. Called when a limiter is
        made, and by each asyncio step (a task needs the running loop)."""
        self._rules.poke()

    def limiter(
        self,
        name: str,
        spec: specs.Spec[Any] | specs.SpecList | str,
        *,
        queue_limit: int | None = None,
        queue_order: QueueOrder = QueueOrder.OLDEST_FIRST,
        lease_ttl: Duration = 60.0,
    ) -> RateLimiter:
        """The limiter whose state is ``name`` on the server, of ``spec`` (or a rate such as "10/second").
        Several limits (a ``SpecList``, "10/second;1000/day") make a chain of one limiter each, their
        states named ``name#0``, ``name#1``..."""
        self._check_open()
        _check_name(name)
        spec = spec_of(spec, "spec")
        if isinstance(spec, specs.SpecList):
            options = {"queue_limit": queue_limit, "queue_order": queue_order, "lease_ttl": lease_ttl}
            members = [self.limiter(member_name(name, i), one, **options) for i, one in enumerate(spec)]  # type: ignore[arg-type]
            return chain(*members, name=name)
        ql = _queue_limit(queue_limit)
        newest = _queue_order(queue_order)
        ttl = duration_ns(lease_ttl, "lease_ttl")
        return self._make(name, name, spec, ql, newest, ttl)

    def _make(
        self, name: str, state: str | bytes, spec: specs.Spec[Any], ql: int | None, newest: bool, ttl: int
    ) -> StoreLimiter:
        rule = rule_of(spec, ttl if isinstance(spec, specs.Concurrency) else 0)
        # A store with reserve (RedisStore) serves time-based permits from batches; a concurrency
        # lease is its holder's: asked for every time.
        kind = ReservingLimiter if getattr(self, "reserve", None) and rule.timed else StoreLimiter
        limiter = kind(self, name, state, rule, spec, UNBOUNDED if ql is None else ql, newest)
        self._limiters.add(limiter)
        self._rules.known(limiter)  # (its name's changed limit, if this process has read it)
        self._housekeep()
        return limiter

    def partitioned(
        self,
        template: Partition | specs.Spec[Any] | specs.SpecList | str,
        *,
        name: str,
        max_partitions: int | None = None,
        idle_timeout: Duration = 10.0,
        lease_ttl: Duration = 60.0,
    ) -> PartitionedLimiter | ChainedPartitionedLimiter:
        """A limit per key (a ``permits.KeyedRateLimiter``): every key's state is on the server
        (the name, then the key); this process keeps a limiter per key it uses (at most
        ``max_partitions``) and forgets one idle for ``idle_timeout`` seconds. Several limits (a
        ``SpecList``) make a chain of one such limiter each, named ``name#0``, ``name#1``..."""
        self._check_open()
        _check_options(max_partitions, name)
        _check_name(name)
        partition = _template_of(spec_of(template, "template") if isinstance(template, str) else template)
        if isinstance(partition.spec, specs.SpecList):
            options = {"max_partitions": max_partitions, "idle_timeout": idle_timeout, "lease_ttl": lease_ttl}
            each = [
                self.partitioned(member, name=member_name(name, i), **options)  # type: ignore[arg-type]
                for i, member in enumerate(_members(partition))
            ]
            return chain(*each, name=name)
        if partition.spec is None:
            raise TypeError(f"a store keeps state for specs only, not for {partition!r}")
        queue_limit, queue_order, _ = partition._options
        queue = (_queue_limit(queue_limit), _queue_order(queue_order))
        ttl = duration_ns(lease_ttl, "lease_ttl")
        idle = duration_ns(idle_timeout, "idle_timeout", allow_zero=True) / 1e9
        keyed = StoreKeyed(self, name, partition.spec, queue, ttl, idle_timeout=idle, max_partitions=max_partitions)
        self._limiters.add(keyed)
        self._rules.known(keyed)
        return keyed

    # ---- permits coming back ----
    def _give_back(self, limiter: StoreLimiter, n: int, stamp: int, lid: str | None, *, unused: bool = False) -> None:
        """A release or refund on the server: done when it returns, but with an asyncio client
        (then in a task of the running loop). When the server cannot be reached, a concurrency
        lease comes back by itself ``lease_ttl`` later. ``unused``: permits of a batch never used
        (a reserving limiter's stock), given back wherever they still weigh (``give_back_unused``)."""
        backend, now = self._backend, limiter._now()
        loop = _running_loop()
        if _answers_here(backend, loop):
            with contextlib.suppress(BackendError):
                if unused:
                    backend.give_back_unused(limiter._state, limiter._rule, n, stamp, now)
                else:
                    backend.refund(limiter._state, limiter._rule, n, stamp, lid, now)
            return
        if loop is None:
            return  # an asyncio client, outside any loop: the lease expires on the server
        if unused:
            step = backend.give_back_unused_async(limiter._state, limiter._rule, n, stamp, now)
        else:
            step = backend.refund_async(limiter._state, limiter._rule, n, stamp, lid, now)
        task = loop.create_task(_quietly(step))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _change_limit(self, owner: Any, new: Rule, after: Callable[[], None]) -> None:
        """``reconfigure``: ``new`` recorded on the server as the limit of ``owner``'s name (a limiter
        or a per-key limiter), taken on by every process, this one at once; then ``after()`` (the
        queue options). With a sync client done when it returns (a server that fails raises
        ``BackendError``, and nothing changes); with an asyncio client, the queue options now and the
        limit in a task of the running loop (logged if it fails)."""
        backend, book = self._backend, self._rules
        loop = _running_loop()
        if _answers_here(backend, loop):
            book.learn(owner)
            if book.unchanged(owner.name) and (probe := owner._probe()) is not None:
                probe._backend.available(probe._state, probe._rule, probe._now())  # (see _probe)
            base = book.base(owner.name, owner._rule)
            book.published(owner.name, backend.publish_rule(owner.name, base, new.own_signature))
            after()
            return
        if loop is None:
            raise TypeError("a store with an asyncio client changes a limit from a running event loop")
        after()
        task = loop.create_task(self._publishing(owner, new))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _publishing(self, owner: Any, new: Rule) -> None:
        backend, book = self._backend, self._rules
        try:
            await book.learn_async(owner)
            if book.unchanged(owner.name) and (probe := owner._probe()) is not None:
                await probe._backend.available_async(probe._state, probe._rule, probe._now())
            base = book.base(owner.name, owner._rule)
            book.published(owner.name, await backend.publish_rule_async(owner.name, base, new.own_signature))
        except (BackendError, ValueError):
            _log.warning("the new limit of %r did not reach the server: it is unchanged", owner.name, exc_info=True)

    def _reset(self, state: str | bytes, rule: Any, name: str, after: Callable[[], object]) -> None:
        """A key's time-based state forgotten on the server, for every process, then ``after()``:
        done when it returns with a sync client (a server that fails raises ``BackendError``); with an
        asyncio client, in a task of the running loop (a sync call must not block it), whose failure
        is logged."""
        if not rule.timed:
            return  # a concurrency limit's permits are its held leases: they stay held
        backend = self._backend
        loop = _running_loop()
        if _answers_here(backend, loop):
            backend.reset(state, rule)
            after()
            return
        if loop is None:
            raise TypeError("a store with an asyncio client resets a key from a running event loop")
        task = loop.create_task(_logged(backend.reset_async(state, rule), name, after))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def close(self) -> None:
        """Closes the limiters this store made in this process (their waits end with reason
        "closed") and stops renewing their leases; the server's state stays."""
        if self._closed:
            return
        self._closed = True
        self._renewal.stop()
        self._rules.stop()
        for limiter in list(self._limiters):
            limiter.close()
        self._backend.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Any:
        return self

    async def aclose(self) -> None:
        """As ``close``, after the releases and refunds still on their way in tasks of this
        loop have landed: the loop may end right after (``asyncio.run`` cancels the tasks left),
        and a lost release would keep its permits taken until the lease's ttl. Each is bounded by
        the store's timeout already."""
        loop = asyncio.get_running_loop()
        pending = [task for task in self._background if task.get_loop() is loop]
        if pending:
            await asyncio.wait(pending, timeout=self.timeout)
        self.close()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("name must not be empty")
    if "\x00" in name:
        # NUL separates a per-key limiter's name from its keys: "a\x00..." could be a key of "a".
        raise ValueError(f"name must not contain NUL ('\\x00'), got {name[:80]!r}")


def _answers_here(backend: Any, loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether a call to the server is made here and now, blocking: a sync client's always (even
    inside a loop), a client serving both kinds (a PostgreSQL conninfo) outside a loop; else it is
    sent from a task of the running loop (never a blocking call on a loop's thread)."""
    return backend.is_async is False or (backend.is_async is None and loop is None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    return asyncio._get_running_loop()


async def _logged(step: Any, name: str, after: Callable[[], object]) -> None:
    try:
        await step
    except BackendError:
        _log.warning("the reset of a key of limiter %r did not reach the server", name, exc_info=True)
    else:
        after()


async def _quietly(step: Any) -> None:
    with contextlib.suppress(BackendError):
        await step
