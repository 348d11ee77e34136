"""StoreLimiter: a limiter whose permits live in a server (Redis, PostgreSQL), with the members
and leases of every ``permits.RateLimiter``.

Each attempt is one step on the server (``permits._stores.backend``); waits queue in this
process (``permits._stores.local_queue``) and the head of the queue asks again when the server's
``retry_after`` is up, when permits come back in this process, or (concurrency, whose refusals
have no ``retry_after``) after a pause growing from 5 ms to 0.5 s. ``on_error`` decides what an
attempt returns when the server cannot be reached in time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import time
from typing import Any

from .. import _pausing, _polling
from .._core import Clock, Lease
from .._durations import timeout_ns
from .._loop_check import blocks_the_loop
from ..awaitables import Attempt, LeaseWait, PolledLeaseWait
from ..engine_limiters import _check_reconfigured, _reconfigured_queue
from ..errors import BackendError
from ..rate_limiter import RateLimiter, Statistics, _check_permit_count
from .backend import Backend, Outcome
from .local_queue import Entry, LocalQueue
from .rules import Record, Rule, rule_of
from .store_leases import Grant, _Held, lease_id

logger = logging.getLogger("permits")

ON_ERROR = ("raise", "deny", "allow")
UNBOUNDED = 2**63 - 1  # a queue_limit of None
#: Pauses of a queue's head between attempts when the server gives no retry_after (concurrency).
FIRST_POLL, LAST_POLL = 0.005, 0.5

_steps: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _step_threads() -> concurrent.futures.ThreadPoolExecutor:
    """The threads a wait asks the server from when its deadline comes before the store's timeout
    (a forked child makes its own: its parent's threads do not exist in it)."""
    global _steps
    if _steps is None or _steps[0] != os.getpid():
        _steps = (os.getpid(), concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="permits-store-step"))
    return _steps[1]


class StoreLimiter(RateLimiter):
    """A limiter of a store (``RedisStore``, ``PostgresStore``): see the store's ``limiter()``."""

    def __init__(
        self,
        store: Any,
        name: str,
        state: str | bytes,
        rule: Rule,
        spec: object,
        queue_limit: int,
        newest: bool,
    ) -> None:
        super().__init__(name=name, clock=store._pause_clock)
        self.store = store
        self.spec = spec
        self._rule = rule
        self._state = state
        self._backend: Backend = store._backend
        self._on_error: str = store.on_error
        self._degraded = False  # (logged once when the server fails, again after it has answered)
        self._time: Clock | None = store._time  # a ManualClock in tests; None: the server's time
        self._queue = LocalQueue(queue_limit, newest)
        self._seen = rule.limit  # the available permits the server reported last
        #: Concurrency leases granted and not yet released: their ids, kept alive on the server.
        self.held: dict[str, int] = {}
        self._held_pid = os.getpid()  # a forked child starts with none of them (its copies are the parent's)
        #: Leases the server forgot and the limit did not let take back (their release gives nothing).
        self._lost: set[str] = set()
        self._idle_since: int | None = self._rl_clock.now_ns()
        self._next_ask: int | None = None  # when (pause clock) the queue's head asks again
        for attribute in getattr(spec, "_attributes", ()):
            setattr(self, attribute, getattr(spec, attribute))
        if rule.kind == "concurrency":
            self.lease_ttl = rule.lease_ttl_ns / 1e9
        #: The generation of its name's record this limiter follows (followed_rules): -1 before its
        #: first step has read it, 0 when the limit was never changed.
        self._gen = -1
        #: acquire() takes its short way (below): a time-based kind, asked of the server each time,
        #: once its name's record is known.
        self._direct = False

    def acquire(self, permit_count: int = 1) -> Lease:
        """As every limiter's (``RateLimiter.acquire``); a time-based limiter's grant, nothing queued,
        takes the short way here: the same step and lease, with fewer calls on the way (each
        acquisition is a round trip already)."""
        n = permit_count
        rule = self._rule  # (one rule for the whole step: another process may change it meanwhile)
        if n.__class__ is not int or not 0 < n <= rule.limit or not self._direct or self._rl_closed:
            return super().acquire(permit_count)
        if self._queue._entries and not self._queue.newest:
            return super().acquire(permit_count)
        clock = self._time
        try:
            out = self._backend.take(self._state, rule, n, None, None if clock is None else clock.now_ns())
        except BackendError as error:
            return self._rl_counted(self._failed(error, n), n)
        lease = self._lease_of(out, n, None)
        if not out.granted:
            return self._rl_counted(lease, n)
        self._rl_tally.grant()  # (a grant made here needs none of _rl_counted's checks)
        return lease

    def acquire_async(self, permit_count: int = 1) -> LeaseWait:
        """As every limiter's; with an asyncio client, a time-based limiter's attempt asks the server
        in one coroutine of its own (the same step, lease and cancellation as ``_take_async``)."""
        n = permit_count
        if n.__class__ is not int or not 0 < n <= self._rule.limit or self._backend.is_async is not True:
            return super().acquire_async(permit_count)
        if not self._rule.timed or type(self) is not StoreLimiter:
            return super().acquire_async(permit_count)
        self._check_open()
        return Attempt(lambda: self._attempt_async(n))

    async def _attempt_async(self, n: int) -> Lease:
        self._check_open()
        queue = self._queue
        if queue._entries and not queue.newest:
            return self._rl_counted(self._behind_queue(n), n, "_acquire_async")
        self.store._housekeep()
        if self._gen < 0:
            try:
                await self._learn_async()
            except BackendError as error:
                return self._rl_counted(self._failed(error, n), n, "_acquire_async")
        rule = self._rule
        if n > rule.limit:
            return self._rl_counted(self._over_limit(n), n, "_acquire_async")
        clock = self._time
        # (cancelled while the server decides: a grant made meanwhile goes back, as in _take_async)
        answer = self._backend.take_soon(
            self._state, rule, n, None, None if clock is None else clock.now_ns(), self._undone
        )
        try:
            out = await answer
        except BackendError as error:
            return self._rl_counted(self._failed(error, n), n, "_acquire_async")
        lease = self._lease_of(out, n, None)
        if not out.granted:
            return self._rl_counted(lease, n, "_acquire_async")
        self._rl_tally.grant()
        return lease

    # ---- a changed limit (followed_rules) ----
    def _take_on(self, record: Record | None) -> None:
        """The record of this limiter's name, as read or published: a newer limit is taken on."""
        gen = 0 if record is None else record.gen
        if gen != self._gen:
            rule = None if record is None else self._rule.with_amounts_of(record.sig, record.base)
            if rule is not None and rule != self._rule:
                self._change_rule(rule)
            self._gen = gen
        self._direct = self._rule.timed and type(self) is StoreLimiter and self._backend.is_async is not True

    def _change_rule(self, rule: Rule) -> None:
        """The steps count with ``rule`` from now on; the attributes say it; queued requests it can
        never serve fail ``limit_reached`` and the queue's head asks again."""
        spec = self.spec._with_amounts(rule.amounts)  # type: ignore[attr-defined]
        self._rule, self.spec = rule, spec
        for attribute in getattr(spec, "_attributes", ()):
            setattr(self, attribute, getattr(spec, attribute))
        self._queue.refuse_over(rule.limit)
        self._queue.changed()

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        """``reconfigure``: the new limit is recorded on the server, for every process, then taken
        on here; the queue options are this process's (its queue is)."""
        self._check_open()
        _check_reconfigured(self.spec, spec)  # type: ignore[arg-type]
        queue = self._queue
        current = (None if queue.limit >= UNBOUNDED else queue.limit, queue.newest)
        limit, newest = _reconfigured_queue(current, queue_limit, queue_order)
        new = rule_of(spec, self._rule.lease_ttl_ns)  # type: ignore[arg-type]
        self.store._change_limit(self, new, lambda: queue.reconfigure(UNBOUNDED if limit is None else limit, newest))

    def _probe(self) -> StoreLimiter:
        """The limiter whose state a first change reads with this process's rule: a name's first
        change records the signature the states were made with as its base, so a process configured
        with another limit than theirs is refused (ValueError), as its steps are, and records
        nothing (every other process would then be refused)."""
        return self

    def _learn(self) -> None:
        """Before the first step: the record of its name (raises ``BackendError``)."""
        if self._gen < 0:
            self.store._rules.learn(self)

    async def _learn_async(self) -> None:
        if self._gen < 0:
            await self.store._rules.learn_async(self)

    def _rl_forget(self) -> None:
        """The key's state was reset: what this process kept of it goes, and its queue asks again."""
        if not self._rule.timed:
            return  # (a concurrency key's held leases stay held)
        self._seen = self._rule.limit
        self._queue.changed()

    # ---- one step on the server ----
    def _now(self) -> int | None:
        return None if self._time is None else self._time.now_ns()

    def _check_count(self, n: int) -> None:
        if n > self._rule.limit:
            raise ValueError(f"permit_count {n} exceeds the limiter's limit of {self._rule.limit}")

    def held_here(self) -> dict[str, int]:
        """``held``, emptied first in a forked child (its parent's leases are the parent's to renew)."""
        if self._held_pid != os.getpid():
            self._held_pid = os.getpid()
            self.held = {}
            self._lost = set()
        return self.held

    def _lease_of(self, out: Outcome, n: int, lid: str | None) -> Lease:
        self._degraded = False
        self._seen = out.available
        if not self.held:
            self._idle_since = self._rl_clock.now_ns()
        if not out.granted:
            retry = None if out.retry_after_ns < 0 else out.retry_after_ns / 1e9
            return Lease.denied("limit_reached", retry_after=retry)._with_permit_count(n)
        if n == 0:
            return Lease.granted(0)
        if lid is None:
            stamp = out.stamp
            grant = Grant(n, lambda back: self._give_back(back, stamp, None))
            return Lease.granted(n, on_refund=grant.refund, on_settle=grant.settle)
        self.held_here()[lid] = n
        self._idle_since = None
        self.store._renewal.watch(self)
        held = _Held(self, lid, n)
        return Lease.granted(
            n, on_release=held.release, on_refund=held.release, lost=held.is_lost, on_settle=held.settle
        )

    def _failed(self, error: BackendError, n: int) -> Lease:
        if self._on_error != "raise" and not self._degraded:
            self._degraded = True
            logger.warning(
                "the store of limiter %r failed (%s): on_error=%r until it answers again",
                self.name,
                error,
                self._on_error,
            )
        if self._on_error == "deny":
            return Lease.denied("backend_unavailable", metadata={"error": str(error)})._with_permit_count(n)
        if self._on_error == "allow":
            return Lease.granted(n, metadata={"degraded": True})
        raise error

    def _take(self, n: int) -> Lease:
        if self._backend.is_async is True:
            raise TypeError(
                f"the limiter {self.name!r} is of a store with an asyncio client: use acquire_async() or "
                "wait_async() (or give the store a sync client)"
            )
        lid = lease_id() if self._rule.kind == "concurrency" and n else None
        try:
            out = self._learned_take(n, lid)
        except BackendError as error:
            return self._failed(error, n)
        return out if isinstance(out, Lease) else self._lease_of(out, n, lid)

    def _learned_take(self, n: int, lid: str | None) -> Outcome | Lease:
        """One take (here, or from a step thread): its name's record first, if not known yet; a
        request over a limit lowered meanwhile is refused without asking."""
        self._learn()
        rule = self._rule
        if n > rule.limit:
            return self._over_limit(n)
        return self._backend.take(self._state, rule, n, lid, self._now())

    @staticmethod
    def _over_limit(n: int) -> Lease:
        """A request the limit (changed since it was made) can never grant."""
        return Lease.denied("limit_reached")._with_permit_count(n)

    def _take_by(self, n: int, deadline: int | None) -> Lease:
        """A wait's take, ended by the wait's deadline (on the real clock) even when the server
        hangs: asked from a thread when the deadline comes before the store's timeout; a grant that
        lands after the deadline is given back."""
        if deadline is None or self._time is not None or self._backend.is_async is True:
            return self._take(n)
        left = (deadline - self._rl_clock.now_ns()) / 1e9
        if left >= self.store.timeout:
            return self._take(n)
        if left <= 0:
            return _polling.timed_out(n)
        lid = lease_id() if self._rule.kind == "concurrency" and n else None
        step = _step_threads().submit(self._learned_take, n, lid)
        try:
            out = step.result(timeout=left)
        except concurrent.futures.TimeoutError:
            step.add_done_callback(lambda done: self._undo(done, n, lid))
            return _polling.timed_out(n)
        except BackendError as error:
            return self._failed(error, n)
        if isinstance(out, Lease):
            return out
        return self._lease_of(out, n, lid)

    async def _take_async(self, n: int) -> Lease:
        loop = asyncio._get_running_loop()
        backend = self._backend
        if loop is None or backend.is_async is False:
            # A sync client asks from the loop's thread (one round trip, at most the store's
            # timeout): the request is decided, or queued, before the wait first suspends.
            return self._take(n)
        self.store._housekeep()
        try:
            await self._learn_async()
        except BackendError as error:
            return self._failed(error, n)
        rule = self._rule
        if n > rule.limit:
            return self._over_limit(n)
        lid = lease_id() if rule.kind == "concurrency" and n else None
        # Cancelled while the server decides: a grant made meanwhile goes back (_undone), never leaks.
        answer = backend.take_soon(self._state, rule, n, lid, self._now(), self._undone)
        try:
            out = await answer
        except BackendError as error:
            return self._failed(error, n)
        return self._lease_of(out, n, lid)

    def _undo(
        self,
        step: asyncio.Future[Outcome | None] | concurrent.futures.Future[Outcome | Lease],
        n: int,
        lid: str | None,
    ) -> None:
        if step.cancelled() or step.exception() is not None:
            return
        out = step.result()
        if isinstance(out, Outcome) and out.granted and n:
            self._give_back(n, out.stamp, lid)

    def _undone(self, out: Outcome, n: int, lid: str | None) -> None:
        """A grant whose caller had gone (soon.Undo)."""
        self._give_back(n, out.stamp, lid)

    def _give_back(self, n: int, stamp: int, lid: str | None) -> None:
        """A release or a refund: the server gets the permits back; this process's queue asks."""
        if lid is not None:
            self.held.pop(lid, None)
            if not self.held and not len(self._queue):
                self._idle_since = self._rl_clock.now_ns()
        self.store._give_back(self, n, stamp, lid)
        self._queue.changed()

    def _give_back_part(self, n: int, lid: str, keep: int) -> None:
        """A concurrency lease settled to ``keep``: ``n`` of its permits back on the server, the
        lease goes on (renewed, re-asserted with ``keep``)."""
        held = self.held_here()
        if lid in held:
            held[lid] = keep
        self.store._give_back(self, n, 0, lid)
        self._queue.changed()

    def _counts(self) -> tuple[int, int]:
        """(successful, failed) leases, as statistics() counts them, without asking the server (a
        per-key limiter counts a partition it forgets, under its lock)."""
        return self._rl_tally.granted, self._rl_tally.refused

    # ---- the hooks of RateLimiter ----
    def _acquire(self, permit_count: int) -> Lease:
        self._check_count(permit_count)
        if permit_count and len(self._queue) and not self._queue.newest:
            return self._behind_queue(permit_count)
        return self._take(permit_count)

    async def _acquire_async(self, permit_count: int) -> Lease:
        self._check_count(permit_count)
        if permit_count and len(self._queue) and not self._queue.newest:
            return self._behind_queue(permit_count)
        return await self._take_async(permit_count)

    def _behind_queue(self, n: int) -> Lease:
        """OLDEST_FIRST: nobody passes the requests queued ahead."""
        return Lease.denied("limit_reached", retry_after=self._retry_hint())._with_permit_count(n)

    def _retry_hint(self) -> float | None:
        """A refusal's retry_after when the server was not asked: when the head asks again."""
        if self._rule.kind == "concurrency":
            return None
        now = self._rl_clock.now_ns()
        if self._next_ask is not None and self._next_ask > now:
            return (self._next_ask - now) / 1e9
        segmented = self._rule.kind in ("sliding_window", "sliding_log")
        return self._rule.period_ns / (self._rule.amount if segmented else 1) / 1e9

    def wait(self, permit_count: int = 1, timeout: float | None = None) -> Lease:
        blocks_the_loop(timeout)
        n = _check_permit_count(permit_count)
        limit = timeout_ns(timeout)
        self._check_open()
        self._check_count(n)
        return self._rl_counted(self._wait(n, limit), n, "wait")

    def wait_async(self, permit_count: int = 1) -> LeaseWait:
        n = _check_permit_count(permit_count)
        self._check_open()
        self._check_count(n)
        return PolledLeaseWait(self, n)

    def _wait(self, n: int, limit_ns: int) -> Lease:
        clock = self._rl_clock
        deadline = None if limit_ns < 0 else clock.now_ns() + limit_ns
        first: Lease | None = None
        asked = clock.now_ns()  # a refusal's retry_after counts from when the server was asked
        if self._asks_at_once(n):
            first = self._take_by(n, deadline)
            if first or not self._waitable(first):
                return first
        entry = self._queue.join(n)
        if entry is None:
            return self._queue_full(n, first)
        poll = FIRST_POLL
        try:
            while True:
                if entry.outcome is not None:
                    return entry.outcome
                if self._rl_closed or _pausing.cancelled_here():
                    return _pausing.closed_lease(n)
                version = self._queue.version
                until, pause = deadline, None
                if self._queue.is_head(entry):
                    if first is None:
                        asked = clock.now_ns()
                        if self._past(deadline, asked):
                            return _polling.timed_out(n)
                    lease = first if first is not None else self._take_by(n, deadline)  # (falsy if failed)
                    first = None
                    if lease or not self._waitable(lease):
                        return lease
                    until, pause, poll = self._after(lease, asked, deadline, poll)
                if deadline is not None and clock.now_ns() >= deadline:
                    return _polling.timed_out(n)
                _pausing.pause(clock, until, pause, self._changed(entry, version))
        finally:
            self._queue.leave(entry)

    async def _wait_async(self, permit_count: int) -> Lease:
        n = permit_count
        clock = self._rl_clock
        first: Lease | None = None
        asked = clock.now_ns()
        if self._asks_at_once(n):
            first = await self._take_async(n)
            if first or not self._waitable(first):
                return first
        entry = self._queue.join(n)
        if entry is None:
            return self._queue_full(n, first)
        poll = FIRST_POLL
        try:
            while True:
                if entry.outcome is not None:
                    return entry.outcome
                if self._rl_closed:
                    return _pausing.closed_lease(n)
                version = self._queue.version
                until, pause = None, None
                if self._queue.is_head(entry):
                    if first is None:
                        asked = clock.now_ns()
                    lease = first if first is not None else await self._take_async(n)
                    first = None
                    if lease or not self._waitable(lease):
                        return lease
                    until, pause, poll = self._after(lease, asked, None, poll)
                await _pausing.pause_async(clock, until, pause, self._changed(entry, version))
        finally:
            self._queue.leave(entry)

    def _asks_at_once(self, n: int) -> bool:
        """Whether a wait asks the server before queuing: no queue ahead of it, or NEWEST_FIRST (the
        newest is served first), or zero permits (granted while any permit is free, queue or not)."""
        return not n or not len(self._queue) or self._queue.newest

    def _try_now(self, permit_count: int) -> Lease | None:
        self._check_count(permit_count)
        return None  # asking a server takes I/O: the wait does it, in the running loop

    def _past(self, deadline: int | None, now: int) -> bool:
        """The wait's deadline has passed and its head's retry time (if any) has not come: it
        ends without asking the server again (a hung server would hold it past its timeout)."""
        if deadline is None or now < deadline:
            return False
        return self._next_ask is None or now < self._next_ask

    @staticmethod
    def _waitable(lease: Lease) -> bool:
        return lease.reason == "limit_reached"

    def _after(
        self, lease: Lease, asked: int, deadline: int | None, poll: float
    ) -> tuple[int | None, float | None, float]:
        """When the head asks again after a refusal it was given when it asked at ``asked``:
        (until on the pause clock, or a pause in real seconds, and the next poll)."""
        retry = lease.retry_after
        if retry is None or not math.isfinite(retry):
            self._next_ask = None
            return deadline, poll, min(LAST_POLL, poll * 2)
        until = asked + max(1, math.ceil(retry * 1e9))
        self._next_ask = until
        return (until if deadline is None else min(until, deadline)), None, FIRST_POLL

    def _changed(self, entry: Entry, version: int) -> Any:
        queue = self._queue
        return lambda: self._rl_closed or entry.outcome is not None or queue.version != version

    def _queue_full(self, n: int, refused: Lease | None) -> Lease:
        retry = self._retry_hint() if refused is None else refused.retry_after
        return Lease.denied("queue_full", retry_after=retry)._with_permit_count(n)

    # ---- the rest of the interface ----
    def _statistics(self) -> Statistics:
        return Statistics(self._available(), self._queue.permits, self._rl_tally.granted, self._rl_tally.refused)

    def _available(self) -> int:
        """The server's available permits (the last ones seen when it cannot be asked now: an
        asyncio client from sync code, or a server down). Within the store's timeout in all: the
        permits of leases dropped unreleased are given back first, and what that took is not the
        server's to answer in (asked from a thread, bounded by what is left)."""
        if self._backend.is_async is True:
            return self._seen
        timeout = self.store.timeout
        started = time.monotonic()
        try:
            self._learn()
            if self.store._renewal.flush(started + timeout) and time.monotonic() - started < timeout / 100:
                self._seen = self._backend.available(self._state, self._rule, self._now())
            else:
                self._seen = self._available_by(started + timeout)
        except BackendError:
            if self._on_error == "raise":
                raise
        return self._seen

    def _available_by(self, deadline: float) -> int:
        """The server's available permits, asked from a thread, by ``deadline``."""
        left = deadline - time.monotonic()
        if left > 0:
            step = _step_threads().submit(self._backend.available, self._state, self._rule, self._now())
            with contextlib.suppress(concurrent.futures.TimeoutError):
                return step.result(timeout=left)
        raise BackendError(
            f"the server did not answer within the store's timeout of {self.store.timeout} s "
            "(leases dropped unreleased were being given back)"
        )

    @property
    def idle_duration(self) -> float | None:
        """Seconds since this process last used it with nothing held or queued (a per-key limiter
        forgets such keys after its idle_timeout; the server keeps their state)."""
        since = self._idle_since
        if since is None or self.held or len(self._queue):
            return None
        return max(0, self._rl_clock.now_ns() - since) / 1e9

    def close(self) -> None:
        if self._rl_closed:
            return
        self._rl_mark_closed()
        self._queue.fail_all(_pausing.closed_lease(0))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} spec={self.spec!r}>"


__all__ = ["ON_ERROR", "StoreLimiter", "lease_id"]
