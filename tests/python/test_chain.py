"""permits.chain (docs/design.md, Chains: chains refund)."""

from __future__ import annotations

import asyncio

import pytest

import permits
from permits import Lease, RateLimiter


class Recording(RateLimiter):
    """A custom limiter that records calls, and can be told to deny or to raise."""

    def __init__(
        self,
        log: list[str],
        name: str,
        *,
        deny: bool = False,
        raise_on_acquire: bool = False,
        raise_on_release: bool = False,
        metadata: dict[str, object] | None = None,
    ) -> None:
        super().__init__(name=name)
        self.log = log
        self.deny = deny
        self.raise_on_acquire = raise_on_acquire
        self.raise_on_release = raise_on_release
        self.metadata = metadata
        self.held = 0

    def _acquire(self, permit_count: int) -> Lease:
        self.log.append(f"acquire {self.name} {permit_count}")
        if self.raise_on_acquire:
            raise RuntimeError(f"{self.name} failed")
        if self.deny:
            return Lease.denied("limit_reached", retry_after=3.0, metadata={"who": self.name})
        self.held += permit_count

        def release() -> None:
            self.log.append(f"release {self.name}")
            self.held -= permit_count
            if self.raise_on_release:
                raise RuntimeError(f"{self.name} release failed")

        return Lease.granted(permit_count, on_release=release, metadata=self.metadata)


def test_chain_needs_limiters() -> None:
    with pytest.raises(ValueError, match="at least one"):
        permits.chain()
    with pytest.raises(TypeError, match="argument 1"):
        permits.chain(permits.NoLimiter(), None)  # type: ignore[arg-type]


def test_changes_to_the_callers_sequence_are_ignored() -> None:
    a = permits.ConcurrencyLimiter(1)
    limiters = [a]
    chained = permits.chain(*limiters)
    limiters.append(permits.ConcurrencyLimiter(0 + 1))
    assert chained.limiters == (a,)


def test_works_with_a_single_limiter() -> None:
    a = permits.ConcurrencyLimiter(1)
    chained = permits.chain(a)
    lease = chained.acquire()
    assert lease and a.available_permits() == 0
    assert not chained.acquire()
    lease.release()
    assert a.available_permits() == 1


def test_acquires_from_every_limiter_and_releases_in_reverse_order() -> None:
    log: list[str] = []
    chained = permits.chain(Recording(log, "a"), Recording(log, "b"), Recording(log, "c"))
    lease = chained.acquire(2)
    assert lease and lease.permit_count == 2
    lease.release()
    lease.release()  # idempotent
    assert log == ["acquire a 2", "acquire b 2", "acquire c 2", "release c", "release b", "release a"]


def test_a_rejection_stops_the_chain_and_gives_back_what_was_taken() -> None:
    log: list[str] = []
    a, b, c = Recording(log, "a"), Recording(log, "b", deny=True), Recording(log, "c")
    lease = permits.chain(a, b, c).acquire()
    assert not lease
    assert lease.reason == "limit_reached" and lease.retry_after == 3.0  # the failing limiter's lease
    assert lease.metadata["who"] == "b"
    assert log == ["acquire a 1", "acquire b 1", "release a"]  # c never asked
    assert a.held == 0


def test_an_exception_gives_back_what_was_taken_and_propagates_unwrapped() -> None:
    log: list[str] = []
    a, b = Recording(log, "a"), Recording(log, "b", raise_on_acquire=True)
    with pytest.raises(RuntimeError, match="b failed"):
        permits.chain(a, b).acquire()
    assert a.held == 0
    with pytest.raises(RuntimeError, match="b failed"):
        permits.chain(b).acquire()


def test_errors_while_giving_back_are_grouped_with_the_original() -> None:
    log: list[str] = []
    a = Recording(log, "a", raise_on_release=True)
    b = Recording(log, "b", raise_on_release=True)
    c = Recording(log, "c", raise_on_acquire=True)
    with pytest.raises(BaseExceptionGroup) as info:
        permits.chain(a, b, c).acquire()
    messages = [str(e) for e in info.value.exceptions]
    assert messages == ["b release failed", "a release failed", "c failed"]


def test_release_errors_of_a_combined_lease_are_raised_after_releasing_all() -> None:
    log: list[str] = []
    a = Recording(log, "a")
    b = Recording(log, "b", raise_on_release=True)
    lease = permits.chain(a, b).acquire()
    with pytest.raises(BaseExceptionGroup):
        lease.release()
    assert a.held == 0 and b.held == 0


def test_metadata_is_combined_and_the_first_value_wins() -> None:
    log: list[str] = []
    a = Recording(log, "a", metadata={"x": 1, "shared": "a"})
    b = Recording(log, "b", metadata={"y": 2, "shared": "b"})
    lease = permits.chain(a, b).acquire()
    assert dict(lease.metadata) == {"x": 1, "y": 2, "shared": "a"}


def test_statistics_take_the_lowest_available_and_sum_the_rest() -> None:
    clock = permits.ManualClock()
    a = permits.ConcurrencyLimiter(5, queue_limit=5)
    b = permits.TokenBucketLimiter(3, 1, 1.0, clock=clock)
    chained = permits.chain(a, b)
    held = chained.acquire(2)
    assert held
    assert not chained.acquire(2)  # b has 1 left: a's 2 are given back
    s1 = chained.statistics()
    s2 = chained.statistics()
    assert s1 == s2 and s1 is not s2
    assert s1.current_available_permits == 1
    assert s1.total_failed_leases == 1  # b's; a succeeded and was refunded
    assert s1.total_successful_leases == b.statistics().total_successful_leases == 1
    assert a.available_permits() == 3
    held.release()


def test_idle_duration_is_the_lowest_and_none_while_any_is_in_use() -> None:
    clock = permits.ManualClock()
    a = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock)
    b = permits.FixedWindowLimiter(1, 10.0, clock=clock)
    clock.advance(5.0)
    chained = permits.chain(a, b)
    assert chained.idle_duration == 5.0
    assert a.acquire()
    assert chained.idle_duration is None
    clock.advance(1.0)  # a is full again at 6 s
    assert chained.idle_duration == 0.0


def test_close_makes_the_chain_raise_but_leaves_its_limiters_open() -> None:
    a = permits.ConcurrencyLimiter(1)
    chained = permits.chain(a)
    chained.close()
    for call in (chained.acquire, chained.statistics, chained.wait, chained.wait_async):
        with pytest.raises(permits.LimiterClosedError):
            call()
    assert a.acquire()


# ------------------------------------------------------------------ refunds (docs/design.md, Refunds)


def test_a_rejection_refunds_tokens_to_an_earlier_bucket() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(10, 1, 1.0, clock=clock)
    strict = permits.FixedWindowLimiter(1, 60.0, clock=clock)
    chained = permits.chain(bucket, strict)
    assert chained.acquire(1)
    for _ in range(5):
        assert not chained.acquire(1)
    assert bucket.available_permits() == 9  # only the granted request cost a token


def test_a_rejection_refunds_window_counts_while_the_window_is_current() -> None:
    clock = permits.ManualClock()
    for window in (
        permits.FixedWindowLimiter(5, 10.0, clock=clock),
        permits.SlidingWindowLimiter(5, 10.0, 5, clock=clock),
        permits.SlidingWindowCounterLimiter(5, 10.0, clock=clock),
    ):
        blocker = permits.ConcurrencyLimiter(3)
        held = blocker.acquire(3)
        assert not permits.chain(window, blocker).acquire(3)
        assert window.available_permits() == 5, window
        held.release()


def test_a_refund_never_reaches_a_window_that_has_passed() -> None:
    clock = permits.ManualClock()
    window = permits.FixedWindowLimiter(5, 10.0, clock=clock)
    lease = window.acquire(3)
    clock.advance(10.0)  # a new window: the old count is gone already
    assert window.acquire(5)
    lease._refund()
    assert window.available_permits() == 0


def test_a_rejection_releases_earlier_concurrency_permits() -> None:
    clock = permits.ManualClock()
    pool = permits.ConcurrencyLimiter(2)
    rate = permits.TokenBucketLimiter(1, 1, 1.0, clock=clock)
    chained = permits.chain(pool, rate)
    first = chained.acquire()
    assert first and pool.available_permits() == 1
    assert not chained.acquire()
    assert pool.available_permits() == 1
    first.release()
    assert pool.available_permits() == 2


def test_the_permit_count_is_forwarded() -> None:
    log: list[str] = []
    permits.chain(Recording(log, "a"), Recording(log, "b")).acquire(3)
    assert log == ["acquire a 3", "acquire b 3"]


# ------------------------------------------------------------------ async and blocking


async def test_wait_async_waits_for_each_limiter_before_asking_the_next() -> None:
    clock = permits.ManualClock()
    first = permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=1, clock=clock)
    log: list[str] = []
    second = Recording(log, "second")
    assert first.acquire()
    task = asyncio.ensure_future(permits.chain(first, second).wait_async())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done() and log == []  # queued in the first; the second not asked yet
    clock.advance(1.0)
    lease = await asyncio.wait_for(task, 5)
    assert lease and log == ["acquire second 1"]
    lease.release()
    assert second.held == 0


async def test_cancelling_wait_async_gives_back_what_was_taken() -> None:
    clock = permits.ManualClock()
    pool = permits.ConcurrencyLimiter(1)
    rate = permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=1, clock=clock)
    assert rate.acquire()
    task = asyncio.ensure_future(permits.chain(pool, rate).wait_async())
    for _ in range(3):
        await asyncio.sleep(0)
    assert pool.available_permits() == 0  # taken, while the chain waits in the bucket's queue
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.available_permits() == 1
    assert rate.statistics().current_queued_count == 0


async def test_async_with_releases_the_combined_lease() -> None:
    pool = permits.ConcurrencyLimiter(1)
    async with permits.chain(pool, permits.NoLimiter()).wait_async() as lease:
        assert lease and pool.available_permits() == 0
    assert pool.available_permits() == 1


async def test_wait_async_rejection_returns_the_failed_lease_and_refunds() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(5, 1, 1.0, clock=clock)
    full = permits.ConcurrencyLimiter(2, queue_limit=0)  # a wait is rejected at once
    held = full.acquire(2)
    lease = await permits.chain(bucket, full).wait_async(2)
    assert not lease and lease.reason == "queue_full"
    assert bucket.available_permits() == 5
    held.release()


def test_blocking_wait_times_out_and_refunds() -> None:
    clock = permits.ManualClock()
    bucket = permits.TokenBucketLimiter(5, 1, 1.0, clock=clock)
    pool = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = pool.acquire()
    lease = permits.chain(bucket, pool).wait(timeout=0)
    assert not lease and lease.reason == "timeout"
    assert bucket.available_permits() == 5
    held.release()
    lease = permits.chain(bucket, pool).wait(timeout=0)
    assert lease and bucket.available_permits() == 4
