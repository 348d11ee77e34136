"""limiter.reconfigure(spec): live limits (issue 42, item 4) on the engine's limiters. The new limit
holds from now on and nothing is lost: what is taken stays taken (a lower limit holds as permits
come back, a higher one adds the difference at once), queued requests are served from it, a queue
beyond a new queue_limit fails its requests served last. Exact counts on a ManualClock."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import permits
from permits import LimiterClosedError, ManualClock, QueueOrder, RateLimiter, specs

#: Each kind with a limit of 10 and that limit's spec at `limit`, same window (period, segments).
KINDS: dict[str, Any] = {
    "token_bucket": lambda limit: specs.TokenBucket(limit, limit, 1.0),
    "fixed_window": lambda limit: specs.FixedWindow(limit, 1.0),
    "sliding_window": lambda limit: specs.SlidingWindow(limit, 1.0, 4),
    "sliding_log": lambda limit: specs.SlidingLog(limit, 1.0),
    "sliding_window_counter": lambda limit: specs.SlidingWindowCounter(limit, 1.0),
    "concurrency": lambda limit: specs.Concurrency(limit),
}


def take_all(limiter: RateLimiter) -> list[permits.Lease]:
    leases = []
    while lease := limiter.acquire():
        leases.append(lease)
    return leases


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_lower_limit_holds_what_was_taken_and_then_is_the_limit(kind: str) -> None:
    clock = ManualClock()
    limiter = KINDS[kind](10).limiter(clock=clock)
    held = [limiter.acquire() for _ in range(8)]
    assert all(held)
    limiter.reconfigure(KINDS[kind](5))
    assert limiter.spec == KINDS[kind](5)
    # 8 taken, more than 5: none left. A token bucket holds what it holds, up to its new token_limit.
    left = 2 if kind == "token_bucket" else 0
    assert limiter.available_permits() == left
    assert len(take_all(limiter)) == left
    with pytest.raises(ValueError, match="exceeds"):
        limiter.acquire(6)  # more than the new limit, as at construction
    for lease in held:
        lease.release()  # (concurrency: back; the others: nothing to give back)
    clock.advance(2.0)
    assert len(take_all(limiter)) == 5


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_higher_limit_adds_the_difference_at_once(kind: str) -> None:
    clock = ManualClock()
    limiter = KINDS[kind](10).limiter(clock=clock)
    held = take_all(limiter)
    assert len(held) == 10
    limiter.reconfigure(KINDS[kind](15))
    # A token bucket fills at its rate (15 a second now): the others have 5 more at once.
    expected = 0 if kind == "token_bucket" else 5
    held += take_all(limiter)
    assert len(held) == 10 + expected
    if kind == "concurrency":
        return
    clock.advance(2.0)
    assert len(take_all(limiter)) == 15


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_limiters_attributes_follow(kind: str) -> None:
    limiter = KINDS[kind](10).limiter(clock=ManualClock())
    limiter.reconfigure(KINDS[kind](3))
    spec = KINDS[kind](3)
    for attribute in spec._attributes:
        assert getattr(limiter, attribute) == getattr(spec, attribute)


async def test_queued_waits_are_served_from_a_higher_limit() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=10, clock=ManualClock())
    held = limiter.acquire()
    waits = [asyncio.ensure_future(limiter.wait_async()) for _ in range(3)]
    await asyncio.sleep(0)
    assert limiter.statistics().current_queued_count == 3
    limiter.reconfigure(specs.Concurrency(3))
    first, second = await asyncio.gather(waits[0], waits[1])
    assert first and second and not waits[2].done()
    held.release()
    assert await waits[2]


@pytest.mark.parametrize("order", list(QueueOrder))
async def test_a_queue_beyond_its_new_limit_fails_the_requests_served_last(order: QueueOrder) -> None:
    clock = ManualClock()
    limiter = permits.FixedWindowLimiter(1, 1.0, queue_limit=10, queue_order=order, clock=clock)
    assert limiter.acquire()
    waits = [asyncio.ensure_future(limiter.wait_async()) for _ in range(4)]
    await asyncio.sleep(0)
    limiter.reconfigure(specs.FixedWindow(1, 1.0), queue_limit=2)
    kept = [0, 1] if order is QueueOrder.OLDEST_FIRST else [2, 3]
    await asyncio.wait([w for i, w in enumerate(waits) if i not in kept], timeout=5.0)
    for i, wait in enumerate(waits):
        if i in kept:
            assert not wait.done(), i
        else:
            lease = wait.result()
            assert not lease and lease.reason == "queue_full", i
            assert lease.retry_after is not None and lease.retry_after > 0
    assert limiter.statistics().current_queued_count == 2
    assert limiter.statistics().total_failed_leases == 2
    clock.advance(1.0)
    assert await waits[kept[0] if order is QueueOrder.OLDEST_FIRST else kept[1]]
    clock.advance(1.0)
    await asyncio.gather(*(waits[i] for i in kept))


async def test_a_queued_request_larger_than_the_new_limit_fails_at_once() -> None:
    clock = ManualClock()
    limiter = permits.FixedWindowLimiter(10, 1.0, queue_limit=20, clock=clock)
    assert limiter.acquire(10)
    big, small = asyncio.ensure_future(limiter.wait_async(8)), asyncio.ensure_future(limiter.wait_async(2))
    await asyncio.sleep(0)
    limiter.reconfigure(specs.FixedWindow(5, 1.0))
    lease = await asyncio.wait_for(big, 5.0)
    assert not lease and lease.reason == "limit_reached" and lease.retry_after is None
    clock.advance(1.0)
    assert await small


def test_the_queue_options_change_and_stay_unless_given() -> None:
    clock = ManualClock()
    limiter = permits.ConcurrencyLimiter(1, queue_limit=5, clock=clock)
    held = limiter.acquire()
    older = threading.Thread(target=limiter.wait, args=(1,))
    older.start()
    while limiter.statistics().current_queued_count < 1:
        pass
    limiter.reconfigure(specs.Concurrency(1), queue_order=QueueOrder.NEWEST_FIRST)
    assert limiter._queue == (5, True)
    limiter.reconfigure(specs.Concurrency(1))
    assert limiter._queue == (5, True)  # (...: as they are)
    limiter.reconfigure(specs.Concurrency(1), queue_limit=None)
    assert limiter._queue == (None, True)

    async def newest() -> permits.Lease:
        newer = asyncio.ensure_future(limiter.wait_async())  # queued last: under NEWEST_FIRST, served first
        while limiter.statistics().current_queued_count < 2:
            await asyncio.sleep(0)
        held.release()
        return await asyncio.wait_for(newer, 5.0)

    lease = asyncio.run(newest())
    assert lease
    assert older.is_alive()
    limiter.close()
    older.join(5)
    assert not older.is_alive()


def test_a_blocked_thread_fails_when_a_new_queue_limit_leaves_it_no_room() -> None:
    limiter = permits.TokenBucketLimiter(2, 1, 3600.0, queue_limit=5, clock=ManualClock())
    assert limiter.acquire(2)
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.wait(2)))
    waiter.start()
    while limiter.statistics().current_queued_count < 1:
        pass
    limiter.reconfigure(specs.TokenBucket(3, 1, 3600.0))  # 3 tokens a period: still 0 now
    assert waiter.is_alive()
    limiter.reconfigure(specs.TokenBucket(3, 1, 3600.0), queue_limit=0)  # no room: it fails
    waiter.join(5)
    assert got and not got[0] and got[0].reason == "queue_full"


@pytest.mark.parametrize(
    ("limiter", "spec", "named"),
    [
        (specs.FixedWindow(10, 1.0), specs.FixedWindow(10, 2.0), "window"),
        (specs.SlidingWindowCounter(10, 1.0), specs.SlidingWindowCounter(10, 0.5), "window"),
        (specs.TokenBucket(10, 1, 1.0), specs.TokenBucket(10, 1, 2.0), "replenishment_period"),
        (specs.SlidingWindow(10, 1.0, 4), specs.SlidingWindow(10, 1.0, 8), "segments_per_window"),
        (specs.SlidingLog(10, 1.0), specs.SlidingLog(10, 3.0), "window"),
    ],
)
def test_another_window_is_refused_naming_it_and_nothing_changes(
    limiter: specs.Spec[Any], spec: specs.Spec[Any], named: str
) -> None:
    made = limiter.limiter(clock=ManualClock())
    with pytest.raises(ValueError, match=f"keeps its {named}"):
        made.reconfigure(spec)
    assert made.spec == limiter


@pytest.mark.parametrize(
    ("limiter", "spec"),
    [
        (specs.FixedWindow(10, 1.0), specs.SlidingWindowCounter(10, 1.0)),
        (specs.SlidingWindow(10, 1.0, 4), specs.SlidingLog(10, 1.0)),
        (specs.Concurrency(3), specs.FixedWindow(3, 1.0)),
        (specs.Concurrency(3), 3),
    ],
)
def test_another_kind_is_refused(limiter: specs.Spec[Any], spec: Any) -> None:
    made = limiter.limiter(clock=ManualClock())
    with pytest.raises(TypeError, match="keeps its kind"):
        made.reconfigure(spec)


def test_a_rate_string_is_a_spec_here_too() -> None:
    clock = ManualClock()
    limiter = specs.parse("10/minute").limiter(clock=clock)
    assert len([lease for lease in (limiter.acquire() for _ in range(4)) if lease]) == 4
    limiter.reconfigure("5/minute")
    assert limiter.spec == specs.SlidingLog(5, 60.0) and limiter.available_permits() == 1
    keyed = permits.PartitionedLimiter.per_key("10/minute", clock=clock)
    keyed.reconfigure("3/minute")
    assert keyed.available_permits("alice") == 3
    with pytest.raises(ValueError, match=r"^spec: "):
        limiter.reconfigure("5/fortnight")
    with pytest.raises(TypeError, match="keeps its kind"):
        limiter.reconfigure("5/minute;100/day")  # several rates are a chain, not this limiter
    assert limiter.spec == specs.SlidingLog(5, 60.0)


def test_bad_queue_options_are_refused_naming_them() -> None:
    limiter = permits.ConcurrencyLimiter(2, queue_limit=4)
    with pytest.raises(ValueError, match="queue_limit"):
        limiter.reconfigure(specs.Concurrency(2), queue_limit=-1)
    with pytest.raises(TypeError, match="queue_limit"):
        limiter.reconfigure(specs.Concurrency(2), queue_limit="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="queue_order"):
        limiter.reconfigure(specs.Concurrency(2), queue_order="newest")  # type: ignore[arg-type]
    assert limiter._queue == (4, False)
    assert limiter.permit_limit == 2


def test_a_closed_limiter_refuses() -> None:
    limiter = permits.FixedWindowLimiter(3, 1.0)
    limiter.close()
    with pytest.raises(LimiterClosedError):
        limiter.reconfigure(specs.FixedWindow(4, 1.0))


def test_a_custom_limiter_without_the_hook_says_so() -> None:
    class Always(RateLimiter):
        def _acquire(self, permit_count: int) -> permits.Lease:
            raise AssertionError

    with pytest.raises(NotImplementedError, match="Always cannot be reconfigured"):
        Always().reconfigure(specs.Concurrency(1))


def test_threads_racing_limit_changes_leave_every_permit_accounted_for() -> None:
    limiter = permits.ConcurrencyLimiter(4)
    stop = threading.Event()

    def work() -> None:
        for _ in range(3000):
            with limiter.acquire():
                pass

    def change() -> None:
        limit = 1
        while not stop.is_set():
            limiter.reconfigure(specs.Concurrency(limit))
            limit = limit % 7 + 1

    changer = threading.Thread(target=change)
    workers = [threading.Thread(target=work) for _ in range(3)]
    changer.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    changer.join()
    limiter.reconfigure(specs.Concurrency(5))
    assert limiter.available_permits() == 5  # all released: exactly the limit
    assert limiter.idle_duration is not None


def test_an_instrumented_limiter_reconfigures_what_it_wraps() -> None:
    import prometheus_client

    from permits.metrics import instrument

    clock = ManualClock()
    limiter = instrument(
        permits.FixedWindowLimiter(2, 1.0, clock=clock, name="reconfigure-instrumented"),
        registry=prometheus_client.CollectorRegistry(),
    )
    limiter.reconfigure(specs.FixedWindow(4, 1.0), queue_limit=3)
    assert limiter.spec == specs.FixedWindow(4, 1.0) and limiter.permit_limit == 4
    assert len(take_all(limiter)) == 4
    assert limiter.__wrapped__._queue == (3, False)


# ---- per key: every key, present and future


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_key_present_and_future_gets_the_new_limit_and_keeps_what_it_took(kind: str) -> None:
    clock = ManualClock()
    keyed = permits.PartitionedLimiter.per_key(KINDS[kind](10), clock=clock)
    held = [keyed.acquire("alice") for _ in range(8)]
    assert all(held)
    keyed.reconfigure(KINDS[kind](5))
    assert keyed.spec == KINDS[kind](5)
    left = 2 if kind == "token_bucket" else 0  # a bucket keeps its tokens, up to its new token_limit
    assert keyed.available_permits("alice") == left
    assert keyed.available_permits("bob") == 5  # a key made since
    bobs = [keyed.acquire("bob") for _ in range(6)]
    assert sum(map(bool, bobs)) == 5
    with pytest.raises(ValueError, match="exceeds"):
        keyed.acquire("carol", 6)
    for lease in held:
        lease.release()
    clock.advance(2.0)
    assert keyed.available_permits("alice") == 5


async def test_a_keys_queued_waits_are_served_from_a_higher_limit_and_trimmed_to_the_new_queue_limit() -> None:
    clock = ManualClock()
    keyed = permits.PartitionedLimiter.per_key(
        permits.Partition.of(None, specs.FixedWindow(1, 1.0), queue_limit=10), clock=clock
    )
    assert keyed.acquire("alice")
    waits = [asyncio.ensure_future(keyed.wait_async("alice")) for _ in range(3)]
    await asyncio.sleep(0)
    keyed.reconfigure(specs.FixedWindow(2, 1.0), queue_limit=1)
    await asyncio.wait(waits[0::2], timeout=5.0)
    assert waits[0].result()  # the raise serves it at once
    assert not waits[2].result() and waits[2].result().reason == "queue_full"
    assert not waits[1].done()
    assert keyed._queue == (1, False)
    clock.advance(1.0)
    assert await asyncio.wait_for(waits[1], 5.0)


def test_a_per_key_limiter_refuses_another_kind_or_window_and_nothing_changes() -> None:
    keyed = permits.PartitionedLimiter.per_key(specs.FixedWindow(3, 1.0), clock=ManualClock())
    with pytest.raises(TypeError, match="keeps its kind"):
        keyed.reconfigure(specs.SlidingWindowCounter(3, 1.0))
    with pytest.raises(ValueError, match="keeps its window"):
        keyed.reconfigure(specs.FixedWindow(3, 2.0))
    assert keyed.spec == specs.FixedWindow(3, 1.0)
    assert sum(bool(keyed.acquire("a")) for _ in range(4)) == 3
    keyed.close()
    with pytest.raises(LimiterClosedError):
        keyed.reconfigure(specs.FixedWindow(4, 1.0))


def test_a_translated_view_reconfigures_every_key_of_its_limiter() -> None:
    keyed = permits.PartitionedLimiter.per_key(specs.FixedWindow(2, 1.0), clock=ManualClock())
    folded = keyed.with_translated_key(str.casefold)
    folded.reconfigure(specs.FixedWindow(3, 1.0))
    assert keyed.spec == specs.FixedWindow(3, 1.0)
    assert sum(bool(folded.acquire("Alice")) for _ in range(4)) == 3


def test_a_keyed_limiter_without_the_hook_says_so() -> None:
    keyed = permits.PartitionedLimiter(lambda key: permits.Partition.fixed_window(key, 2, 1.0))
    with pytest.raises(NotImplementedError, match="cannot be reconfigured"):
        keyed.reconfigure(specs.FixedWindow(3, 1.0))
