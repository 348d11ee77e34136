"""permits.chain with store limiters (Redis, PostgreSQL; sync and asyncio clients), every kind:
when a later member refuses, the store's grant is undone on the server (its permits back, as
another connection reads them); in the reverse order a store's refusal gives the local grant back,
and a local refusal never reaches the server."""

from __future__ import annotations

from typing import Any

import pytest

import permits

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name, settled

SPECS: dict[str, Any] = {
    "token_bucket": permits.specs.TokenBucket(3, 1, 10.0),
    "fixed_window": permits.specs.FixedWindow(3, 10.0),
    "sliding_window": permits.specs.SlidingWindow(3, 10.0, 4),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(3, 10.0),
    "concurrency": permits.specs.Concurrency(3),
}
LIMIT = 3
TTL = 30.0


class Sides:
    """A store limiter of ``kind`` (sync or asyncio client), a reader of its state on the server,
    and its acquisitions as coroutines either way."""

    def __init__(self, store: Any, reader: Any, kind: str, client: str) -> None:
        name = fresh_name(kind)
        self.store = store
        self.limiter = store.limiter(name, SPECS[kind], lease_ttl=TTL)
        self.seen = reader.limiter(name, SPECS[kind], lease_ttl=TTL)
        self.is_async = client == "asyncio"

    async def acquire(self, target: Any, n: int = 1) -> permits.Lease:
        lease: permits.Lease = await target.acquire_async(n) if self.is_async else target.acquire(n)
        return lease

    async def on_server(self) -> int:
        """The permits the server has now (once the permits given back in tasks are back)."""
        await settled(self.store)
        available: int = self.seen.available_permits()
        return available


def _local_exhausted(clock: permits.ManualClock) -> tuple[Any, permits.Lease]:
    local = permits.specs.Concurrency(LIMIT).limiter(clock=clock)
    held = local.acquire(LIMIT)
    assert held
    return local, held


@pytest.mark.parametrize("client", ["sync", "asyncio"])
@pytest.mark.parametrize("kind", SPECS)
async def test_a_later_refusal_undoes_the_store_grant_on_the_server(
    shared_server: Server, kind: str, client: str
) -> None:
    clock = permits.ManualClock()
    reader = shared_server.reader(clock)
    async with shared_server.async_store(clock=clock) as async_store:
        store = async_store if client == "asyncio" else shared_server.store(clock=clock)
        sides = Sides(store, reader, kind, client)
        local, held = _local_exhausted(clock)
        chain = permits.chain(sides.limiter, local)
        for n in (1, 2, LIMIT, 1):  # more than the limit in all: each grant went back
            refused = await sides.acquire(chain, n)
            assert not refused and refused.reason == "limit_reached", refused
            assert await sides.on_server() == LIMIT, (kind, n)
        held.release()
        granted = await sides.acquire(chain, 2)  # the chain itself still takes from both
        assert granted
        assert await sides.on_server() == LIMIT - 2
        if kind == "concurrency":
            granted.release()
            assert await sides.on_server() == LIMIT


@pytest.mark.parametrize("client", ["sync", "asyncio"])
@pytest.mark.parametrize("kind", SPECS)
async def test_in_the_reverse_order_a_store_refusal_gives_the_local_grant_back(
    shared_server: Server, kind: str, client: str
) -> None:
    clock = permits.ManualClock()
    reader = shared_server.reader(clock)
    async with shared_server.async_store(clock=clock) as async_store:
        store = async_store if client == "asyncio" else shared_server.store(clock=clock)
        sides = Sides(store, reader, kind, client)
        local = permits.specs.Concurrency(2).limiter(clock=clock)
        chain = permits.chain(local, sides.limiter)
        used = await sides.acquire(sides.limiter, LIMIT)
        assert used and await sides.on_server() == 0
        for n in (1, 2, 1):
            refused = await sides.acquire(chain, n)
            assert not refused and refused.reason == "limit_reached", refused
            assert local.available_permits() == 2
        assert await sides.on_server() == 0  # the refusals counted nothing there
        # A local refusal: the store is never asked (its permits stay as they are).
        if kind == "concurrency":
            used.release()
        else:
            clock.advance(30.0)  # every kind full again (the counter: two windows on)
        assert await sides.on_server() == LIMIT
        held = local.acquire(2)
        assert held
        assert not await sides.acquire(chain, 1)
        assert await sides.on_server() == LIMIT
        held.release()
        both = await sides.acquire(chain, 1)  # (kept: a dropped concurrency lease is released)
        assert both
        assert await sides.on_server() == LIMIT - 1 and local.available_permits() == 1


@pytest.mark.parametrize("kind", SPECS)
def test_two_store_limiters_in_a_chain_undo_each_other(shared_server: Server, kind: str) -> None:
    """Both members on the server: the second one's refusal undoes the first one's grant."""
    clock = permits.ManualClock()
    store, reader = shared_server.store(clock=clock), shared_server.reader(clock)
    first, second = Sides(store, reader, kind, "sync"), Sides(store, reader, "fixed_window", "sync")
    assert second.limiter.acquire(LIMIT)
    chain = permits.chain(first.limiter, second.limiter)
    for _ in range(LIMIT + 1):
        assert not chain.acquire()
    assert first.seen.available_permits() == LIMIT and second.seen.available_permits() == 0
