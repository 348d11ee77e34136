"""Concurrency leases the server forgot while they were held (its data flushed, or lost with a
restart without persistence): the holder's renewal takes each back under its own id when the
limit allows it, and otherwise the lease is lost: ``metadata["lost"]``, a warning naming the
limiter, ``permits_leases_lost_total``, and a release that gives nothing back. Sync and asyncio
clients, Redis and PostgreSQL; the renewal round is run at once (``renew_now``) on a ManualClock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import permits
from permits.metrics import instrument

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name
from _support import need

TTL = 30.0


def forget(server: Server) -> None:
    """The server loses everything of this test's stores (a FLUSHALL; a restart that kept nothing)."""
    if server.kind == "redis":
        script = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 1"
        server.command("EVAL", script, 0, server.namespace + "*")  # type: ignore[attr-defined]
    else:
        with server.process.connect() as conn:
            conn.execute(f'DELETE FROM "{server.namespace}"')


def test_a_forgotten_lease_is_taken_back_when_the_limit_allows(shared_server: Server) -> None:
    clock = permits.ManualClock()
    store = shared_server.store(clock=clock)
    name = fresh_name("db")
    db = store.concurrency(name, 1, lease_ttl=TTL)
    lease = db.acquire()
    assert lease
    forget(shared_server)
    other = shared_server.store(clock=clock).concurrency(name, 1, lease_ttl=TTL)
    assert other.available_permits() == 1  # forgotten: the limit of 1 is free on the server
    store._renewal.renew_now()
    assert "lost" not in lease.metadata
    assert not other.acquire()  # held again: never two holders of one permit
    lease.release()
    with other.acquire() as again:
        assert again


def test_a_forgotten_lease_whose_permit_went_to_another_is_lost(
    shared_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    registry = need("prometheus_client").CollectorRegistry()
    clock = permits.ManualClock()
    store = shared_server.store(clock=clock)
    name = fresh_name("db")
    db = instrument(store.concurrency(name, 1, lease_ttl=TTL), registry=registry)
    lease = db.acquire()
    assert lease
    forget(shared_server)
    other = shared_server.store(clock=clock).concurrency(name, 1, lease_ttl=TTL)
    theirs = other.acquire()  # the permit the server forgot, granted again
    assert theirs
    with caplog.at_level(logging.WARNING, logger="permits"):
        store._renewal.renew_now()
    assert lease.metadata["lost"] is True
    assert [r.getMessage() for r in caplog.records if "lost" in r.getMessage() and repr(name) in r.getMessage()]
    assert registry.get_sample_value("permits_leases_lost_total", {"limiter": name}) == 1.0
    lease.release()  # gives nothing back: the permit is the other holder's
    assert other.available_permits() == 0
    assert lease.metadata["lost"] is True
    theirs.release()
    assert other.available_permits() == 1
    store._renewal.renew_now()  # nothing left to renew or report
    assert registry.get_sample_value("permits_leases_lost_total", {"limiter": name}) == 1.0


def test_an_asyncio_client_takes_back_or_loses_forgotten_leases(shared_server: Server) -> None:
    async def main() -> None:
        clock = permits.ManualClock()
        name = fresh_name("db")
        async with shared_server.async_store(clock=clock) as store:
            db: Any = store.concurrency(name, 2, lease_ttl=TTL)
            kept = await db.acquire_async()
            lost = await db.acquire_async()
            assert kept and lost
            forget(shared_server)
            other = shared_server.store(clock=clock).concurrency(name, 2, lease_ttl=TTL)
            theirs = other.acquire()
            assert theirs
            await store._renewal.renew_now_async()  # one permit left: the first taken back, the second lost
            assert [lease.metadata.get("lost", False) for lease in (kept, lost)] == [False, True]
            assert other.available_permits() == 0
            lost.release()
            assert other.available_permits() == 0
            kept.release()
            await asyncio.sleep(0)  # (an asyncio client's release lands in a task)
            await store.aclose()
            assert other.available_permits() == 1
            theirs.release()

    asyncio.run(main())


def test_a_holder_paused_past_lease_ttl_takes_its_lease_back_or_loses_it(shared_server: Server) -> None:
    # Paused: no renewal for longer than lease_ttl (the ManualClock moves on without it).
    clock = permits.ManualClock()
    store = shared_server.store(clock=clock)
    name = fresh_name("db")
    db = store.concurrency(name, 2, lease_ttl=TTL)
    first = db.acquire()
    assert first
    clock.advance(TTL + 1)  # expired on the server while its holder was paused
    store._renewal.renew_now()  # resumed: the limit allows it, taken back
    assert "lost" not in first.metadata
    other = shared_server.store(clock=clock).concurrency(name, 2, lease_ttl=TTL)
    assert other.available_permits() == 1
    second = db.acquire()
    assert second
    clock.advance(TTL + 1)
    theirs = other.acquire(2)  # both expired: another process takes the whole limit
    assert theirs
    store._renewal.renew_now()
    assert first.metadata["lost"] is True and second.metadata["lost"] is True
    first.release()
    second.release()
    assert other.available_permits() == 0
    theirs.release()


def test_an_outage_shorter_than_lease_ttl_loses_no_lease(own_server: Server) -> None:
    """The server killed and restarted (keeping what it acknowledged) while a lease is held, for
    less than lease_ttl: renewal goes on once it answers again (it retries soon after a failed
    round, not a whole round later), and the lease is still held, never lost. Real time."""
    import time

    ttl = 3.0
    store = own_server.store(timeout=0.3)
    name = fresh_name("outage")
    db = store.concurrency(name, 1, lease_ttl=ttl)
    lease = db.acquire()
    assert lease
    with own_server.killed():
        time.sleep(1.3)
    time.sleep(ttl)  # past the lease's expiry, had it not been renewed since the restart
    other = own_server.store(timeout=1.0).concurrency(name, 1, lease_ttl=ttl)
    assert not other.acquire()  # still held by the first
    assert "lost" not in lease.metadata
    lease.release()
    assert other.acquire()
