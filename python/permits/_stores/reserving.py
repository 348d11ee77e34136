"""ReservingLimiter: a store limiter of a time-based kind that takes its permits from the server in
batches and serves them in this process without a round trip (``RedisStore(client, reserve=N)``).

The stock is what is left of the last batch: ``count`` permits counted at ``stamp``, valid until
``until`` on the limiter's pause clock (the end of the batch's window, segment or period:
``permits._stores.batch``). A take of ``n`` is served from the stock when it holds ``n`` and is
still valid; else the server is asked for a batch of up to N, at least ``n`` (a stock too small
goes back first, so the server decides on ``n`` as on a single take); a refusal is the server's.
A refund goes back into the stock while it is valid. The stock goes back to the server on close()
and once the limiter has been idle for a while (``permits._stores.returns``). The available
permits (statistics) are the server's and the stock's: what a request here would find.

Served only while valid, the permits are granted within the window, segment or period the server
counted them in, so no kind admits more than single takes would: a limit is only under-used, by the
permits a process holds and does not use (others find them once they come back, or the window ends).
An expired stock goes back when it still weighs on the limit: a sliding window counter's while the
next window counts its window as the previous one, a sliding window's while its segment is in the
window, a token bucket's while the refills since have not made up for it; the server takes it out of
the count where it still weighs (``give_back_unused``), so that the permits a process did not use
weigh no more than single takes would have made them. A fixed window's is dropped: its window is over.
A busy process gives its expired stock back at its next take (before the batch), an idle one in the
returns' next round (``permits._stores.returns``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Any

from .._core import Lease
from .._forking import AfterFork
from ..errors import BackendError
from .batch import Batch, Batching
from .returns import IDLE_NS
from .rules import Rule
from .store_leases import Grant
from .store_limiter import StoreLimiter


def _forget_stock(limiter: ReservingLimiter) -> None:
    # A fork's child must not serve its parent's permits (the parent serves them too).
    limiter._lock = threading.Lock()
    limiter._stock = None
    limiter._fetching = None  # (a parent's thread's batch: it never lands here)
    limiter._fetching_async = weakref.WeakKeyDictionary()


_limiters: AfterFork[ReservingLimiter] = AfterFork(_forget_stock)


class Stock:
    __slots__ = ("count", "stamp", "until")

    def __init__(self, count: int, stamp: int, until: int) -> None:
        self.count = count
        self.stamp = stamp
        self.until = until


class ReservingLimiter(StoreLimiter):
    """A store limiter serving its permits from batches taken ``store.reserve`` at a time."""

    def __init__(self, store: Any, *args: Any) -> None:
        super().__init__(store, *args)
        self.reserve: int = store.reserve
        self._batches: Batching = store._backend
        self._returns = store._returns
        self._lock = threading.Lock()
        self._stock: Stock | None = None
        self._used = self._rl_clock.now_ns()  # when the stock was last served or filled
        # The batch on its way: callers that find the stock empty meanwhile wait for it and share
        # it, rather than each taking a batch of its own (the leftovers would pile up unused).
        self._fetching: threading.Event | None = None
        self._fetching_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[None]] = (
            weakref.WeakKeyDictionary()
        )
        _limiters.add(self)

    def _rl_forget(self) -> None:
        with self._lock:
            self._stock = None  # taken from the state the reset forgets: not served on top of the new one
        super()._rl_forget()

    # ---- the stock ----
    def _serve(self, n: int, *, keep: bool = False) -> tuple[Lease | None, Stock | None]:
        """A grant from the stock, or none and the stock taken out (too small or expired; with
        ``keep``, left as it is)."""
        with self._lock:
            stock = self._stock
            if stock is None:
                return None, None
            now = self._rl_clock.now_ns()
            if now >= stock.until or stock.count < max(n, 1):
                if keep:
                    return None, None
                self._stock = None
                return None, stock
            stock.count -= n
            if not stock.count:
                self._stock = None
            self._used = now
            stamp, until = stock.stamp, stock.until
        return self._granted(n, stamp, until, now), None

    def _granted(self, n: int, stamp: int, until: int, now: int) -> Lease:
        self._idle_since = now
        if not n:
            return Lease.granted(0)
        grant = Grant(n, lambda back: self._refunded(back, stamp, until))
        return Lease.granted(n, on_refund=grant.refund, on_settle=grant.settle)

    def _keep(self, count: int, stamp: int, until: int) -> None:
        """Permits of ``stamp`` valid until ``until`` join the stock (a batch's rest, a refund);
        those that cannot (expired, or the limiter closed) go back to the server if worth it."""
        now = self._rl_clock.now_ns()
        stale: Stock | None = Stock(count, stamp, until)
        with self._lock:
            stock = self._stock
            if self._rl_closed or count <= 0 or now >= until:
                pass
            elif stock is not None and stock.stamp == stamp and now < stock.until:
                stock.count += count
                stock.until = min(stock.until, until)
                stale = None
            elif stock is None or now >= stock.until or stamp > stock.stamp:
                self._stock, stale = stale, stock  # a newer stamp: the server has moved on
            kept = self._stock
            if kept is not None and kept.count > self.reserve and stale is None:
                # Never more than `reserve` held here: the rest goes back for the others.
                stale = Stock(kept.count - self.reserve, kept.stamp, kept.until)
                kept.count = self.reserve
            self._used = now
            holding = self._stock is not None
        if stale is not None:
            self._settle(stale, now)
        if holding:
            self._returns.watch(self)

    def _worth(self, stock: Stock, now: int) -> bool:
        """Whether giving ``stock`` back would give the server anything."""
        if not stock.count:
            return False
        if now < stock.until:
            return True
        rule = self._rule
        if rule.kind == "sliding_window_counter":
            return now < stock.until + rule.period_ns  # the next window still weighs its window's count
        if rule.kind == "sliding_window":
            # its segment stays in the window for the segments after it
            return now < stock.until + (rule.amount - 1) * (rule.period_ns // rule.amount)
        if rule.kind == "sliding_log":
            # its permits weigh until a window after their segment's latest grant: after its start at least
            return now < stock.until - -(-rule.period_ns // rule.amount) + rule.period_ns
        if rule.kind != "token_bucket":
            return False  # a fixed window's count weighs nothing past its window
        # The refills since the stamp's period make up for that many (the refund's rule).
        periods = 1 + (now - stock.until) // rule.period_ns
        return stock.count > periods * rule.amount

    def _settle(self, stock: Stock, now: int) -> None:
        """The stock's permits, unused, leave the count wherever it still weighs them."""
        if self._worth(stock, now):
            self.store._give_back(self, stock.count, stock.stamp, None, unused=True)

    def _until(self, asked: int, valid_ns: int) -> int:
        """When a batch asked for at ``asked`` (pause clock) expires here. On the server's clock a
        little earlier: its TIME is in whole microseconds, and clocks of two hosts drift apart by
        up to 500 ppm (NTP's largest slew)."""
        if self._time is not None:
            return asked + valid_ns  # the test's clock is the server's
        return asked + valid_ns - 1_000 - valid_ns // 2_000

    def _received(self, batch: Batch, n: int, asked: int) -> Lease:
        if not batch.granted:
            return self._lease_of(batch.outcome, n, None)
        self._seen = batch.available
        until = self._until(asked, batch.valid_ns)
        lease = self._granted(n, batch.stamp, until, asked)
        self._keep(batch.taken - n, batch.stamp, until)
        return lease

    def _refunded(self, n: int, stamp: int, until: int) -> None:
        now = self._rl_clock.now_ns()
        if now >= until:
            # A lease refunded past its window: a refund's rule (only a token bucket's gives back
            # then, what the refills have not made up for), not an unused stock's.
            if self._rule.kind == "token_bucket" and self._worth(Stock(n, stamp, until), now):
                self.store._give_back(self, n, stamp, None)
        else:
            self._keep(n, stamp, until)
        self._queue.changed()

    def _most(self, n: int, rule: Rule) -> int:
        return min(rule.limit, max(self.reserve, n))

    def acquire(self, permit_count: int = 1) -> Lease:
        """As every limiter's; a grant the stock holds takes the short way here (the same lease as
        ``_take``'s first step, counted as ``RateLimiter.acquire`` counts it)."""
        n = permit_count
        if n.__class__ is int and 0 < n <= self._rule.limit and not self._rl_closed and not self._queue._entries:
            lease = self._serve(n, keep=True)[0]
            if lease is not None:
                self._rl_tally.grant()
                return lease
        return super().acquire(permit_count)

    # ---- a take ----
    def _take(self, n: int) -> Lease:
        lease = self._serve(n, keep=True)[0]
        if lease is not None:
            return lease
        # One batch in flight at a time: a caller that finds one on its way waits for it (at most
        # the store's timeout) and is served from what it brings.
        deadline = time.monotonic() + self.store.timeout
        while True:
            with self._lock:
                fetching = self._fetching
                if fetching is None:
                    self._fetching = done = threading.Event()
                    break
            fetching.wait(max(0.0, deadline - time.monotonic()))
            lease = self._serve(n, keep=True)[0]
            if lease is not None:
                return lease
        try:
            return self._take_batch(n)
        finally:
            with self._lock:
                self._fetching = None
            done.set()

    def _take_by(self, n: int, deadline: int | None) -> Lease:
        lease = self._serve(n, keep=True)[0]  # (from the stock: no I/O, whatever the deadline)
        return lease if lease is not None else super()._take_by(n, deadline)

    def _take_batch(self, n: int) -> Lease:
        lease, back = self._serve(n)
        if lease is not None:
            return lease
        clock = self._rl_clock
        if back is not None:
            self._settle(back, clock.now_ns())  # (a sync client: done when it returns)
        asked = clock.now_ns()
        try:
            self._learn()
            rule = self._rule  # (one rule for the whole step: another process may change it meanwhile)
            if n > rule.limit:
                return self._over_limit(n)
            batch = self._batches.take_batch(self._state, rule, n, self._most(n, rule), self._now())
        except BackendError as error:
            return self._failed(error, n)
        return self._received(batch, n, asked)

    async def _take_async(self, n: int) -> Lease:
        loop = asyncio._get_running_loop()
        if loop is None or self._backend.is_async is False:
            return self._take(n)
        lease = self._serve(n, keep=True)[0]
        if lease is not None:
            return lease
        while True:  # one batch in flight per loop, shared (as _take)
            fetching = self._fetching_async.get(loop)
            if fetching is None or fetching.done():
                self._fetching_async[loop] = done = loop.create_future()
                break
            await asyncio.shield(fetching)
            lease = self._serve(n, keep=True)[0]
            if lease is not None:
                return lease
        try:
            return await self._take_batch_async(n)
        finally:
            if self._fetching_async.get(loop) is done:
                del self._fetching_async[loop]
            done.set_result(None)

    async def _take_batch_async(self, n: int) -> Lease:
        lease, back = self._serve(n)
        if lease is not None:
            return lease
        clock = self._rl_clock
        self.store._housekeep()
        try:
            await self._learn_async()
        except BackendError as error:
            return self._failed(error, n)
        if back is not None and self._worth(back, clock.now_ns()):
            back_step = self._batches.give_back_unused_async(
                self._state, self._rule, back.count, back.stamp, self._now()
            )
            with contextlib.suppress(BackendError):
                await asyncio.shield(asyncio.ensure_future(back_step))  # before the batch: decided as one take
        asked = clock.now_ns()
        rule = self._rule
        if n > rule.limit:
            return self._over_limit(n)
        step = asyncio.ensure_future(
            self._batches.take_batch_async(self._state, rule, n, self._most(n, rule), self._now())
        )
        try:
            batch = await asyncio.shield(step)
        except BackendError as error:
            return self._failed(error, n)
        except asyncio.CancelledError:
            # Cancelled while the server decides: a batch granted meanwhile is kept, all of it.
            step.add_done_callback(lambda done: self._keep_all(done, asked))
            raise
        return self._received(batch, n, asked)

    def _try_now(self, permit_count: int) -> Lease | None:
        """A wait granted from the stock at once (no I/O); else the wait asks the server."""
        self._check_count(permit_count)
        if permit_count and len(self._queue) and not self._queue.newest:
            return None
        lease = self._serve(permit_count, keep=True)[0]
        return None if lease is None else self._rl_count(lease)

    def _keep_all(self, step: asyncio.Future[Batch], asked: int) -> None:
        if step.cancelled() or step.exception() is not None:
            return
        batch = step.result()
        if batch.granted and batch.taken:
            self._keep(batch.taken, batch.stamp, self._until(asked, batch.valid_ns))
            self._queue.changed()

    # ---- statistics ----
    def _available(self) -> int:
        """What a request here would find: the server's available permits and this stock's (a
        request larger than the stock gives it back first, so the server decides on both)."""
        server = super()._available()
        with self._lock:
            stock = self._stock
            held = stock.count if stock is not None and self._rl_clock.now_ns() < stock.until else 0
        return server + held

    # ---- giving back ----
    def _return_idle(self) -> bool:
        """The returns' round: a stock idle for IDLE_NS, or expired, goes. True while one stays."""
        now = self._rl_clock.now_ns()
        with self._lock:
            stock = self._stock
            if stock is None:
                return False
            if now < stock.until and now - self._used < IDLE_NS and not self._rl_closed:
                return True
            self._stock = None
        self._settle(stock, now)
        return False

    def _close_evicted(self) -> None:
        """Closed as an idle partition of a per-key limiter (in a caller's acquire): its unused
        permits go back in the returns' next round, off the caller's path."""
        if self._rl_closed:
            return
        StoreLimiter.close(self)
        with self._lock:
            holding = self._stock is not None
        if holding:
            self._returns.watch(self, keep=True)

    def close(self) -> None:
        """Closes the limiter; its unused permits go back to the server."""
        if self._rl_closed:
            return
        super().close()
        with self._lock:
            stock, self._stock = self._stock, None
        if stock is not None:
            self._settle(stock, self._rl_clock.now_ns())


__all__ = ["ReservingLimiter"]
