"""keyed.reset(key): support staff unblocking a user (issue 42, item 5). The key's time-based limit
is full again at once, its queued requests are served from it, and nothing granted before the reset
comes back into it; a concurrency limit's held permits stay held. Exact counts on a ManualClock."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import permits
from permits import KeyedRateLimiter, Lease, LimiterClosedError, ManualClock, Partition, PartitionedLimiter, specs

TIMED = {
    "token_bucket": specs.TokenBucket(10, 10, 1.0),
    "fixed_window": specs.FixedWindow(10, 1.0),
    "sliding_window": specs.SlidingWindow(10, 1.0, 4),
    "sliding_log": specs.SlidingLog(10, 1.0),
    "sliding_window_counter": specs.SlidingWindowCounter(10, 1.0),
}
HOW = ["per_key", "partitioned", "translated", "chain"]


def keyed_of(spec: specs.Spec[Any], how: str, clock: ManualClock, queue_limit: int = 0) -> Any:
    """A keyed limiter of ``spec`` per key: in the engine's table, through a Python partitioner,
    seen through a key mapping, or as the only keyed member of a chain."""
    if how == "partitioned":
        return PartitionedLimiter(lambda key: Partition.of(key, spec, queue_limit=queue_limit), clock=clock)
    keyed: Any = PartitionedLimiter.per_key(Partition.of(None, spec, queue_limit=queue_limit), clock=clock)
    if how == "translated":
        return keyed.with_translated_key(str.casefold)
    if how == "chain":
        return permits.chain(keyed, permits.specs.FixedWindow(1000, 1.0).limiter(clock=clock))
    return keyed


def take_all(keyed: Any, key: str, limit: int) -> list[Lease]:
    leases = [keyed.acquire(key) for _ in range(limit)]
    assert all(leases)
    assert not keyed.acquire(key)
    return leases


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", list(TIMED))
def test_a_reset_key_has_its_whole_limit_again_and_no_more(kind: str, how: str) -> None:
    clock = ManualClock()
    keyed = keyed_of(TIMED[kind], how, clock)
    before = take_all(keyed, "alice", 10)
    take_all(keyed, "bob", 10)
    clock.advance(0.25)  # within the window of the grants
    keyed.reset("alice")
    assert keyed.available_permits("alice") == 10
    take_all(keyed, "alice", 10)  # exactly its limit: not one more
    for lease in before:  # refunds of what was granted before the reset give nothing back
        lease.settle(0)
    assert keyed.available_permits("alice") == 0
    assert not keyed.acquire("alice")
    assert not keyed.acquire("bob"), "another key was reset too"


@pytest.mark.parametrize("kind", list(TIMED))
def test_a_reset_at_the_instant_of_the_grants_still_gives_nothing_back(kind: str) -> None:
    # The key's new state starts just after the reset: a window that began at the same instant as
    # the grants before it is not the new state's.
    clock = ManualClock()
    keyed = PartitionedLimiter.per_key(TIMED[kind], clock=clock)
    before = keyed.acquire("k", 10)
    assert before
    keyed.reset("k")
    assert keyed.acquire("k", 10)
    before.settle(0)
    assert keyed.available_permits("k") == 0


@pytest.mark.parametrize("how", ["per_key", "partitioned"])
@pytest.mark.parametrize("kind", list(TIMED))
def test_a_reset_serves_the_keys_queued_requests_from_its_new_limit(kind: str, how: str) -> None:
    clock = ManualClock()
    keyed = keyed_of(TIMED[kind], how, clock, queue_limit=20)
    before = take_all(keyed, "k", 10)

    async def main() -> list[Lease]:
        waits = [asyncio.ensure_future(keyed.wait_async("k", 4)) for _ in range(3)]
        for _ in range(20):
            await asyncio.sleep(0)
        assert keyed.statistics("k").current_queued_count == 12
        keyed.reset("k")  # the first two fit the new limit of 10 (8 permits); the third waits on
        done, _ = await asyncio.wait(waits[:2], timeout=10.0)
        assert len(done) == 2 and not waits[2].done()
        assert keyed.statistics("k").current_queued_count == 4
        for lease in before:
            lease.settle(0)
        assert keyed.available_permits("k") == 2  # (the third still waits for 4)
        waits[2].cancel()
        return [w.result() for w in waits[:2]]

    granted = asyncio.run(main())
    assert all(lease and lease.permit_count == 4 for lease in granted)


def test_a_reset_serves_a_blocked_thread_at_once() -> None:
    clock = ManualClock()
    keyed = PartitionedLimiter.per_key(Partition.fixed_window(None, 2, 60.0, queue_limit=1), clock=clock)
    take_all(keyed, "k", 2)
    got: list[Lease] = []
    waiter = threading.Thread(target=lambda: got.append(keyed.wait("k")))
    waiter.start()
    while keyed.statistics("k").current_queued_count == 0:
        waiter.join(0.01)
    keyed.reset("k")  # the clock never moves: only the reset can grant it
    waiter.join(10)
    assert not waiter.is_alive() and got and got[0]
    assert keyed.available_permits("k") == 1


@pytest.mark.parametrize("how", ["per_key", "partitioned"])
def test_a_concurrency_keys_held_permits_stay_held(how: str) -> None:
    clock = ManualClock()
    keyed = keyed_of(specs.Concurrency(2), how, clock)
    held = take_all(keyed, "k", 2)
    keyed.reset("k")  # the work they hold runs on: a reset cannot stop it
    assert keyed.available_permits("k") == 0 and not keyed.acquire("k")
    held[0].release()
    assert keyed.available_permits("k") == 1
    held[1].release()
    assert keyed.available_permits("k") == 2


def test_a_reset_keeps_the_keys_counts() -> None:
    clock = ManualClock()
    keyed = PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), clock=clock)
    take_all(keyed, "k", 2)
    keyed.reset("k")
    stats = keyed.statistics("k")
    assert (stats.current_available_permits, stats.total_successful_leases, stats.total_failed_leases) == (2, 2, 1)


@pytest.mark.parametrize("how", ["per_key", "partitioned"])
def test_resetting_an_unknown_key_makes_no_partition(how: str) -> None:
    keyed = keyed_of(specs.FixedWindow(2, 1.0), how, ManualClock())
    keyed.reset("nobody")
    assert keyed.partition_count == 0


def test_a_reset_key_is_evicted_once_idle_as_any_other() -> None:
    clock = ManualClock()
    keyed = PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), idle_timeout=0.5, clock=clock)
    take_all(keyed, "k", 2)
    keyed.reset("k")
    clock.advance(0.5 + 1e-6)
    assert keyed.partition_count == 0


def test_bad_keys_and_closed_limiters() -> None:
    keyed = PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), clock=ManualClock())
    with pytest.raises(TypeError, match="key"):
        keyed.reset(object())
    keyed.close()
    with pytest.raises(LimiterClosedError):
        keyed.reset("k")


def test_a_custom_keyed_limiter_without_a_reset_says_so() -> None:
    class Everyone(KeyedRateLimiter):
        def _acquire(self, resource: object, permit_count: int) -> Lease:
            return Lease.granted()

    with pytest.raises(NotImplementedError, match="Everyone cannot reset a key"):
        Everyone().reset("k")


def test_a_partition_of_several_rates_resets_each_and_a_partition_without_limit_has_nothing_to_forget() -> None:
    clock = ManualClock()
    keyed = PartitionedLimiter(
        lambda key: Partition.of(key, "2/second;3/minute") if key != "staff" else Partition.no_limiter(key), clock=clock
    )
    take_all(keyed, "k", 2)
    clock.advance(1.0 + 1e-9)
    assert keyed.acquire("k") and not keyed.acquire("k")  # the minute's 3 are spent
    keyed.reset("k")  # both rates forget
    take_all(keyed, "k", 2)
    assert keyed.acquire("staff")
    keyed.reset("staff")


def test_a_custom_partition_limiter_cannot_be_reset() -> None:
    class Mine(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> Lease:
            return Lease.granted()

    keyed = PartitionedLimiter(lambda key: Partition.custom(key, lambda _: Mine()))
    assert keyed.acquire("k")
    with pytest.raises(NotImplementedError, match="Mine cannot be reset"):
        keyed.reset("k")


def test_an_instrumented_keyed_limiter_resets_what_it_wraps() -> None:
    pytest.importorskip("prometheus_client")
    import prometheus_client

    from permits.metrics import instrument

    clock = ManualClock()
    keyed = instrument(
        PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), clock=clock, name="reset-instrumented"),
        registry=prometheus_client.CollectorRegistry(),
    )
    take_all(keyed, "k", 2)
    keyed.reset("k")
    assert keyed.available_permits("k") == 2
