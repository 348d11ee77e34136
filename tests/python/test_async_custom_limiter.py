"""Custom limiters that ask elsewhere: the ``_acquire_async`` hook, refunds, keyed custom limiters.

A limiter whose state lives on a server answers ``acquire_async`` through its coroutine hook;
the limiter's own ``acquire_async``, a chain holding it and a partition made of it all await
that hook, so the event loop keeps running while the answer travels. Here the "server" is a task
of the same loop: a call that blocked the loop would never get its answer (the test times out).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

import permits

from _support import SAFETY


class Server:
    """A remote counter, answering from a task of the running loop: ``ask`` only completes once
    that task has run."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.requests: asyncio.Queue[tuple[str, int, asyncio.Future[bool]]] = asyncio.Queue()
        self.log: list[tuple[str, int]] = []

    async def serve(self) -> None:
        while True:
            op, n, answer = await self.requests.get()
            self.log.append((op, n))
            if op == "take":
                ok = self.used + n <= self.limit
                if ok:
                    self.used += n
                answer.set_result(ok)
            else:  # "undo" or "done": the permits come back
                self.used -= n
                answer.set_result(True)

    async def ask(self, op: str, n: int) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self.requests.put((op, n, answer))
        return await answer

    def tell(self, op: str, n: int) -> None:
        """From a synchronous callback (on_release / on_refund): sent without waiting."""
        asyncio.get_running_loop().create_task(self.ask(op, n))


class Remote(permits.RateLimiter):
    """Holds its permits on the server; never answers synchronously."""

    def __init__(self, server: Server, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.server = server
        self.sync_calls = 0

    def _acquire(self, permit_count: int) -> permits.Lease:
        self.sync_calls += 1
        raise AssertionError("a remote limiter is only asked through _acquire_async")

    async def _acquire_async(self, permit_count: int) -> permits.Lease:
        if not await self.server.ask("take", permit_count):
            return permits.Lease.denied(retry_after=0.001, metadata={"server": "busy"})
        return permits.Lease.granted(
            permit_count,
            on_release=lambda: self.server.tell("done", permit_count),
            on_refund=lambda: self.server.tell("undo", permit_count),
            metadata={"server": "ok"},
        )


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server(limit=2)
    task = asyncio.create_task(srv.serve())
    yield srv
    task.cancel()


async def drained(server: Server) -> None:
    """Lets the server answer what was told without waiting."""
    for _ in range(20):
        await asyncio.sleep(0)


async def within(aw):  # type: ignore[no-untyped-def]
    return await asyncio.wait_for(aw, SAFETY)


async def test_acquire_async_awaits_the_hook_and_counts(server: Server) -> None:
    lim = Remote(server)
    first = await within(lim.acquire_async(2))
    third = await within(lim.acquire_async(1))
    assert first and first.permit_count == 2 and first.metadata["server"] == "ok"
    assert not third and third.permit_count == 1 and third.retry_after == 0.001
    assert lim.statistics().total_successful_leases == 1
    assert lim.statistics().total_failed_leases == 1
    first.release()
    await drained(server)
    assert server.log[-1] == ("done", 2)
    assert lim.sync_calls == 0


async def test_acquire_async_is_an_async_context_manager(server: Server) -> None:
    lim = Remote(server)
    async with lim.acquire_async(2) as lease:
        assert lease and server.used == 2
    await drained(server)
    assert server.used == 0


async def test_acquire_async_never_awaited_asks_nothing(server: Server) -> None:
    lim = Remote(server)
    attempt = lim.acquire_async(1)
    with pytest.warns(RuntimeWarning, match=r"acquire_async\(\) was never awaited"):  # as a coroutine
        del attempt
    await drained(server)
    assert server.log == []


async def test_acquire_async_validates_at_the_call(server: Server) -> None:
    lim = Remote(server)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire_async(-1)
    lim.close()
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire_async(1)


async def test_hook_returning_a_non_lease_is_a_type_error(server: Server) -> None:
    class Wrong(permits.RateLimiter):
        async def _acquire_async(self, permit_count: int) -> permits.Lease:
            return True  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"must return a permits\.Lease"):
        await Wrong().acquire_async(1)


async def test_default_wait_async_asks_through_the_hook(server: Server) -> None:
    lim = Remote(server)
    held = await within(lim.acquire_async(2))
    waiter = asyncio.ensure_future(lim.wait_async(1))
    await drained(server)
    assert not waiter.done()  # denied, sleeping retry_after, asking again
    held.release()
    lease = await within(waiter)
    assert lease and server.used == 1
    assert lim.sync_calls == 0


async def test_in_a_chain_the_hook_is_awaited(server: Server) -> None:
    bucket = permits.TokenBucketLimiter(5, 5, 60.0, clock=permits.ManualClock())
    chained = permits.chain(bucket, Remote(server))
    lease = await within(chained.acquire_async(2))
    assert lease and server.used == 2 and bucket.available_permits() == 3
    assert lease.metadata["server"] == "ok"
    lease.release()
    await drained(server)
    assert server.used == 0


async def test_a_chain_refunds_the_remote_grant_with_on_refund(server: Server) -> None:
    """A later member's rejection undoes the remote grant: on_refund, not on_release."""
    empty = permits.FixedWindowLimiter(2, 60.0, clock=permits.ManualClock())
    assert empty.acquire(2)
    chained = permits.chain(Remote(server), empty)
    lease = await within(chained.acquire_async(2))
    assert not lease and lease.reason == "limit_reached"
    await drained(server)
    assert server.log == [("take", 2), ("undo", 2)]
    assert server.used == 0


async def test_a_chain_in_a_chain_refunds_through_on_refund(server: Server) -> None:
    empty = permits.FixedWindowLimiter(1, 60.0, clock=permits.ManualClock())
    assert empty.acquire(1)
    inner = permits.chain(Remote(server), permits.NoLimiter())
    lease = await within(permits.chain(inner, empty).acquire_async(1))
    assert not lease
    await drained(server)
    assert server.log == [("take", 1), ("undo", 1)]


async def test_cancelled_in_a_chain_gives_back_what_was_taken(server: Server) -> None:
    bucket = permits.TokenBucketLimiter(5, 5, 60.0, clock=permits.ManualClock())
    chained = permits.chain(bucket, Remote(server))
    task = asyncio.ensure_future(chained.acquire_async(3))
    await asyncio.sleep(0)  # the bucket granted; the remote request is on its way
    assert bucket.available_permits() == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert bucket.available_permits() == 5


async def test_as_a_partition_the_hook_is_awaited(server: Server) -> None:
    limiters: dict[object, Remote] = {}

    def make(key: object) -> Remote:
        limiters[key] = Remote(server, name=str(key))
        return limiters[key]

    keyed = permits.PartitionedLimiter(lambda r: permits.Partition.custom(r, make))
    lease = await within(keyed.acquire_async("a", 2))
    denied = await within(keyed.acquire_async("b", 1))  # the server's limit is shared
    assert lease and not denied
    assert limiters["a"].sync_calls == 0 and limiters["b"].sync_calls == 0
    assert keyed.statistics("a").total_successful_leases == 1
    assert keyed.statistics().total_failed_leases == 1


async def test_a_partitioned_chain_awaits_every_member(server: Server) -> None:
    per_key = permits.PartitionedLimiter.per_key(
        permits.Partition.fixed_window(None, 1, 60.0), clock=permits.ManualClock()
    )
    chained = permits.chain(per_key, Remote(server))
    assert await within(chained.acquire_async("a", 1))
    assert not await within(chained.acquire_async("a", 1))  # the window of "a" is used
    assert await within(chained.acquire_async("b", 1))
    assert not await within(chained.acquire_async("c", 1))  # the server is full: c's window refunded
    assert per_key.available_permits("c") == 1


# ---- a keyed custom limiter ----------------------------------------------------------------


class PerUser(permits.KeyedRateLimiter):
    """At most ``limit`` permits held per user; asks its store asynchronously."""

    def __init__(self, limit: int) -> None:
        super().__init__(name="per-user")
        self.limit = limit
        self.held: dict[object, int] = {}
        self.async_calls = 0

    def _take(self, resource: object, permit_count: int) -> permits.Lease:
        if self.held.get(resource, 0) + permit_count > self.limit:
            return permits.Lease.denied("user_limit", retry_after=0.001)
        self.held[resource] = self.held.get(resource, 0) + permit_count

        def back() -> None:
            self.held[resource] -= permit_count

        return permits.Lease.granted(permit_count, on_release=back)

    def _acquire(self, resource: object, permit_count: int) -> permits.Lease:
        return self._take(resource, permit_count)

    async def _acquire_async(self, resource: object, permit_count: int) -> permits.Lease:
        self.async_calls += 1
        await asyncio.sleep(0)  # a round trip
        return self._take(resource, permit_count)


def test_keyed_custom_limiter_public_members() -> None:
    lim = PerUser(2)
    assert isinstance(lim, permits.KeyedRateLimiter)
    a = lim.acquire("alice", 2)
    assert a and not lim.acquire("alice", 1) and lim.acquire("bob", 1)
    failed = lim.acquire("alice", 1)
    assert failed.reason == "user_limit" and failed.permit_count == 1
    assert lim.statistics() == permits.Statistics(0, 0, 2, 2)
    assert lim.statistics("alice") == permits.Statistics(0, 0, 0, 0)
    assert lim.partition_count == 0 and lim.evict_idle() == 0
    a.release()
    assert lim.wait("alice", 2, timeout=1.0)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire("alice", -1)
    with pytest.raises(TypeError, match="needs a key"), lim:
        pass
    with contextlib.closing(lim):
        pass
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire("alice")


async def test_keyed_custom_limiter_async_members() -> None:
    lim = PerUser(1)
    lease = await within(lim.acquire_async("alice"))
    assert lease and lim.async_calls == 1
    waiter = asyncio.ensure_future(lim.wait_async("alice"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    lease.release()
    assert await within(waiter)
    async with lim.wait_async("bob") as bob:
        assert bob and lim.held["bob"] == 1
    assert lim.held["bob"] == 0


async def test_keyed_custom_limiter_in_a_chain() -> None:
    users = PerUser(1)
    total = permits.ConcurrencyLimiter(2)
    chained = permits.chain(total, users)
    assert isinstance(chained, permits.KeyedRateLimiter)
    a = await within(chained.acquire_async("alice"))
    assert a and users.async_calls == 1
    refused = await within(chained.acquire_async("alice"))  # alice's own limit: total refunded
    assert not refused and refused.reason == "user_limit"
    assert total.available_permits() == 1
    b = chained.acquire("bob")
    assert b and total.available_permits() == 0
    a.release()
    b.release()
    assert total.available_permits() == 2 and users.held == {"alice": 0, "bob": 0}


# ---- the interfaces ------------------------------------------------------------------------


def every_limiter() -> list[object]:
    clock = permits.ManualClock()
    engine = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock)
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1), clock=clock)
    general = permits.PartitionedLimiter(lambda r: permits.Partition.no_limiter(r), clock=clock)
    return [
        engine,
        permits.NoLimiter(),
        permits.chain(engine, permits.NoLimiter()),
        per_key,
        general,
        permits.chain(engine, per_key),
        PerUser(1),
    ]


@pytest.mark.parametrize("limiter", every_limiter(), ids=lambda x: type(x).__name__)
def test_every_limiter_is_one_of_the_two_interfaces(limiter: object) -> None:
    plain = isinstance(limiter, permits.RateLimiter)
    keyed = isinstance(limiter, permits.KeyedRateLimiter)
    assert plain != keyed
    # Each ran its interface's __init__: the members the interface's code relies on are set.
    assert limiter.name == "default" or isinstance(limiter.name, str)  # type: ignore[attr-defined]
    assert isinstance(limiter._rl_clock, (permits.ManualClock, permits.MonotonicClock))  # type: ignore[attr-defined]


def test_per_key_limiter_has_no_general_partition_members() -> None:
    """The per-key limiter is a KeyedRateLimiter, not a PartitionedLimiter whose __init__ it skips."""
    lim = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1))
    assert isinstance(lim, permits.PerKeyLimiter) and not isinstance(lim, permits.PartitionedLimiter)
    assert not hasattr(lim, "_entry") and not hasattr(lim, "_partitioner")


def test_chain_takes_only_the_interfaces() -> None:
    with pytest.raises(TypeError, match="RateLimiter or KeyedRateLimiter"):
        permits.chain(permits.NoLimiter(), object())  # type: ignore[call-overload]


def test_no_limiter_partition_is_idle_since_its_last_grant() -> None:
    clock = permits.ManualClock()
    lim = permits.NoLimiter(clock=clock)
    clock.advance(5.0)
    assert lim.idle_duration == 5.0
    assert lim.acquire(3)
    assert lim.idle_duration == 0.0
