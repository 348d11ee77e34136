"""A request's permit, counted when the request gets its connection, for the HTTP clients.

A client asks its pool for a connection (and may have to wait for one, or open one) before it
writes a request. A permit taken before that wait would be counted too early: permits granted
while a slow response holds the only connection would all go out back to back once it is free,
and then as many again, more than the limit in a moment at the server. A permit taken only once
the connection is there would make a request wait for it holding the connection, which a server
may close meanwhile (its keep-alive timeout), while requests for other hosts wait for the pool.

So an attempt goes in two steps. Before it asks for a connection it waits out any pause of its
key and for a permit, as any paced wait does; requests for one key take this step one at a time
(their *turn*, first come first served), so at most one of them holds a permit while it waits for
a connection. Then, as the client is about to write the request (the client's own hooks: httpcore
traces "send_request_headers", aiohttp signals ``on_request_headers_sent`` before it writes the
headers), the permit is renewed if the request waited more than ``FRESH`` for its connection (a
busy pool) or more than ``SLOW_SETUP`` for a new connection to open: a permit taken then, the
first given back (a refund: as if it had never been taken, when the limiter can take it back). A
new connection's set-up is not a wait for the pool: it shifts the request by about the same time
each time, which the limit's margin covers, and renewing for it would cost permits (a sliding
window takes back only a permit of its current segment). A key paused meanwhile (a
``Retry-After`` reached another request) makes the attempt step back (``Repaused``): its
connection is closed unused, and it waits the pause out away from the pool.
"""

from __future__ import annotations

from ._adaptive_keys import AdaptiveKeys
from ._core import Lease, LimiterClosedError
from ._pacing import Pacer
from .partitioned import PartitionedLimiter
from .specs import Concurrency

#: A request that waited longer than this (ns) for its connection gets a new permit.
FRESH_NS = 10_000_000
#: A new connection that took longer than this (ns) to open gets its request a new permit.
SLOW_SETUP_NS = 1_000_000_000


class Repaused(Exception):
    """The key was paused while the request waited for its connection: it waits again, unsent."""


class Sender:
    """One client's pacing: its ``Pacer`` and its keys' turns."""

    __slots__ = ("_turns", "pacer")

    def __init__(self, limiter: object, adaptive: AdaptiveKeys | None = None) -> None:
        self.pacer = Pacer(limiter, front=None if adaptive is None else adaptive.of)
        self._turns = PartitionedLimiter.per_key(Concurrency(1))  # a FIFO queue per key

    def attempt(self, key: object, *, at_write: bool) -> Attempt:
        """An attempt at sending a request for ``key``; ``at_write``: the client will call
        ``writing`` when it writes it (else the permit taken first is the one counted)."""
        return Attempt(self, key, at_write)


class Attempt:
    """One attempt of one request: its turn among its key's requests, then its permit."""

    __slots__ = ("_at_write", "_connecting_ns", "_key", "_lease", "_sender", "_taken_ns", "_turn", "_written")

    def __init__(self, sender: Sender, key: object, at_write: bool) -> None:
        self._sender = sender
        self._key = key
        self._at_write = at_write
        self._turn: Lease | None = None
        self._lease: Lease | None = None
        self._taken_ns = 0
        self._connecting_ns: int | None = None
        self._written = False

    @property
    def sender(self) -> Sender:
        return self._sender

    # ---- before asking for a connection ----
    def begin(self, deadline_ns: int | None) -> None:
        """Blocks until the key is not paused, it is this request's turn and a permit is granted.
        ``PauseOutlasts`` when the key's pause ends after ``deadline_ns``."""
        pacer = self._sender.pacer
        pacer.sleep_out_pause(self._key, deadline_ns)  # not in the turn's queue: others may go
        try:
            if self._at_write:
                self._turn = self._sender._turns.wait(self._key)
            self._lease = pacer.wait(self._key, deadline_ns=deadline_ns)
        except BaseException:
            self._end_turn()
            raise
        self._taken_ns = pacer.now_ns()

    async def begin_async(self, deadline_ns: int | None) -> None:
        """As ``begin``, never blocking the event loop."""
        pacer = self._sender.pacer
        await pacer.sleep_out_pause_async(self._key, deadline_ns)
        try:
            if self._at_write:
                self._turn = await self._sender._turns.wait_async(self._key)
            self._lease = await pacer.wait_async(self._key, deadline_ns=deadline_ns)
        except BaseException:
            self._end_turn()
            raise
        self._taken_ns = pacer.now_ns()

    # ---- once it has its connection ----
    def connecting(self) -> None:
        """A new connection is being opened for the request: its wait for the pool is over."""
        if self._connecting_ns is None:
            self._connecting_ns = self._sender.pacer.now_ns()

    def writing(self) -> None:
        """The request has its connection and is about to be written: renews the permit if the
        request waited too long for it (waiting, rarely, for a new one), and ends the turn. ``Repaused`` when the key
        was paused meanwhile. Once per attempt (a tunnel's CONNECT is written first)."""
        if self._written or self._lease is None:
            return
        self._written = True
        try:
            if self._renewed_at_once():
                return
            lease = self._sender.pacer.take(self._key)
            if lease is None:
                raise Repaused
            self._lease = lease
        finally:
            self._end_turn()

    async def writing_async(self) -> None:
        """As ``writing``, never blocking the event loop."""
        if self._written or self._lease is None:
            return
        self._written = True
        try:
            if self._renewed_at_once():
                return
            lease = await self._sender.pacer.take_async(self._key)
            if lease is None:
                raise Repaused
            self._lease = lease
        finally:
            self._end_turn()

    def _renewed_at_once(self) -> bool:
        """True when the permit held will do (fresh, or renewed without waiting); False when it
        was given back and a new one must be waited for."""
        pacer, key, lease = self._sender.pacer, self._key, self._lease
        assert lease is not None
        if pacer.paused_for(key) > 0:
            self._give_back()
            raise Repaused
        now = pacer.now_ns()
        connected = now if self._connecting_ns is None else self._connecting_ns
        if connected - self._taken_ns <= FRESH_NS and now - connected <= SLOW_SETUP_NS:
            return True
        fresh = pacer.acquire_now(key)
        if not fresh:
            if fresh.reason == "closed":
                raise LimiterClosedError("the limiter is closed")
            if fresh.retry_after is None:  # a refusal time does not end (a concurrency limit):
                return True  # when its permit was taken does not matter
            self._give_back()
            fresh = pacer.acquire_now(key)  # the refund may have made the room
            if not fresh:
                return False
        else:
            lease._refund()
        self._lease = fresh
        return True

    # ---- the end ----
    def finish(self) -> Lease:
        """The attempt is over (a response came back): the lease to hold for the response."""
        self._end_turn()
        assert self._lease is not None  # (given back only on the way to Repaused)
        return self._lease

    def abandon(self) -> None:
        """The attempt failed or was cancelled: gives back what it holds."""
        self._end_turn()
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _give_back(self) -> None:
        if self._lease is not None:
            self._lease._refund()
            self._lease = None

    def _end_turn(self) -> None:
        if self._turn is not None:
            self._turn.release()
            self._turn = None
