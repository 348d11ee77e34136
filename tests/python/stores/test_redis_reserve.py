"""RedisStore(reserve=N) on a ManualClock: its time-based limiters serve the permits of a batch in
this process (no script runs on the server: counted with INFO commandstats on a server of this
module's own), only while the batch's window, segment or period lasts; refunds go back into the
stock; the stock goes back to the server on close, on a per-key eviction and once idle; the queue,
threads, a fork, asyncio clients and a server gone behave."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import permits
from permits import specs
from permits._core import _key_bytes
from permits._stores.redis_backend import RedisBackend
from permits._stores.reserving import ReservingLimiter
from permits._stores.returns import IDLE_NS
from permits._stores.rules import rule_of
from permits.redis import RedisStore

from _redis_support import fresh_prefix
from _servers.redis import RedisProcess, _server

TIMED = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter")
#: Limits of 10 whose batches last 1 s from the state's first step (its anchor).
SPECS: dict[str, specs.Spec[Any]] = {
    "token_bucket": specs.TokenBucket(10, 10, 1.0),
    "fixed_window": specs.FixedWindow(10, 1.0),
    "sliding_window": specs.SlidingWindow(10, 2.0, 2),
    "sliding_window_counter": specs.SlidingWindowCounter(10, 1.0),
}


@pytest.fixture(scope="module")
def quiet_redis() -> Iterator[RedisProcess]:
    """A server no other module's stores (and their threads) use: its script counts are ours."""
    with _server("permits-reserve-") as server:
        yield server


@pytest.fixture
def client(quiet_redis: RedisProcess) -> Iterator[Any]:
    with quiet_redis.client() as made:
        yield made


def reserving(client: Any, clock: permits.ManualClock | None, reserve: int = 4, **kwargs: Any) -> RedisStore:
    kwargs.setdefault("prefix", fresh_prefix())
    store = RedisStore(client, reserve=reserve, clock=clock, **kwargs)
    store._backend.key_margin_ms = 60_000  # the ManualClock says nothing about real time
    return store


def scripts_run(client: Any) -> int:
    """The steps the server has run, as functions or scripts (a "Function not found" or NOSCRIPT
    answer, then loaded again, counts once)."""
    stats = client.info("commandstats")
    run = 0
    for name in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"):
        counts = stats.get(name, {})
        run += int(counts.get("calls", 0)) - int(counts.get("failed_calls", 0)) - int(counts.get("rejected_calls", 0))
    return run


def on_server(store: RedisStore, limiter: Any, clock: permits.ManualClock | None) -> int:
    """The server's available permits of ``limiter`` (closed or not)."""
    return int(store._backend.available(limiter._state, limiter._rule, None if clock is None else clock.now_ns()))


# ---- serving from the stock ----


@pytest.mark.parametrize("kind", TIMED)
def test_a_batch_is_served_here_without_the_server(client: Any, clock: permits.ManualClock, kind: str) -> None:
    store = reserving(client, clock, 4)
    limiter = store.limiter("l", SPECS[kind])
    assert isinstance(limiter, ReservingLimiter)
    before = scripts_run(client)
    assert limiter.acquire()
    assert scripts_run(client) == before + 1
    assert on_server(store, limiter, clock) == 6  # the server's: the batch of 4 is counted there
    before = scripts_run(client)
    assert all(limiter.acquire() for _ in range(3))
    assert scripts_run(client) == before
    assert on_server(store, limiter, clock) == 6
    assert limiter.acquire() and on_server(store, limiter, clock) == 2  # the next batch


@pytest.mark.parametrize("kind", TIMED)
def test_a_stock_lasts_until_its_window_segment_or_period_ends(
    client: Any, clock: permits.ManualClock, kind: str
) -> None:
    clock.advance(5.0)
    store = reserving(client, clock, 4)
    limiter = store.limiter("l", SPECS[kind])
    assert limiter.acquire()  # the state's first step: its windows start now
    clock.advance_ns(10**9 - 1)
    before = scripts_run(client)
    assert limiter.acquire()
    assert scripts_run(client) == before  # the stock's last nanosecond
    clock.advance_ns(1)
    before = scripts_run(client)
    assert limiter.acquire()
    # Expired: a new batch. The 2 left go back first where they still weigh (the segment before,
    # still in the window; the counter's previous window), and are dropped where they weigh nothing
    # (a window over; a token bucket refilled since).
    gives_back = kind in ("sliding_window", "sliding_window_counter")
    assert scripts_run(client) == before + (2 if gives_back else 1)
    # What the server holds now: tokens refilled; a new window; the segment before, with the 2
    # used, still in the window; the counter's previous window, its 2 used, weighs fully at its start.
    assert on_server(store, limiter, clock) == (4 if gives_back else 6)


def test_a_request_larger_than_the_stock_gives_it_back_first(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.fixed_window("w", 10, 1.0)
    assert limiter.acquire() and on_server(store, limiter, clock) == 6  # a stock of 3
    before = scripts_run(client)
    assert limiter.acquire(5)  # the 3 go back, then a batch of 5 (more than N: at least n)
    assert scripts_run(client) == before + 2
    assert on_server(store, limiter, clock) == 4  # 10 - 1 - 5: nothing lost, nothing left here
    refused = limiter.acquire(5)
    assert not refused and refused.retry_after == 1.0  # the server's refusal
    assert limiter.acquire(0)  # a probe with an empty stock takes a batch: 4 fit
    assert on_server(store, limiter, clock) == 0
    before = scripts_run(client)
    assert limiter.acquire(4) and scripts_run(client) == before


def test_a_refused_batch_is_the_servers_refusal(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 3)
    limiter = store.token_bucket("tb", 5, 2, 1.0)
    assert limiter.acquire(5)
    clock.advance(0.25)
    lease = limiter.acquire(3)
    assert not lease and lease.reason == "limit_reached"
    assert lease.retry_after == pytest.approx(1.75, abs=1e-9)  # two refills: at 1 s and 2 s


def test_available_permits_are_the_servers_and_the_stocks(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.fixed_window("w", 10, 1.0)
    elsewhere = reserving(client, clock, 4, prefix=store.prefix).fixed_window("w", 10, 1.0)
    assert limiter.acquire()
    assert limiter.available_permits() == 9 and limiter.statistics().current_available_permits == 9
    assert elsewhere.available_permits() == 6  # the 3 held here are not available to others
    assert limiter.acquire(9)  # what it said: the stock goes back, the server grants the 9
    assert limiter.available_permits() == 0 and on_server(store, limiter, clock) == 0
    clock.advance(1.0)
    assert limiter.acquire() and limiter.available_permits() == 9
    clock.advance(1.0)  # an expired stock counts no more
    assert limiter.available_permits() == 10


# ---- refunds ----


def test_a_refund_goes_back_into_the_stock(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.fixed_window("w", 4, 1.0)
    full = specs.FixedWindow(1, 1.0).limiter(clock=clock)
    assert full.acquire()
    assert not permits.chain(limiter, full).acquire()  # the chain refunds what limiter granted
    assert on_server(store, limiter, clock) == 0  # the batch of 4 stays counted on the server
    before = scripts_run(client)
    assert all(limiter.acquire() for _ in range(4))  # all 4 are here
    assert scripts_run(client) == before
    refused = limiter.acquire()
    assert not refused and refused.retry_after == 1.0


def test_a_refund_after_its_window_goes_to_the_server(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.fixed_window("w", 4, 1.0)
    lease = limiter.acquire()
    clock.advance(1.0)
    before = scripts_run(client)
    lease._refund()  # counted in a window that is over: nothing comes back, nothing to ask
    assert scripts_run(client) == before
    assert limiter.acquire()
    assert scripts_run(client) == before + 1  # the stock was not refilled: a new batch
    assert on_server(store, limiter, clock) == 0


def test_a_token_buckets_expired_stock_goes_back_when_refills_have_not_made_up_for_it(
    client: Any, clock: permits.ManualClock
) -> None:
    store = reserving(client, clock, 8)
    limiter = store.token_bucket("slow", 10, 2, 1.0)
    assert limiter.acquire() and on_server(store, limiter, clock) == 2  # 7 here
    clock.advance(1.0)  # 2 tokens more on the server: 4
    before = scripts_run(client)
    assert limiter.acquire()
    # The 7 went back less the 2 the refill brought (the refund's rule): 9, then a batch of 8.
    assert scripts_run(client) == before + 2
    assert on_server(store, limiter, clock) == 1

    fast = store.token_bucket("fast", 10, 10, 1.0)
    assert fast.acquire()  # 7 here
    clock.advance(1.0)  # the refill makes up for all of them: nothing to give back
    before = scripts_run(client)
    assert fast.acquire() and scripts_run(client) == before + 1
    assert on_server(store, fast, clock) == 2


# ---- giving the stock back ----


def test_close_gives_the_stock_back(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 5)
    window = store.fixed_window("w", 10, 60.0)
    bucket = store.token_bucket("b", 10, 1, 60.0)
    assert window.acquire() and bucket.acquire(2)
    assert on_server(store, window, clock) == 5 and on_server(store, bucket, clock) == 5
    window.close()
    assert on_server(store, window, clock) == 9
    store.close()
    assert on_server(store, bucket, clock) == 8


def test_an_evicted_keys_stock_goes_back(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 5)
    spec = specs.FixedWindow(10, 60.0)
    keyed = store.partitioned(spec, name="keys", idle_timeout=1.0)
    state, rule = b"keys\x00" + _key_bytes("k"), rule_of(spec)
    assert keyed.acquire("k")
    assert store._backend.available(state, rule, clock.now_ns()) == 5
    clock.advance(1.5)  # the key's limiter is idle past idle_timeout: evicted, closed
    assert keyed.partition_count == 0
    store._returns.return_now()  # (off the evicting caller's path: the returns' next round)
    assert store._backend.available(state, rule, clock.now_ns()) == 9


def test_an_idle_stock_goes_back(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 5)
    limiter = store.fixed_window("w", 10, 60.0)
    assert limiter.acquire() and on_server(store, limiter, clock) == 5
    clock.advance_ns(IDLE_NS - 1)
    assert store._returns.return_now()  # not idle long enough: kept
    assert on_server(store, limiter, clock) == 5
    before = scripts_run(client)
    assert limiter.acquire() and scripts_run(client) == before  # used again: idle from now on
    clock.advance_ns(IDLE_NS - 1)
    assert store._returns.return_now()
    clock.advance_ns(1)
    assert not store._returns.return_now()  # given back: nothing held any more
    assert on_server(store, limiter, clock) == 8
    before = scripts_run(client)
    assert limiter.acquire() and scripts_run(client) == before + 1


def test_an_expired_stock_is_dropped_without_asking(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 5)
    limiter = store.fixed_window("w", 10, 0.5)
    assert limiter.acquire()
    clock.advance(0.6)
    before = scripts_run(client)
    assert not store._returns.return_now()
    assert scripts_run(client) == before
    assert on_server(store, limiter, clock) == 10  # a new window


# ---- the queue, threads, a fork ----


def test_a_refund_into_the_stock_serves_the_queue(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 2)
    limiter = store.fixed_window("w", 2, 60.0)
    first, second = limiter.acquire(), limiter.acquire()
    assert first and second and on_server(store, limiter, clock) == 0
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.wait(1, timeout=30.0)))
    waiter.start()
    deadline = time.monotonic() + 10
    while limiter.statistics().current_queued_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert limiter.statistics().current_queued_count == 1
    before = scripts_run(client)
    first._refund()  # into the stock: the queue's head is served from it
    waiter.join(10)
    assert got and got[0].acquired
    assert scripts_run(client) - before <= 1  # (at most the statistics read above racing)
    # An empty stock and server: the head asks when the window ends.
    waiter = threading.Thread(target=lambda: got.append(limiter.wait(1, timeout=300.0)))
    waiter.start()
    while limiter.statistics().current_queued_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    clock.advance(60.0)
    waiter.join(10)
    assert len(got) == 2 and got[1].acquired


def test_threads_share_a_stock_without_losing_or_doubling_permits(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 7)
    limiter = store.fixed_window("w", 1000, 3600.0)
    counts: list[int] = []

    def hammer() -> None:
        granted = 0
        while limiter.acquire():
            granted += 1
        counts.append(granted)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(counts) == 8 and sum(counts) == 1000
    assert on_server(store, limiter, clock) == 0


def test_a_forked_child_does_not_serve_its_parents_stock(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.fixed_window("w", 10, 60.0)
    assert limiter.acquire() and on_server(store, limiter, clock) == 6  # 3 here
    pid = os.fork()
    if pid == 0:  # the child: its acquire asks the server for a batch of its own
        code = 1
        try:
            code = 0 if limiter.acquire() and on_server(store, limiter, clock) == 2 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert on_server(store, limiter, clock) == 2
    before = scripts_run(client)
    assert all(limiter.acquire() for _ in range(3))  # the parent's 3 are still its own
    assert scripts_run(client) == before


# ---- other kinds of stores and clients ----


def test_concurrency_asks_the_server_every_time(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 4)
    limiter = store.concurrency("c", 3)
    assert not isinstance(limiter, ReservingLimiter)
    before = scripts_run(client)
    leases = [limiter.acquire(), limiter.acquire()]
    assert all(leases) and scripts_run(client) == before + 2
    assert on_server(store, limiter, clock) == 1
    for lease in leases:
        lease.release()
    assert on_server(store, limiter, clock) == 3


def test_reserve_must_be_a_positive_int(client: Any) -> None:
    for bad in (True, 1.5, "3"):
        with pytest.raises(TypeError, match="reserve"):
            RedisStore(client, reserve=bad)  # type: ignore[arg-type]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="reserve"):
            RedisStore(client, reserve=bad)
    assert "reserve=3" in repr(RedisStore(client, reserve=3))
    assert not isinstance(RedisStore(client).fixed_window("w", 3, 1.0), ReservingLimiter)


async def test_an_asyncio_client_reserves_too(quiet_redis: RedisProcess, clock: permits.ManualClock) -> None:
    made = quiet_redis.async_client()
    with quiet_redis.client() as reader:
        try:
            store = reserving(made, clock, 4)
            limiter = store.fixed_window("w", 10, 1.0)
            assert await limiter.acquire_async()
            assert on_sync(reader, store, limiter, clock) == 6
            before = scripts_run(reader)
            assert all([await limiter.acquire_async() for _ in range(3)])
            assert await limiter.wait_async()  # a wait's first attempt: the next batch
            assert scripts_run(reader) == before + 1
            assert on_sync(reader, store, limiter, clock) == 2
            store.close()  # the 3 left go back in a task of this loop
            await asyncio.gather(*store._background)
            assert on_sync(reader, store, limiter, clock) == 5
        finally:
            await made.aclose()


async def test_a_wait_is_served_from_the_stock_at_once(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 3)
    limiter = store.fixed_window("w", 3, 1.0)
    assert await limiter.wait_async()  # a batch of 3
    before = scripts_run(client)
    assert await limiter.wait_async(2)  # no server, no loop round trip
    assert scripts_run(client) == before
    assert limiter.statistics().total_successful_leases == 2
    waiting = asyncio.ensure_future(limiter.wait_async())  # empty: the server refuses, it queues
    await asyncio.sleep(0)
    assert not waiting.done() and limiter.statistics().current_queued_count == 1
    clock.advance(1.0)
    assert await asyncio.wait_for(waiting, 10)
    assert limiter.statistics().total_successful_leases == 3


def on_sync(reader: Any, store: RedisStore, limiter: Any, clock: permits.ManualClock | None) -> int:
    """The server's available permits of an asyncio store's limiter, read with a sync client."""
    backend = RedisBackend(reader, prefix=store.prefix)
    try:
        return backend.available(limiter._state, limiter._rule, None if clock is None else clock.now_ns())
    finally:
        backend.close()


async def test_a_batch_cancelled_in_flight_is_kept(own_redis: RedisProcess, clock: permits.ManualClock) -> None:
    made = own_redis.async_client()
    try:
        store = reserving(made, clock, 4, timeout=30.0)
        limiter = store.fixed_window("w", 10, 60.0)
        assert isinstance(limiter, ReservingLimiter)
        assert await limiter.acquire_async()  # (connected, scripts loaded)
        assert all([await limiter.acquire_async() for _ in range(3)])
        own_redis.pause()
        try:
            attempt = asyncio.ensure_future(limiter.acquire_async())
            await asyncio.sleep(0.2)  # sent, and waiting for the paused server
            attempt.cancel()
        finally:
            own_redis.resume()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        deadline = time.monotonic() + 10
        while limiter._stock is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with own_redis.client() as reader:
            assert on_sync(reader, store, limiter, clock) == 2
            before = scripts_run(reader)
            assert all([await limiter.acquire_async() for _ in range(4)])  # the whole batch is here
            assert scripts_run(reader) == before
        store.close()
    finally:
        await made.aclose()


@pytest.mark.parametrize("on_error", ["raise", "deny", "allow"])
def test_a_stock_serves_while_the_server_is_down(own_redis: RedisProcess, on_error: str) -> None:
    clock = permits.ManualClock()
    with own_redis.client() as made:
        store = reserving(made, clock, 3, on_error=on_error, timeout=0.5)
        limiter = store.fixed_window("w", 10, 60.0)
        assert limiter.acquire()
        own_redis.kill()
        assert limiter.acquire() and limiter.acquire()  # the stock needs no server
        start = time.monotonic()
        if on_error == "raise":
            with pytest.raises(permits.BackendError):
                limiter.acquire()
        else:
            lease = limiter.acquire()
            if on_error == "deny":
                assert not lease and lease.reason == "backend_unavailable"
            else:
                assert lease and lease.metadata["degraded"] is True
        assert time.monotonic() - start < 0.5 + 1.0
        refunded = limiter.acquire() if on_error == "allow" else None
        store.close()  # nothing to give back; a server gone is no error here
        if refunded is not None:
            refunded._refund()


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
async def test_a_cluster_reserves_on_each_names_node(redis_cluster: Any, mode: str) -> None:
    clock = permits.ManualClock()
    made = redis_cluster.client() if mode == "sync" else redis_cluster.async_client()
    try:
        store = reserving(made, clock, 3)
        limiters = [store.fixed_window(f"name-{i}", 5, 1.0) for i in range(12)]  # over every node
        for limiter in limiters:
            got = [await limiter.acquire_async() for _ in range(5)]  # batches of 3, then of 2
            assert all(got) and not await limiter.acquire_async()
            assert limiter.available_permits() == 0
        store.close()
    finally:
        if mode == "sync":
            made.close()
        else:
            await made.aclose()


# ---- concurrent callers share batches: no hoarding ----


def test_concurrent_async_callers_share_the_batch_in_flight(quiet_redis: RedisProcess) -> None:
    """Limit 100, reserve=10, 30 concurrent acquire_async: all granted (the server has the
    permits), the stock never above 10, and another process finds the rest."""

    async def main() -> None:
        client = quiet_redis.async_client()
        store = RedisStore(client, reserve=10, prefix=fresh_prefix())
        window = store.fixed_window("w", 100, 3600.0)
        leases = await asyncio.gather(*(window.acquire_async() for _ in range(30)))
        assert sum(map(bool, leases)) == 30, [lease.reason for lease in leases if not lease]
        stock = window._stock
        assert stock is None or stock.count <= 10
        other = RedisStore(quiet_redis.client(), prefix=store._backend._prefix.decode())
        assert other.fixed_window("w", 100, 3600.0).available_permits() >= 100 - 30 - 10
        other.close()
        await store.aclose()
        await client.aclose()

    asyncio.run(main())


def test_concurrent_threads_share_the_batch_in_flight(client: Any) -> None:
    store = reserving(client, None, 10)
    window = store.fixed_window("w", 100, 3600.0)
    start = threading.Barrier(16)
    granted: list[bool] = []

    def one() -> None:
        start.wait()
        granted.append(bool(window.acquire()))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted == [True] * 16
    stock = window._stock
    assert stock is None or stock.count <= 10
    assert on_server(store, window, None) >= 100 - 16 - 10
    store.close()


def test_a_caller_is_never_refused_while_the_stock_holds_permits(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 10)
    window = store.fixed_window("w", 12, 3600.0)
    other = reserving(client, clock, 1, prefix=store._backend._prefix.decode()).fixed_window("w", 12, 3600.0)
    assert window.acquire()  # a batch of 10: 9 in the stock, 2 left on the server
    assert other.acquire(2)  # the server's last 2
    for _ in range(9):  # the stock serves them all, whatever the server says
        assert window.acquire()
    assert not window.acquire()
    stock = window._stock
    assert stock is None or stock.count == 0


# ---- unused permits leave the windows they still weigh on ----


def test_a_busy_counters_unused_stock_leaves_the_previous_window(client: Any, clock: permits.ManualClock) -> None:
    """A sliding window counter's next window still weighs the permits its window counted: the
    permits a busy process took in a batch and did not use go back at its next take after the
    window (before its next batch), and no longer weigh on the others."""
    store, other = reserving(client, clock, 10), reserving(client, None, 1)
    other.close()  # (only its backend is used, to read the server)
    name = fresh_prefix()
    limiter = store.sliding_window_counter(name, 20, 10.0)
    assert limiter.acquire()  # a batch of 10: 1 used, 9 in stock until the window ends
    assert on_server(store, limiter, clock) == 10
    clock.advance(10.0)  # the next window, at its start: the previous one weighs in full
    assert on_server(store, limiter, clock) == 10  # (the 9 unused still count)
    assert limiter.acquire()  # the 9 go back first, then a new batch of 10
    assert on_server(store, limiter, clock) == 20 - 1 - 10  # previous: the 1 used; current: the batch
    clock.advance(5.0)
    assert on_server(store, limiter, clock) == 20 - 10 - 1 + 1 // 2


def test_an_idle_counters_expired_stock_leaves_the_previous_window(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 10)
    limiter = store.sliding_window_counter(fresh_prefix(), 20, 10.0)
    assert limiter.acquire() and limiter.acquire()
    clock.advance(10.0)
    assert not store._returns.return_now()  # the round gives the expired stock back
    assert on_server(store, limiter, clock) == 20 - 2


def test_a_sliding_windows_unused_stock_leaves_its_segment(client: Any, clock: permits.ManualClock) -> None:
    """A segment's count stays in the window for the segments after it: unused permits counted in
    it go back once the segment ends, and the window no longer holds them."""
    store = reserving(client, clock, 8)
    limiter = store.sliding_window(fresh_prefix(), 10, 4.0, 4)  # segments of 1 s
    assert limiter.acquire(3)  # a batch of 8 in segment 0: 3 used, 5 in stock
    assert on_server(store, limiter, clock) == 2
    clock.advance(1.0)  # segment 1: segment 0 is in the window for 3 more seconds
    assert limiter.acquire()  # the 5 go back first; a new batch, counted in segment 1
    assert on_server(store, limiter, clock) == 10 - 3 - 7
    clock.advance(3.0)  # segment 0 leaves the window
    assert on_server(store, limiter, clock) == 10 - 7


def test_a_fixed_windows_expired_stock_asks_nothing(client: Any, clock: permits.ManualClock) -> None:
    store = reserving(client, clock, 10)
    limiter = store.fixed_window(fresh_prefix(), 20, 10.0)
    assert limiter.acquire()
    clock.advance(10.0)
    before = scripts_run(client)
    assert not store._returns.return_now()  # its window is over: its count weighs nothing
    assert scripts_run(client) == before and on_server(store, limiter, clock) == 20


def test_a_lease_refunded_after_its_window_is_a_refund(client: Any, clock: permits.ManualClock) -> None:
    """Only a stock's permits, never used, leave the previous window: a lease's refund after its
    window is the engine's (nothing comes back to the counter then)."""
    store = reserving(client, clock, 1)
    limiter = store.sliding_window_counter(fresh_prefix(), 20, 10.0)
    lease = limiter.acquire()
    assert lease
    clock.advance(10.0)
    lease._refund()  # (a chain's refund, as above)
    assert on_server(store, limiter, clock) == 19


def test_a_settle_gives_back_to_the_stock(client: Any, clock: permits.ManualClock) -> None:
    """lease.settle(n) (issue 42, item 1): what the lease did not use joins this process's stock."""
    store = reserving(client, clock, reserve=5)
    limiter = store.limiter(fresh_prefix(), specs.FixedWindow(10, 1.0))
    lease = limiter.acquire(5)
    lease.settle(1)  # four back in the stock
    before = scripts_run(client)
    assert all(limiter.acquire(1) for _ in range(4))
    assert scripts_run(client) == before  # served here
    assert limiter.acquire(5)  # the other five: a batch of the server's
    assert not limiter.acquire(1)
