"""Housekeeping never runs in a caller's path: a per-key store limiter that forgets idle keys in
a caller's acquire() asks the server nothing for them (their counts are this process's; a
reserving limiter's unused permits go back in the background), so against a hung server one
acquire() ends within the store's timeout, as on_error says, however many keys it forgets."""

from __future__ import annotations

import gc
import time

import pytest

import permits
from permits.errors import BackendError

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import BOUND, TIMEOUT, Server, fresh_name


def test_forgetting_idle_keys_asks_the_server_nothing(own_server: Server) -> None:
    clock = permits.ManualClock()
    options = {"reserve": 5} if own_server.kind == "redis" else {}
    store = own_server.store(on_error="deny", timeout=TIMEOUT, clock=clock, **options)
    keyed = store.partitioned(permits.specs.FixedWindow(10, 3600.0), name=fresh_name("keys"), idle_timeout=1.0)
    for key in range(200):
        assert keyed.acquire(key)
    with own_server.paused():
        started = time.monotonic()
        clock.advance(2.0)  # every key idle past idle_timeout: forgotten (a ManualClock's advance does it)
        lease = keyed.acquire("new")
        took = time.monotonic() - started
    assert not lease and lease.reason == "backend_unavailable"
    assert took < BOUND, f"forgetting 200 keys and one acquire() took {took:.2f} s (store timeout {TIMEOUT} s)"
    stats = keyed.statistics()
    assert stats.total_successful_leases == 200 and stats.total_failed_leases == 1


def test_available_permits_answers_within_the_timeout_while_dropped_leases_go_back(own_server: Server) -> None:
    """available_permits() first lets the give-backs of leases dropped unreleased land (so that it
    counts their permits), but against a hung server that wait and its own question share the one
    timeout: it raised only after up to three of them (two waiting for the give-backs)."""
    timeout = 1.0
    store = own_server.store(timeout=timeout)
    jobs = store.concurrency(fresh_name("dropped"), permit_limit=5, lease_ttl=60.0)
    leases = [jobs.acquire() for _ in range(3)]
    assert all(leases) and jobs.available_permits() == 2
    with own_server.paused():
        with pytest.warns(ResourceWarning, match="dropped without release"):
            del leases
            gc.collect()  # the renewal thread now gives them back, each step hanging up to the timeout
        started = time.monotonic()
        with pytest.raises(BackendError, match="timeout"):
            jobs.available_permits()
        took = time.monotonic() - started
    assert took < timeout + 1.0, f"available_permits() took {took:.2f} s (store timeout {timeout} s)"
    # Once the server answers, the call answers again: what the give-backs left counted.
    assert jobs.available_permits() in range(2, 6)


def test_available_permits_counts_the_dropped_leases_given_back(own_server: Server) -> None:
    store = own_server.store()
    jobs = store.concurrency(fresh_name("dropped-live"), permit_limit=5, lease_ttl=60.0)
    leases = [jobs.acquire() for _ in range(3)]
    assert all(leases)
    with pytest.warns(ResourceWarning, match="dropped without release"):
        del leases
        gc.collect()
    assert jobs.available_permits() == 5  # given back before it asked
