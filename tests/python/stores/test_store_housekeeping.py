"""Housekeeping never runs in a caller's path: a per-key store limiter that forgets idle keys in
a caller's acquire() asks the server nothing for them (their counts are this process's; a
reserving limiter's unused permits go back in the background), so against a hung server one
acquire() ends within the store's timeout, as on_error says, however many keys it forgets."""

from __future__ import annotations

import time

import permits

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
