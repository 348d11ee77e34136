"""RedisStore and PostgresStore with an asyncio client (redis.asyncio.Redis; a
psycopg_pool.AsyncConnectionPool): acquire_async decides as the engine does, ``async with``
releases, wait_async is served when a permit comes back here or in another process, a wait
cancelled while its step is on the wire leaks nothing, and a release() from sync code (inside
the loop, or outside any) gives the permit back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

import permits

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import BOUND, Server, fresh_name, settled

SPECS: dict[str, Any] = {
    "token_bucket": permits.specs.TokenBucket(4, 2, 1.0),
    "fixed_window": permits.specs.FixedWindow(3, 1.0),
    "sliding_window": permits.specs.SlidingWindow(5, 1.0, 3),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(4, 1.0),
    "concurrency": permits.specs.Concurrency(3),
}
TTL = 30.0


def _same(got: permits.Lease, expected: permits.Lease, context: object) -> None:
    assert bool(got) == bool(expected) and got.reason == expected.reason, (context, got, expected)
    if expected.retry_after is None:
        assert got.retry_after is None, (context, got)
    else:
        assert got.retry_after is not None
        assert abs(got.retry_after - expected.retry_after) * 1e9 <= 1, (context, got, expected)


@pytest.mark.parametrize("kind", SPECS)
async def test_acquire_async_decides_as_the_engine(shared_server: Server, kind: str) -> None:
    clock = permits.ManualClock()
    spec = SPECS[kind]
    engine = spec.limiter(clock=clock)
    async with shared_server.async_store(clock=clock) as store:
        limiter = store.limiter(fresh_name(kind), spec)
        held: list[tuple[permits.Lease, permits.Lease]] = []
        for step, (n, advance) in enumerate([(1, 0.0), (2, 0.0), (2, 0.0), (1, 0.3), (0, 0.0), (3, 0.5), (1, 1.0)]):
            clock.advance(advance)
            got, expected = await limiter.acquire_async(n), engine.acquire(n)
            _same(got, expected, (kind, step, n))
            assert limiter.available_permits() == engine.available_permits(), (kind, step)  # as last seen
            held.append((got, expected))
        if kind == "concurrency":
            for got, expected in held:
                got.release()
                expected.release()
            await settled(store)
            reader = shared_server.reader(clock)
            assert reader.limiter(limiter.name, spec).available_permits() == engine.available_permits() == 3


async def test_async_with_releases_on_exit(shared_server: Server) -> None:
    reader = shared_server.reader()
    async with shared_server.async_store() as store:
        cc = store.concurrency(fresh_name(), 2, lease_ttl=TTL)
        seen = reader.concurrency(cc.name, 2, lease_ttl=TTL)
        async with cc.acquire_async() as lease:
            assert lease
            assert seen.available_permits() == 1
            async with cc.wait_async(1) as other:
                assert other and seen.available_permits() == 0
                assert not await cc.acquire_async()
            await settled(store)
            assert seen.available_permits() == 1
        await settled(store)
        assert seen.available_permits() == 2


async def _queued(limiter: Any, count: int = 1) -> None:
    async with asyncio.timeout(BOUND):
        while limiter.statistics().current_queued_count < count:
            await asyncio.sleep(0.002)


async def test_wait_async_is_served_when_a_lease_is_released_here(shared_server: Server) -> None:
    async with shared_server.async_store() as store:
        cc = store.concurrency(fresh_name(), 1, lease_ttl=TTL)
        held = await cc.acquire_async()
        assert held
        waits = []
        for count in (1, 2):  # one after the other: both asking at once, either could queue first
            waits.append(asyncio.ensure_future(cc.wait_async()))
            await _queued(cc, count)
        held.release()
        async with asyncio.timeout(BOUND):
            first = await waits[0]  # the oldest first
        assert first and not waits[1].done()
        first.release()
        async with asyncio.timeout(BOUND):
            second = await waits[1]
        assert second
        second.release()


async def test_a_timed_wait_async_is_served_when_its_time_comes(shared_server: Server) -> None:
    clock = permits.ManualClock()
    async with shared_server.async_store(clock=clock) as store:
        fw = store.fixed_window(fresh_name(), 2, 10.0)
        assert await fw.acquire_async(2)
        wait = asyncio.ensure_future(fw.wait_async(2))
        await _queued(fw)
        clock.advance(9.999)
        await asyncio.sleep(0.05)
        assert not wait.done()  # (asked again at 9.999 s at the latest: refused)
        clock.advance(0.001)
        async with asyncio.timeout(BOUND):
            assert await wait


async def test_wait_async_is_served_when_another_connection_releases(shared_server: Server) -> None:
    other = shared_server.store()  # a sync client of its own: another connection
    async with shared_server.async_store() as store:
        name = fresh_name()
        held = other.concurrency(name, 1, lease_ttl=TTL).acquire()
        assert held
        cc = store.concurrency(name, 1, lease_ttl=TTL)
        wait = asyncio.ensure_future(cc.wait_async())
        await _queued(cc)
        await asyncio.sleep(0.05)
        assert not wait.done()
        held.release()
        async with asyncio.timeout(BOUND + 0.5):  # its head asks at most 0.5 s apart
            lease = await wait
        assert lease
        lease.release()


#: A process of its own holding the only permit until told to release it.
_HOLDER = """
import sys
{store}
lease = store.concurrency({name!r}, 1, lease_ttl=30.0).acquire()
print("held" if lease else "refused", flush=True)
sys.stdin.readline()
lease.release()
print("released", flush=True)
"""


def _store_code(server: Server) -> str:
    process: Any = server.process
    if server.kind == "redis":
        client = f"redis.Redis(host={process.host!r}, port={process.port})"
        return f"import redis, permits.redis\nstore = permits.redis.RedisStore({client}, prefix={server.namespace!r})"
    store = f"permits.postgres.PostgresStore({process.conninfo!r}, table={server.namespace!r})"
    return f"import permits.postgres\nstore = {store}"


async def test_wait_async_is_served_when_another_process_releases(shared_server: Server) -> None:
    name = fresh_name()
    script = _HOLDER.format(store=_store_code(shared_server), name=name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        async with asyncio.timeout(30):
            assert await child.stdout.readline() == b"held\n"
        async with shared_server.async_store() as store:
            cc = store.concurrency(name, 1, lease_ttl=TTL)
            assert not await cc.acquire_async()
            wait = asyncio.ensure_future(cc.wait_async())
            await _queued(cc)
            child.stdin.write(b"release\n")
            await child.stdin.drain()
            async with asyncio.timeout(30):
                assert await child.stdout.readline() == b"released\n"
            async with asyncio.timeout(BOUND + 0.5):
                lease = await wait
            assert lease
            lease.release()
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


@pytest.mark.parametrize("member", ["acquire_async", "wait_async"])
@pytest.mark.parametrize("kind", ["concurrency", "fixed_window"])
async def test_a_step_cancelled_on_the_wire_leaks_nothing(shared_server: Server, kind: str, member: str) -> None:
    """The server is slow (it holds every step 0.3 s): the acquisition is cancelled after its
    step was sent; the server grants it anyway, and the grant goes back."""
    clock = permits.ManualClock()
    spec = permits.specs.Concurrency(2) if kind == "concurrency" else permits.specs.FixedWindow(2, 100.0)
    reader = shared_server.reader(clock)
    async with shared_server.async_store(clock=clock, timeout=5.0) as store:
        limiter = store.limiter(fresh_name(kind), spec, lease_ttl=TTL)
        first = await limiter.acquire_async()  # the state exists; one permit left (kept: a lease
        assert first  # dropped unreleased would be given back)
        given_back: list[Any] = []
        give_back = limiter._give_back
        limiter._give_back = lambda *args: (given_back.append(args), give_back(*args))
        shared_server.hold(0.3)
        attempt = asyncio.ensure_future(getattr(limiter, member)())
        await asyncio.sleep(0.1)  # sent, not answered
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        async with asyncio.timeout(BOUND + 0.3):
            while not given_back:  # the late grant, given back
                await asyncio.sleep(0.01)
        await settled(store)
        assert reader.limiter(limiter.name, spec).available_permits() == 1
        assert limiter.statistics().current_queued_count == 0
        again = await limiter.acquire_async()
        assert again
        assert not await limiter.acquire_async()
        first.release()
        again.release()


async def test_a_release_from_sync_code_inside_the_loop_gives_the_permit_back(shared_server: Server) -> None:
    reader = shared_server.reader()
    sync_store = shared_server.store()
    async with shared_server.async_store() as store:
        cc = store.concurrency(fresh_name(), 2, lease_ttl=TTL)
        seen = reader.concurrency(cc.name, 2, lease_ttl=TTL)
        first, second = await cc.acquire_async(), await cc.acquire_async()
        assert first and second and seen.available_permits() == 0

        def plain_code(lease: permits.Lease) -> None:
            lease.release()  # a sync callee of a coroutine: the release is a task of the loop

        plain_code(first)
        asyncio.get_running_loop().call_soon(second.release)  # a callback of the loop
        await asyncio.sleep(0)
        await settled(store)
        assert seen.available_permits() == 2
        # A sync client's release inside the loop is done when release() returns (Redis); a store
        # that serves both (a PostgreSQL conninfo) never blocks the loop: its release is a task too.
        scc = sync_store.concurrency(cc.name, 2, lease_ttl=TTL)
        lease = scc.acquire()
        assert lease and seen.available_permits() == 1
        plain_code(lease)
        if sync_store._backend.is_async is None:
            await asyncio.sleep(0)
            await settled(sync_store)
        assert seen.available_permits() == 2


def test_a_release_outside_any_loop_comes_back_by_lease_ttl(shared_server: Server) -> None:
    """An asyncio client's lease released after its loop ended cannot reach the server: the
    lease expires there lease_ttl after its last renewal."""
    clock = permits.ManualClock()
    name = fresh_name()

    async def take() -> permits.Lease:
        async with shared_server.async_store(clock=clock) as store:
            lease = await store.concurrency(name, 2, lease_ttl=TTL).acquire_async()
            assert lease
            return lease

    lease = asyncio.run(take())
    lease.release()
    seen = shared_server.reader(clock).concurrency(name, 2, lease_ttl=TTL)
    assert seen.available_permits() == 1
    clock.advance(TTL - 0.001)
    assert seen.available_permits() == 1
    clock.advance(0.001)
    assert seen.available_permits() == 2


async def test_a_lease_dropped_without_release_gives_its_permits_back_in_its_loop(
    shared_server: Server, caplog: Any
) -> None:
    import gc
    import logging

    clock = permits.ManualClock()  # never advanced: nothing comes back by lease_ttl here
    name = fresh_name("dropped")
    async with shared_server.async_store(clock=clock) as store:
        jobs = store.concurrency(name, 2, lease_ttl=TTL)
        lease = await jobs.acquire_async(2)
        assert lease
        with caplog.at_level(logging.WARNING, logger="permits"):
            del lease
            gc.collect()
        for _ in range(10):  # the give-back is scheduled on this loop, then runs as a task of it
            await asyncio.sleep(0)
        await settled(store)
        reader = shared_server.store(clock=clock).concurrency(name, 2, lease_ttl=TTL)
        assert reader.available_permits() == 2  # given back by a task of this loop, not by lease_ttl
        # (only this lease's: the collection may finalize another test's dropped lease meanwhile)
        assert [r.getMessage() for r in caplog.records if repr(name) in r.getMessage()] == [
            f"a lease of 2 permit(s) of {name!r} was dropped without release(): its permits are given back now"
        ]
        await store.aclose()
