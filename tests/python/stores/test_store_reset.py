"""keyed.reset(key) on Redis and PostgreSQL (issue 42, item 5): the key's time-based state is
forgotten on the server, for every process (one that never used the key may reset it); nothing
granted before comes back into it; a concurrency limit's held leases stay held; a reserving store's
stock of the old state is not served on top of the new one; a server that fails says so."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import permits
from permits.errors import BackendError

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import BOUND, TIMEOUT, Server, fresh_name

SPECS = {
    "token_bucket": permits.specs.TokenBucket(10, 10, 60.0),
    "fixed_window": permits.specs.FixedWindow(10, 60.0),
    "sliding_window": permits.specs.SlidingWindow(10, 60.0, 4),
    "sliding_log": permits.specs.SlidingLog(10, 60.0),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(10, 60.0),
}


def take_all(keyed: Any, key: str, limit: int) -> list[permits.Lease]:
    leases = [keyed.acquire(key) for _ in range(limit)]
    assert all(leases)
    assert not keyed.acquire(key)
    return leases


@pytest.mark.parametrize("kind", list(SPECS))
def test_a_reset_from_another_process_gives_the_key_its_limit_again_and_no_more(
    shared_server: Server, kind: str
) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reset")
    mine = shared_server.store(clock=clock).partitioned(SPECS[kind], name=name)
    support = shared_server.store(clock=clock).partitioned(SPECS[kind], name=name)  # never used alice
    before = take_all(mine, "alice", 10)
    take_all(mine, "bob", 10)
    clock.advance(0.25)
    support.reset("alice")
    assert mine.available_permits("alice") == 10
    take_all(mine, "alice", 10)  # exactly its limit
    for lease in before:  # granted before the reset: their refunds give nothing back
        lease.settle(0)
    assert mine.available_permits("alice") == 0
    assert not mine.acquire("alice")
    assert not mine.acquire("bob"), "another key was reset too"


def test_a_concurrency_keys_held_leases_stay_held(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reset")
    jobs = shared_server.store(clock=clock).partitioned(permits.specs.Concurrency(2), name=name, lease_ttl=600.0)
    held = take_all(jobs, "k", 2)
    jobs.reset("k")  # the work they hold runs on
    assert jobs.available_permits("k") == 0 and not jobs.acquire("k")
    for lease in held:
        lease.release()
    assert jobs.available_permits("k") == 2


def test_a_reset_serves_a_waiting_thread_of_this_process(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    keyed = shared_server.store(clock=clock).partitioned(
        permits.Partition.fixed_window(None, 2, 60.0, queue_limit=1), name=fresh_name("reset")
    )
    take_all(keyed, "k", 2)
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(keyed.wait("k", timeout=30.0)))
    waiter.start()
    deadline = time.monotonic() + 10
    while keyed.statistics("k").current_queued_count == 0:
        assert time.monotonic() < deadline, "the wait never queued"
        waiter.join(0.01)
    keyed.reset("k")  # the clock never moves: only the reset can grant it
    waiter.join(10)
    assert not waiter.is_alive() and got and got[0], got
    assert keyed.available_permits("k") == 1


async def test_an_asyncio_clients_reset_lands_in_a_task_of_the_loop(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    name = fresh_name("reset")
    async with shared_server.async_store(clock=clock) as store:
        keyed = store.partitioned(SPECS["fixed_window"], name=name)
        for _ in range(10):
            assert await keyed.acquire_async("k")
        keyed.reset("k")  # never a blocking call on the loop's thread: a task of it
        await store.aclose()  # the tasks on their way have landed
    assert shared_server.store(clock=clock).partitioned(SPECS["fixed_window"], name=name).available_permits("k") == 10


async def test_an_asyncio_clients_reset_serves_the_keys_queued_wait_once_it_lands(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    async with shared_server.async_store(clock=clock) as store:
        keyed = store.partitioned(
            permits.Partition.fixed_window(None, 2, 60.0, queue_limit=1), name=fresh_name("reset")
        )
        for _ in range(2):
            assert await keyed.acquire_async("k")
        waiting = asyncio.ensure_future(keyed.wait_async("k"))
        deadline = time.monotonic() + 10
        while keyed.statistics("k").current_queued_count == 0:
            assert time.monotonic() < deadline, "the wait never queued"
            await asyncio.sleep(0.01)
        keyed.reset("k")  # the clock never moves: only the reset, once it lands, can grant it
        lease = await asyncio.wait_for(waiting, 10)
        assert lease, lease.reason


async def test_an_asyncio_clients_reset_outside_a_loop_says_where_it_works(shared_server: Server) -> None:
    async with shared_server.async_store() as store:
        keyed = store.partitioned(SPECS["fixed_window"], name=fresh_name("reset"))
        with pytest.raises(TypeError, match="running event loop"):
            await asyncio.to_thread(keyed.reset, "k")  # a thread of its own: no loop running there


@pytest.mark.parametrize("shared_server", ["redis"], indirect=True)  # reserve= is RedisStore's
def test_a_reserving_stores_stock_is_not_served_after_a_reset(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    keyed = shared_server.store(clock=clock, reserve=5).partitioned(SPECS["fixed_window"], name=fresh_name("reset"))
    assert keyed.acquire("k")  # a batch of 5: 4 left in this process's stock
    clock.advance(0.25)
    keyed.reset("k")
    granted = 0
    while keyed.acquire("k"):
        granted += 1
        assert granted <= 10, "more than the limit after the reset"
    assert granted == 10


def test_a_reset_against_a_server_that_fails_raises_in_time(own_server: Server) -> None:
    keyed = own_server.store(timeout=TIMEOUT).partitioned(SPECS["fixed_window"], name=fresh_name("reset"))
    assert keyed.acquire("k")
    with own_server.paused():
        started = time.monotonic()
        with pytest.raises(BackendError):
            keyed.reset("k")
        assert time.monotonic() - started < BOUND
    keyed.reset("k")  # the server back: it resets
    assert keyed.available_permits("k") == 10
