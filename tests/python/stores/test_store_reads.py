"""statistics() and available_permits() of a store limiter with a sync client read the server
(what other stores did shows, and time's recoveries), named and per key; a slow server (stopped
for less than the timeout) is answered late but right, a hung one as on_error says, within the
timeout."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import permits
from permits.errors import BackendError

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import BOUND, MODES, Server, fresh_name

SPECS: dict[str, Any] = {
    "token_bucket": permits.specs.TokenBucket(5, 2, 1.0),
    "fixed_window": permits.specs.FixedWindow(5, 1.0),
    "sliding_window": permits.specs.SlidingWindow(5, 1.0, 4),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(5, 1.0),
    "concurrency": permits.specs.Concurrency(5),
}


@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
@pytest.mark.parametrize("kind", SPECS)
def test_reads_ask_the_server(shared_server: Server, kind: str, keyed: bool) -> None:
    """Another store (another connection) takes permits; this one's reads show them, and the
    engine's limiter of the same spec on the same clock agrees at each step."""
    clock = permits.ManualClock()
    spec = SPECS[kind]
    engine = spec.limiter(clock=clock)
    name = fresh_name(kind)
    if keyed:
        key: tuple[Any, ...] = (("tenant", "{a b}"),)  # one key, the limiters' first argument
        writer = shared_server.store(clock=clock).partitioned(spec, name=name)
        reader = shared_server.store(clock=clock).partitioned(spec, name=name)
    else:
        key = ()
        writer = shared_server.store(clock=clock).limiter(name, spec)
        reader = shared_server.store(clock=clock).limiter(name, spec)
    held = []
    for n, advance in [(0, 0.0), (2, 0.0), (2, 0.3), (1, 0.0), (3, 0.45), (0, 0.5), (4, 1.0), (0, 2.5)]:
        clock.advance(advance)
        if n:
            held.append((writer.acquire(*key, n), engine.acquire(n)))
        expected = engine.available_permits()
        assert reader.available_permits(*key) == expected, (kind, n, advance)
        stats = reader.statistics(*key)
        assert stats.current_available_permits == expected
        assert stats.current_queued_count == 0
        assert (stats.total_successful_leases, stats.total_failed_leases) == (0, 0)  # the reader took none
    assert any(got for got, _ in held) and not all(got for got, _ in held)  # grants and refusals both
    if kind == "concurrency":
        for got, want in held:
            got.release()
            want.release()
        assert reader.available_permits(*key) == engine.available_permits() == 5


def test_statistics_count_this_process_s_leases(shared_server: Server) -> None:
    clock = permits.ManualClock()
    limiter = shared_server.store(clock=clock).fixed_window(fresh_name(), 2, 10.0)
    assert limiter.acquire() and limiter.acquire() and not limiter.acquire()
    waiting: list[permits.Lease] = []
    thread = threading.Thread(target=lambda: waiting.append(limiter.wait(1)))
    thread.start()
    deadline = time.monotonic() + BOUND
    while limiter.statistics().current_queued_count < 1:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    stats = limiter.statistics()
    assert (stats.current_available_permits, stats.current_queued_count) == (0, 1)
    assert (stats.total_successful_leases, stats.total_failed_leases) == (2, 1)
    clock.advance(10.0)
    thread.join(BOUND)
    assert waiting and waiting[0]
    stats = limiter.statistics()
    assert (stats.current_available_permits, stats.current_queued_count) == (1, 0)
    assert (stats.total_successful_leases, stats.total_failed_leases) == (3, 1)


@pytest.mark.parametrize("mode", MODES)
def test_reads_of_a_slow_then_a_hung_server(own_server: Server, mode: str) -> None:
    """SIGSTOP during available_permits(): stopped for less than the timeout, the read waits and
    answers the server's value (not the last one seen); for longer, BackendError ("raise") or the
    last value seen, within the timeout; once continued, reads ask the server again."""
    timeout = 1.0
    clock = permits.ManualClock()
    name = fresh_name()
    limiter = own_server.store(clock=clock, on_error=mode, timeout=timeout).fixed_window(name, 5, 100.0)
    writer = own_server.store(clock=clock).fixed_window(name, 5, 100.0)
    assert limiter.available_permits() == 5
    assert writer.acquire()  # the limiter has not seen this
    answers: list[Any] = []

    def read() -> None:
        started = time.monotonic()
        answers.append(limiter.available_permits())
        answers.append(time.monotonic() - started)

    own_server.pause()
    try:
        reading = threading.Thread(target=read)
        reading.start()
        time.sleep(0.3)  # the server is slow: stopped for a part of the timeout
    finally:
        own_server.resume()
    reading.join(timeout + BOUND)
    assert answers[0] == 4 and answers[1] < timeout + 1.0
    assert writer.acquire()  # now 3 on the server; the limiter saw 4
    with own_server.paused():
        for read_hung in (limiter.available_permits, lambda: limiter.statistics().current_available_permits):
            started = time.monotonic()
            if mode == "raise":
                with pytest.raises(BackendError):
                    read_hung()
            else:
                assert read_hung() == 4
            assert time.monotonic() - started < timeout + 1.0
    assert limiter.available_permits() == 3
    assert limiter.statistics().current_available_permits == 3
