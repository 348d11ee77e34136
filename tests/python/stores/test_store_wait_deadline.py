"""A sync ``wait(timeout=...)`` against a hung server ends by its own deadline, not the store's
timeout (which may be far longer), with reason "timeout"; what the server grants once it answers
is given back, so nothing leaks. A real clock: the deadline is the host's."""

from __future__ import annotations

import time

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name

STORE_TIMEOUT = 3.0
WAIT = 0.05


def test_a_wait_against_a_hung_server_ends_by_its_own_deadline(own_server: Server) -> None:
    store = own_server.store(timeout=STORE_TIMEOUT)
    name = fresh_name("deadline")
    jobs, window = store.concurrency(name, 2, lease_ttl=60.0), store.fixed_window(name + "-w", 5, 3600.0)
    assert jobs.available_permits() == 2 and window.available_permits() == 5  # (tables and scripts made)
    with own_server.paused():
        for limiter in (jobs, window):
            started = time.monotonic()
            lease = limiter.wait(timeout=WAIT)
            took = time.monotonic() - started
            assert not lease and lease.reason == "timeout", lease
            assert took < STORE_TIMEOUT, f"{took:.2f} s: the store's timeout, not the wait's own"
    # The server answered the steps once resumed: each grant made then was given back.
    reader = own_server.store(timeout=STORE_TIMEOUT)
    seen_jobs, seen_window = reader.concurrency(name, 2, lease_ttl=60.0), reader.fixed_window(name + "-w", 5, 3600.0)
    deadline = time.monotonic() + 2 * STORE_TIMEOUT
    while time.monotonic() < deadline and (seen_jobs.available_permits(), seen_window.available_permits()) != (2, 5):
        time.sleep(0.01)
    assert (seen_jobs.available_permits(), seen_window.available_permits()) == (2, 5)
    with jobs.wait(timeout=STORE_TIMEOUT) as lease:
        assert lease  # and the store goes on
