"""lease.settle(n) on Redis and PostgreSQL (issue 42, item 1): a time-based lease gives back what it
did not use while its window is current (every process sees it), a concurrency lease gives back
part of its permits at once and goes on holding the rest (renewed, released with what it kept);
sync and asyncio clients, named and per key (a reserving store's: test_redis_reserve.py)."""

from __future__ import annotations

from typing import Any

import pytest

import permits

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name

SPECS = {
    "token_bucket": permits.specs.TokenBucket(10, 10, 60.0),
    "fixed_window": permits.specs.FixedWindow(10, 60.0),
    "sliding_window": permits.specs.SlidingWindow(10, 60.0, 4),
    "sliding_log": permits.specs.SlidingLog(10, 60.0),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(10, 60.0),
    "concurrency": permits.specs.Concurrency(10),
}


@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
@pytest.mark.parametrize("kind", list(SPECS))
def test_settle_gives_back_on_the_server(shared_server: Server, kind: str, keyed: bool) -> None:
    clock = permits.ManualClock(1000.0)
    here, there = shared_server.store(clock=clock), shared_server.store(clock=clock)  # two processes
    name = fresh_name("settle")
    if keyed:
        mine, theirs = (s.partitioned(SPECS[kind], name=name) for s in (here, there))

        def take(n: int) -> permits.Lease:
            return mine.acquire("k", n)

        def available() -> int:
            return theirs.available_permits("k")  # type: ignore[no-any-return]
    else:
        take = here.limiter(name, SPECS[kind]).acquire
        available = there.limiter(name, SPECS[kind]).available_permits
    lease = take(10)
    assert lease and available() == 0
    lease.settle(6)
    assert lease.permit_count == 6 and available() == 4
    lease.settle(1)
    assert available() == 9
    lease.release()
    assert available() == (10 if kind == "concurrency" else 9)
    lease._refund()  # released already: gives nothing more back
    assert available() == (10 if kind == "concurrency" else 9)


@pytest.mark.parametrize("kind", ["fixed_window", "concurrency"])
def test_a_settled_lease_refunded_gives_back_what_it_kept_only(shared_server: Server, kind: str) -> None:
    clock = permits.ManualClock(1000.0)
    limiter = shared_server.store(clock=clock).limiter(fresh_name("settle"), SPECS[kind])
    lease = limiter.acquire(10)
    lease.settle(4)
    lease._refund()  # a chain's undo: the 4 it kept, not the 10 it took
    assert limiter.available_permits() == 10
    assert limiter.acquire(10) and not limiter.acquire(1)


def test_a_settled_concurrency_lease_is_renewed_with_what_it_kept(shared_server: Server) -> None:
    clock = permits.ManualClock(1000.0)
    store = shared_server.store(clock=clock)
    limiter = store.limiter(fresh_name("settle"), SPECS["concurrency"], lease_ttl=3.0)
    lease = limiter.acquire(10)
    lease.settle(3)
    for _ in range(4):  # past several lease_ttl: renewal keeps the 3 it holds
        clock.advance(1.0)
        store._renewal.renew_now()
    assert limiter.available_permits() == 7
    lease.release()
    assert limiter.available_permits() == 10


async def test_settle_with_an_asyncio_client(shared_server: Server) -> None:
    async with shared_server.async_store() as store:
        window = store.limiter(fresh_name("settle"), SPECS["fixed_window"])
        pool = store.limiter(fresh_name("settle"), SPECS["concurrency"])
        lease, held = await window.acquire_async(10), await pool.acquire_async(10)
        lease.settle(2)
        held.settle(5)
        await store.aclose()  # the give-backs on their way have landed
    reader = shared_server.store()
    assert reader.limiter(window.name, SPECS["fixed_window"]).available_permits() == 8
    assert reader.limiter(pool.name, SPECS["concurrency"]).available_permits() == 5


def _forget(store: Any, name: str) -> None:
    """The state of ``name`` gone, as a Redis key that expired (or was evicted, flushed) and a
    PostgreSQL row purged once expired are."""
    backend = store._backend
    if hasattr(backend, "keys_of"):
        assert backend._sync_client().delete(*backend.keys_of(name)) >= 1
    else:
        assert store._purger.purge_now() >= 1


@pytest.mark.parametrize("kind", [kind for kind in SPECS if kind != "concurrency"])
def test_a_settle_after_the_state_was_made_again_gives_nothing_back(shared_server: Server, kind: str) -> None:
    """A state whose keys expired is made again at its next request, anchored then: a lease of the
    old state settled late (work that ran long) gives nothing back into the new one's windows,
    which count other grants (before: 20 grants in a window of 10)."""
    clock = permits.ManualClock(1000.0)
    store = shared_server.store(clock=clock)
    name = fresh_name("remade")
    limiter = store.limiter(name, SPECS[kind])
    old = limiter.acquire(10)
    assert old
    clock.advance(1000.0)  # long past the state's lifetime: expired
    _forget(store, name)
    clock.advance(7.25)
    assert limiter.acquire(10)  # the new state's whole limit
    old.settle(0)
    assert limiter.available_permits() == 0
    assert not limiter.acquire(1)
