"""RedisStore(reserve=N) on the server's clock, in real time.

Several processes (spawned) hammer one limiter with reserve=N: one alone asks for more than the
limit, so that windows run out; the others ask slowly, so that their batches outlive the windows
they were counted in (served later, they would be over the next window's limit). Each grant is known to have
happened between two readings of CLOCK_REALTIME (Redis's TIME on this host); the grants that
certainly fall inside a window, segment or period must obey the limit there, as single takes
would: reserving never admits more. And an idle limiter's stock goes back to the server by itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from permits._stores.redis_backend import RedisBackend
from permits._stores.returns import IDLE_NS, ROUND_S
from permits.redis import RedisStore

from _redis_support import fresh_prefix
from _reserve_worker import hammer
from _servers.redis import RedisProcess

RUN_S = 1.6
LIMIT = 60
RESERVE = 15
#: Each process acquires every pace seconds: the first as fast as it can (far more than the limit of 60
#: a window, however loaded the machine: a paced sleep overshoots under load, and then no window ran
#: out), the others 12 times a window, a batch lasting them 1.25 windows.
PACES = (0.0, 1 / 60, 1 / 60)
#: The spec of each kind (window or period 0.2 s; the sliding window's segments 0.1 s). The token
#: bucket refills fully every period: it runs out as the windows do.
PARAMS: dict[str, tuple[Any, ...]] = {
    "token_bucket": (LIMIT, LIMIT, 0.2),
    "fixed_window": (LIMIT, 0.2),
    "sliding_window": (LIMIT, 0.2, 2),
    "sliding_window_counter": (LIMIT, 0.2),
}

Grant = tuple[int, int]  # ns before and after the acquire that granted it


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager, spawn.Pool(len(PACES)) as made:
        yield made, manager


def run(pool: Any, server: RedisProcess, kind: str) -> tuple[list[Grant], int, int]:
    """The grants of every process, the refusals, and the state's anchor (ns, server time)."""
    made, manager = pool
    prefix = f"live-{uuid.uuid4().hex[:8]}:"
    # They start together once each is ready (a process importing permits on a loaded machine can
    # take longer than any head start: then one ran alone, or none ran out a window).
    together = manager.Barrier(len(PACES))
    args = [(server.port, prefix, kind, PARAMS[kind], RESERVE, together, int(RUN_S * 1e9), pace) for pace in PACES]
    results = made.starmap(hammer, args)
    grants = [grant for got, _ in results for grant in got]
    refused = sum(count for _, count in results)
    with server.client() as client:
        backend = RedisBackend(client, prefix=prefix)
        anchor = int(client.hget(backend.keys_of("hammer")[0], "anchor"))
    return grants, refused, anchor


def certain(grants: list[Grant], anchor: int, length: int) -> dict[int, list[Grant]]:
    """The grants whose acquire lay entirely inside one stretch of ``length`` ns, by its index."""
    inside: dict[int, list[Grant]] = {}
    for before, after in grants:
        index = (before - anchor) // length
        if before >= anchor and (after - anchor) // length == index:
            inside.setdefault(index, []).append((before, after))
    return inside


def assert_obeyed(kind: str, grants: list[Grant], anchor: int) -> None:
    params = PARAMS[kind]
    period = round(params[1 if kind != "token_bucket" else 2] * 1e9)
    if kind == "fixed_window":
        for index, inside in certain(grants, anchor, period).items():
            assert len(inside) <= LIMIT, f"window {index}: {len(inside)} grants"
    elif kind == "sliding_window":
        segments = params[2]
        by_segment = {i: len(g) for i, g in certain(grants, anchor, period // segments).items()}
        for last in by_segment:
            total = sum(by_segment.get(i, 0) for i in range(last - segments + 1, last + 1))
            assert total <= LIMIT, f"segments {last - segments + 1}..{last}: {total} grants"
    elif kind == "sliding_window_counter":
        by_window = certain(grants, anchor, period)
        for index, inside in by_window.items():
            previous = len(by_window.get(index - 1, []))
            start = anchor + index * period
            for before, after in inside:
                # Certainly before this grant: those whose acquire ended before it began.
                current = sum(1 for _, other_after in inside if other_after < before)
                elapsed = after - start  # the latest it can have been: the estimate's lowest
                assert previous * (period - elapsed) + (current + 1) * period <= LIMIT * period, (
                    f"window {index}: previous {previous}, {current} before a grant at {elapsed} ns"
                )
    else:
        amount = params[1]
        by_period = {i: len(g) for i, g in certain(grants, anchor, period).items()}
        for first in by_period:
            for last in by_period:
                if last >= first:
                    total = sum(by_period.get(i, 0) for i in range(first, last + 1))
                    assert total <= LIMIT + (last - first) * amount, f"periods {first}..{last}: {total} grants"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(PARAMS))
def test_processes_reserving_never_exceed_the_limit(pool: Any, redis_server: RedisProcess, kind: str) -> None:
    grants, refused, anchor = run(pool, redis_server, kind)
    assert refused > 0, "the processes should ask for more than the limit"
    assert len(grants) > LIMIT * 2, f"only {len(grants)} grants"
    assert_obeyed(kind, grants, anchor)


def on_server(store: RedisStore, limiter: Any) -> int:
    return int(store._backend.available(limiter._state, limiter._rule, None))


def test_an_idle_stock_goes_back_by_itself(redis_server: RedisProcess) -> None:
    with redis_server.client() as client:
        store = RedisStore(client, reserve=5, prefix=fresh_prefix())
        limiter = store.fixed_window("w", 10, 3600.0)
        assert limiter.acquire()
        assert on_server(store, limiter) == 5  # (read well within a second of the batch)
        deadline = time.monotonic() + IDLE_NS / 1e9 + ROUND_S + 1.0
        while on_server(store, limiter) != 9 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert on_server(store, limiter) == 9
        while store._returns._thread is not None and time.monotonic() < deadline + ROUND_S:
            time.sleep(0.02)
        assert store._returns._thread is None  # nothing held: the thread has ended
        assert limiter.acquire() and on_server(store, limiter) == 4  # and starts again
        store.close()
        reader = RedisBackend(client, prefix=store.prefix)
        assert reader.available(limiter._state, limiter._rule, None) == 8  # closed: the 4 given back
        reader.close()


async def test_an_idle_stock_goes_back_by_itself_in_a_loop(redis_server: RedisProcess) -> None:
    made = redis_server.async_client()
    try:
        store = RedisStore(made, reserve=5, prefix=fresh_prefix())
        limiter = store.fixed_window("w", 10, 3600.0)
        assert await limiter.acquire_async()
        with redis_server.client() as client:
            reader = RedisBackend(client, prefix=store.prefix)
            assert reader.available(limiter._state, limiter._rule, None) == 5
            deadline = time.monotonic() + IDLE_NS / 1e9 + ROUND_S + 1.0
            while reader.available(limiter._state, limiter._rule, None) != 9 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert reader.available(limiter._state, limiter._rule, None) == 9
            reader.close()
        store.close()
    finally:
        await made.aclose()
