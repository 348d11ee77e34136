"""A rate as text on Redis and PostgreSQL: the SlidingLog that permits.specs.parse makes, kept by
the server as the engine keeps it: never more than the count in any interval of that length, both
ends included, named and per key; a refusal says when, never more than the interval (and a ns)."""

from __future__ import annotations

import bisect
import random

import pytest

import permits

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name

SECOND = 1_000_000_000


def most_in_any_interval(times: list[int], interval_ns: int) -> int:
    """The most grants (one time per permit) within any [t, t + interval]."""
    times = sorted(times)
    return max((bisect.bisect_right(times, t + interval_ns) - i for i, t in enumerate(times)), default=0)


@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
def test_a_rate_keeps_its_promise_on_a_server(shared_server: Server, keyed: bool) -> None:
    clock = permits.ManualClock(1000.0)
    store = shared_server.store(clock=clock)
    spec = permits.specs.parse("10/second")
    if keyed:
        per_key = store.partitioned(spec, name=fresh_name("rates"))

        def acquire(n: int = 1) -> permits.Lease:
            return per_key.acquire("k", n)
    else:
        acquire = store.limiter(fresh_name("rates"), spec).acquire
    latest_back = 1.0 + 1e-9  # a permit comes back a nanosecond past the interval after it was taken
    assert acquire(10)
    refused = acquire()
    assert not refused and refused.reason == "limit_reached"
    assert refused.retry_after == latest_back
    clock.advance(1.0)
    assert not acquire()
    clock.advance(1e-9)
    assert acquire(10)

    rng = random.Random(40)
    granted: list[int] = []
    for _ in range(300):
        n = rng.randint(1, 3)
        lease = acquire(n)
        if lease:
            granted += [clock.now_ns()] * n
        else:
            assert lease.retry_after is not None and 0 < lease.retry_after <= latest_back
        clock.advance(rng.choice([0.0, 0.001, 0.02, 0.05, 0.3, 1.0]))
    assert len(granted) > 100
    assert most_in_any_interval(granted, SECOND) <= 10


@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
def test_several_rates_make_a_chain_on_a_server(shared_server: Server, keyed: bool) -> None:
    """ "2/second;3/minute" (issue 42, item 7): a chain of one store limiter per rate, their states
    named ``name#0`` and ``name#1``, shared by every process (two stores here)."""
    clock = permits.ManualClock(1000.0)
    one, other = shared_server.store(clock=clock), shared_server.store(clock=clock)
    name = fresh_name("rates")
    if keyed:
        keyed_one, keyed_other = (s.partitioned("2/second;3/minute", name=name) for s in (one, other))
        assert [member.name for member in keyed_one.limiters] == [f"{name}#0", f"{name}#1"]  # type: ignore[union-attr]

        def first(n: int = 1) -> permits.Lease:
            return keyed_one.acquire("k", n)

        def second(n: int = 1) -> permits.Lease:
            return keyed_other.acquire("k", n)
    else:
        first, second = one.limiter(name, "2/second;3/minute").acquire, other.limiter(name, "2/second;3/minute").acquire
    assert first() and second() and not first()
    clock.advance(1.0 + 1e-9)
    assert second() and not first()  # the minute's 3
    if not keyed:
        assert one.limiter(f"{name}#1", "3/minute").available_permits() == 0  # the member is that state
