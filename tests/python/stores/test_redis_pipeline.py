"""The asyncio takes of many tasks on one loop, sent together (redis_pipeline): they share a few
connections, each reaches the server once, a take given up before it is written is never sent, one
given up on the wire is given back, a lost function is loaded again, a hung server fails the batch at
the store's timeout and the next takes get a connection of their own, and connections killed mid-batch
hang no caller and grant no more than the limit."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio

from permits.errors import BackendError
from permits.redis import RedisStore

from _child import run_ok
from _store_support import BOUND

TASKS = 64


def fcalls(admin: Any) -> int:
    return int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


def connections(admin: Any, name: str) -> int:
    return sum(1 for entry in admin.client_list() if entry.get("name") == name)


async def shows(reader: Any, available: int) -> None:
    """Until ``reader`` (a sync limiter) finds ``available`` permits (the caller bounds the wait)."""
    while await asyncio.to_thread(reader.available_permits) != available:
        await asyncio.sleep(0.02)


@pytest.fixture
def admin(redis_server: Any) -> Any:
    with redis_server.client(socket_timeout=5.0) as made:
        yield made


@pytest.fixture
async def named_client(redis_server: Any) -> AsyncIterator[tuple[Any, str]]:
    name = f"pipe-{uuid.uuid4().hex[:8]}"
    client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port, client_name=name)
    yield client, name
    await client.aclose()


def limiters(server: Any, client: Any, limit: int, **options: Any) -> tuple[Any, Any]:
    """A fixed window of ``limit`` on ``client`` (asyncio), and the same seen through a sync client."""
    prefix = f"pipe:{uuid.uuid4().hex[:8]}:"
    limiter = RedisStore(client, prefix=prefix, **options).fixed_window("fw", limit, 100.0)
    reader = RedisStore(redis.Redis(host=server.host, port=server.port), prefix=prefix)
    return limiter, reader.fixed_window("fw", limit, 100.0)


async def test_many_tasks_takes_share_a_few_connections_and_each_reaches_the_server_once(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, name = named_client
    limiter, _ = limiters(redis_server, client, 40)
    assert await limiter.acquire_async()  # (the first step asks the eviction policy, loads the library)
    before = fcalls(admin)
    leases = await asyncio.gather(*(limiter.acquire_async() for _ in range(TASKS)))
    assert sum(1 for lease in leases if lease) == 39
    assert fcalls(admin) - before == TASKS
    # Each take in a connection of its own would have opened one per task (64).
    assert connections(admin, name) <= 3


async def test_a_take_given_up_before_it_is_written_is_never_sent(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 5)
    assert await limiter.acquire_async()
    before = fcalls(admin)
    attempts = [asyncio.ensure_future(limiter.acquire_async()) for _ in range(3)]
    await asyncio.sleep(0)  # (each attempt queued its take; the pipeline writes them at the loop's next turn)
    for attempt in attempts:
        attempt.cancel()
    for attempt in attempts:
        with pytest.raises(asyncio.CancelledError):
            await attempt
    assert await limiter.acquire_async()
    assert fcalls(admin) - before == 1  # (only the last one)
    assert reader.available_permits() == 3


async def test_a_take_given_up_on_the_wire_is_given_back(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 2)
    assert await limiter.acquire_async()
    admin.execute_command("CLIENT", "PAUSE", 300, "ALL")
    attempts = [asyncio.ensure_future(limiter.acquire_async()) for _ in range(3)]
    await asyncio.sleep(0.1)  # (written; the server holds them)
    for attempt in attempts:
        attempt.cancel()
    async with asyncio.timeout(BOUND):
        await shows(reader, 1)  # (the one late grant, given back)
    assert await limiter.acquire_async()
    assert not await limiter.acquire_async()


async def test_a_lost_function_is_loaded_again_for_the_takes_in_flight(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 30)
    assert await limiter.acquire_async()
    admin.function_flush()
    leases = await asyncio.gather(*(limiter.acquire_async() for _ in range(TASKS)))
    assert sum(1 for lease in leases if lease) == 29
    assert reader.available_permits() == 0


async def test_a_take_given_up_while_taken_again_is_given_back(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    """The pipeline's FCALL finds the function gone; the backend's own step takes it again (and
    loads the library); the caller gives up meanwhile: that step's grant goes back."""
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 3)
    assert await limiter.acquire_async()
    backend = limiter._backend
    again, taken = asyncio.Event(), asyncio.Event()
    take_async = backend.take_async

    async def slow_take_async(*args: Any) -> Any:
        again.set()
        await asyncio.sleep(0.2)  # (a slow server: the caller gives up meanwhile)
        try:
            return await take_async(*args)
        finally:
            taken.set()

    backend.take_async = slow_take_async
    admin.function_flush()
    attempt = asyncio.ensure_future(limiter.acquire_async())
    async with asyncio.timeout(BOUND):
        await again.wait()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    async with asyncio.timeout(BOUND):
        await taken.wait()
        await shows(reader, 2)  # (granted, then given back)
    backend.take_async = take_async
    assert await limiter.acquire_async()
    assert await limiter.acquire_async()
    assert not await limiter.acquire_async()


async def test_a_hung_server_fails_the_batch_in_time_and_leaves_no_reply_for_the_next(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, _ = limiters(redis_server, client, 1, timeout=0.3)
    fresh, _ = limiters(redis_server, client, 1, timeout=0.3)
    assert await limiter.acquire_async()
    assert await fresh.acquire_async()  # (its step made: its takes go down the pipeline too)
    admin.execute_command("CLIENT", "PAUSE", 800, "ALL")
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"did not answer within 0\.3 s"):
        await asyncio.gather(*(fresh.acquire_async() for _ in range(8)))
    assert time.monotonic() - started < BOUND
    await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # (the pause over)
    for _ in range(3):  # a late grant read as these refusals' replies would be over-admission
        assert not await limiter.acquire_async()


async def test_takes_still_queued_at_their_deadline_fail_in_time_unsent(
    redis_server: Any, admin: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 10, timeout=0.3)
    # The first step learns the server (its eviction policy, the library): on a loaded machine that
    # may take longer than the 0.3 s bound, which is for the takes below.
    for _ in range(20):
        try:
            if await limiter.acquire_async():
                break
        except BackendError:
            continue
    left = reader.available_permits()
    assert left < 10
    before = fcalls(admin)
    attempts = [asyncio.ensure_future(limiter.acquire_async()) for _ in range(5)]
    await asyncio.sleep(0)  # (each queued its take; the pipeline writes them at the loop's next turn)
    time.sleep(0.4)  # the loop's thread busy past the store's timeout
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    assert all(isinstance(outcome, BackendError) for outcome in outcomes), outcomes
    assert fcalls(admin) == before  # (none was sent: nothing counted for them)
    assert reader.available_permits() == left
    assert await limiter.acquire_async()


async def test_a_burst_of_takes_from_one_loop_is_decided_exactly(
    redis_server: Any, named_client: tuple[Any, str]
) -> None:
    client, _ = named_client
    limiter, reader = limiters(redis_server, client, 15_000, timeout=5.0)
    assert await limiter.acquire_async()
    leases = await asyncio.gather(*(limiter.acquire_async() for _ in range(20_000)))
    assert sum(1 for lease in leases if lease) == 14_999
    assert reader.available_permits() == 0


async def test_connections_killed_mid_batch_hang_no_caller_and_grant_no_more_than_the_limit(own_redis: Any) -> None:
    limit = 2_000
    client = redis.asyncio.Redis(host=own_redis.host, port=own_redis.port)
    admin = redis.Redis(host=own_redis.host, port=own_redis.port, socket_timeout=5.0)
    limiter, reader = limiters(own_redis, client, limit, timeout=2.0)
    assert await limiter.acquire_async()
    granted, answered, failed = 1, 0, 0
    done = asyncio.Event()

    async def worker() -> None:
        nonlocal granted, answered, failed
        while not done.is_set():
            try:
                lease = await limiter.acquire_async()
            except BackendError:
                failed += 1
                continue
            answered += 1
            granted += bool(lease)

    async def killer() -> None:
        for _ in range(10):
            await asyncio.sleep(0.05)
            await asyncio.to_thread(admin.execute_command, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        done.set()

    async with asyncio.timeout(30):
        await asyncio.gather(killer(), *(worker() for _ in range(TASKS)))
    assert answered > 0
    assert granted <= limit
    assert granted + reader.available_permits() <= limit  # (a take retried after a kill counts at most once more)
    admin.close()
    await client.aclose()


THREADS_SCENARIO = """
import asyncio, os, threading
import redis, redis.asyncio
from permits.redis import RedisStore
HOST, PORT, PREFIX = os.environ["HOST"], int(os.environ["PORT"]), os.environ["PREFIX"]
granted = []

def one_thread():
    async def main():
        client = redis.asyncio.Redis(host=HOST, port=PORT)
        limiter = RedisStore(client, prefix=PREFIX).fixed_window("fw", 300, 3600.0)
        async def task():
            return sum([bool(await limiter.acquire_async()) for _ in range(10)])
        got = sum(await asyncio.gather(*(task() for _ in range(32))))
        await client.aclose()
        return got
    granted.append(asyncio.run(main()))

threads = [threading.Thread(target=one_thread) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert len(granted) == 4 and sum(granted) == 300, granted  # 1,280 asked of 300
reader = RedisStore(redis.Redis(host=HOST, port=PORT), prefix=PREFIX).fixed_window("fw", 300, 3600.0)
assert reader.available_permits() == 0
print("ok")
"""


def test_threads_each_running_a_loop_share_one_exact_limit(redis_server: Any) -> None:
    env = {"HOST": redis_server.host, "PORT": str(redis_server.port), "PREFIX": f"pipe:{uuid.uuid4().hex[:8]}:"}
    assert run_ok(THREADS_SCENARIO, env=env).lines()[-1] == "ok"


ENDED_SCENARIO = """
import asyncio, os
import redis, redis.asyncio
from permits.redis import RedisStore
HOST, PORT, PREFIX = os.environ["HOST"], int(os.environ["PORT"]), os.environ["PREFIX"]

async def main():
    client = redis.asyncio.Redis(host=HOST, port=PORT)
    limiter = RedisStore(client, prefix=PREFIX).fixed_window("fw", 1000, 3600.0)
    assert await limiter.acquire_async()
    for _ in range(200):  # in flight as the loop ends: asyncio.run cancels them
        asyncio.ensure_future(limiter.acquire_async())
    await asyncio.sleep(0)

asyncio.run(main())

async def again():
    client = redis.asyncio.Redis(host=HOST, port=PORT)
    limiter = RedisStore(client, prefix=PREFIX).fixed_window("fw", 1000, 3600.0)
    leases = await asyncio.gather(*(limiter.acquire_async() for _ in range(50)))
    await client.aclose()
    return sum(1 for lease in leases if lease)

assert asyncio.run(again()) == 50
print("ok")
"""


def test_a_loop_ended_with_takes_in_flight_hangs_nothing_and_leaves_no_task_behind(redis_server: Any) -> None:
    env = {"HOST": redis_server.host, "PORT": str(redis_server.port), "PREFIX": f"pipe:{uuid.uuid4().hex[:8]}:"}
    child = run_ok(ENDED_SCENARIO, env=env)
    assert child.lines()[-1] == "ok"
    assert "Task was destroyed" not in child.stderr and "never retrieved" not in child.stderr, child.stderr
