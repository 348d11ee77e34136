"""Custom limiters, chains and partitions at their edges: what a close does to their waits, hooks
that misbehave (return no lease, raise, raise an interruption), clocks, keys and small checks.

Hangs are bounded: a blocking call runs in a thread joined with a safety limit, or in a child
interpreter under a time limit.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import permits
from permits import Lease, Partition, PartitionedLimiter, specs

from _child import run_ok
from _support import SAFETY, need, wait_until


class Refusing(permits.RateLimiter):
    """Refuses with the given retry_after, counting its attempts."""

    def __init__(self, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retry_after = retry_after
        self.attempts = 0

    def _acquire(self, permit_count: int) -> Lease:
        self.attempts += 1
        return Lease.denied(retry_after=self.retry_after)


class InThread:
    """Runs a blocking call in a thread; ``result()`` joins it (a safety net against hangs)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def result(self) -> Any:
        self.thread.join(SAFETY)
        assert not self.thread.is_alive(), "the call hung"
        if self.error is not None:
            raise self.error
        return self.value


# ------------------------------------------------------------------ close ends the waits at once


def test_close_ends_a_custom_limiters_blocking_wait_at_once() -> None:
    limiter = Refusing(retry_after=3600.0)
    call = InThread(limiter.wait)
    wait_until(lambda: limiter.attempts >= 1)
    limiter.close()
    lease = call.result()
    assert not lease and lease.reason == "closed"


async def test_close_ends_a_custom_limiters_wait_async_at_once() -> None:
    limiter = Refusing(retry_after=3600.0)
    waiting = asyncio.ensure_future(limiter.wait_async(2))
    await asyncio.sleep(0.01)
    assert limiter.attempts == 1
    limiter.close()
    lease = await asyncio.wait_for(waiting, SAFETY)
    assert not lease and lease.reason == "closed" and lease.permit_count == 2


def test_close_ends_a_custom_limiters_wait_async_at_once_under_trio() -> None:
    trio = need("trio")
    limiter = Refusing(retry_after=3600.0)

    def close_once_asked() -> None:
        wait_until(lambda: limiter.attempts >= 1)
        limiter.close()

    async def main() -> Lease:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: trio.to_thread.run_sync(lambda: (wait_until(lambda: limiter.attempts >= 1), limiter.close()))
            )
            with trio.fail_after(SAFETY):
                return await limiter.wait_async()
        raise AssertionError("unreachable")

    lease = trio.run(main)
    assert not lease and lease.reason == "closed"


class Overridden(permits.RateLimiter):
    """Its own _wait_async, which waits for ever unless told."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    def _acquire(self, permit_count: int) -> Lease:
        return Lease.denied()

    async def _wait_async(self, permit_count: int) -> Lease:
        await self.go.wait()
        return Lease.granted(permit_count)


async def test_close_ends_an_overridden_wait_async_at_once() -> None:
    limiter = Overridden()
    waiting = asyncio.ensure_future(limiter.wait_async())
    await asyncio.sleep(0.01)
    limiter.close()
    lease = await asyncio.wait_for(waiting, SAFETY)
    assert lease.reason == "closed"


async def test_closing_a_chain_ends_its_pending_waits_at_once_and_gives_back() -> None:
    first = permits.ConcurrencyLimiter(1)
    second = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = second.acquire()
    chained = permits.chain(first, second)
    waiting = asyncio.ensure_future(chained.wait_async())
    await asyncio.sleep(0.01)
    assert first.available_permits() == 0 and second.statistics().current_queued_count == 1
    chained.close()
    lease = await asyncio.wait_for(waiting, SAFETY)
    assert not lease and lease.reason == "closed"
    assert first.available_permits() == 1  # given back
    assert second.statistics().current_queued_count == 0  # left the queue
    held.release()
    assert second.available_permits() == 1  # not handed to the closed chain's wait


def test_closing_a_chain_never_grants_its_blocking_wait_afterwards() -> None:
    first = permits.ConcurrencyLimiter(1)
    second = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = second.acquire()
    chained = permits.chain(first, second)
    call = InThread(chained.wait)
    wait_until(lambda: second.statistics().current_queued_count == 1)
    chained.close()
    held.release()  # the member grants: the chain, closed, gives it back
    lease = call.result()
    assert not lease and lease.reason == "closed"
    assert first.available_permits() == 1 and second.available_permits() == 1


# ------------------------------------------------------------------- clocks and long retry_after


def test_a_custom_limiters_wait_times_out_on_its_own_clock() -> None:
    clock = permits.ManualClock()
    limiter = Refusing(clock=clock)  # no retry_after: polls
    call = InThread(lambda: limiter.wait(timeout=0.05))
    wait_until(lambda: limiter.attempts >= 30)  # well past 0.05 s of real time
    assert call.thread.is_alive()  # the ManualClock has not moved
    clock.advance(0.05)
    lease = call.result()
    assert not lease and lease.reason == "timeout"


def test_a_custom_limiters_pause_for_retry_after_runs_on_its_clock() -> None:
    clock = permits.ManualClock()
    granted = threading.Event()

    class OpensAt5(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> Lease:
            if clock.now() >= 5.0:
                granted.set()
                return Lease.granted(permit_count)
            return Lease.denied(retry_after=5.0 - clock.now())

    limiter = OpensAt5(clock=clock)
    call = InThread(limiter.wait)
    clock.advance(5.0)  # the pause ends with the advance, not after 5 s of real time
    assert call.result()


class SlowToAnswer(permits.RateLimiter):
    """Refuses until its clock reads 5 s, its answer taking the whole 5 s it asks to wait."""

    def _acquire(self, permit_count: int) -> Lease:
        if self._rl_clock.now() >= 5.0:
            return Lease.granted(permit_count)
        self._rl_clock.advance(5.0)  # (a ManualClock: the time the answer took)
        return Lease.denied(retry_after=5.0)


def test_retry_after_counts_from_when_the_limiter_was_asked() -> None:
    # The time spent answering is part of the pause, not added to it: the wait asks again at 5 s,
    # not at 10 s (which this clock never reaches: the call would hang).
    call = InThread(SlowToAnswer(clock=permits.ManualClock()).wait)
    assert call.result()


async def test_retry_after_counts_from_when_the_limiter_was_asked_async() -> None:
    async with asyncio.timeout(SAFETY):
        assert await SlowToAnswer(clock=permits.ManualClock()).wait_async()


def test_a_huge_retry_after_waits_instead_of_overflowing() -> None:
    limiter = Refusing(retry_after=1e10)
    call = InThread(limiter.wait)
    wait_until(lambda: limiter.attempts >= 1)
    assert call.thread.is_alive()  # waiting, not OverflowError
    limiter.close()
    assert call.result().reason == "closed"


async def test_a_huge_retry_after_waits_instead_of_overflowing_async() -> None:
    limiter = Refusing(retry_after=1e10)
    waiting = asyncio.ensure_future(limiter.wait_async())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    limiter.close()
    assert (await asyncio.wait_for(waiting, SAFETY)).reason == "closed"


# --------------------------------------------------------------------- hooks that misbehave


class Returns(permits.RateLimiter):
    def __init__(self, wait_result: object = None, acquire_async_result: object = None) -> None:
        super().__init__()
        self.wait_result = wait_result
        self.acquire_async_result = acquire_async_result

    def _acquire(self, permit_count: int) -> Lease:
        return Lease.granted(permit_count)

    async def _acquire_async(self, permit_count: int) -> Any:
        return self.acquire_async_result

    async def _wait_async(self, permit_count: int) -> Any:
        return self.wait_result


async def test_a_wait_async_hook_returning_no_lease_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"Returns\._wait_async must return a permits\.Lease, got NoneType"):
        await Returns().wait_async()


async def test_an_acquire_async_hook_returning_no_lease_is_blamed_on_it() -> None:
    with pytest.raises(TypeError, match=r"Returns\._acquire_async must return a permits\.Lease, got str"):
        await Returns(acquire_async_result="yes").acquire_async()


@pytest.mark.parametrize("method", ["wait_async", "acquire_async"])
async def test_a_chain_gives_back_what_it_took_when_a_hook_returns_no_lease(method: str) -> None:
    pool = permits.ConcurrencyLimiter(1)
    chained = permits.chain(pool, Returns(wait_result=42, acquire_async_result=42))
    with pytest.raises(TypeError, match=r"must return a permits\.Lease, got int"):
        await getattr(chained, method)()
    assert pool.available_permits() == 1


class Counted(permits.KeyedRateLimiter):
    """Grants leases whose refunds and releases it counts; _on_outcome may raise."""

    def __init__(self, raise_in_outcome: BaseException | None = None) -> None:
        super().__init__()
        self.held = 0
        self.outcomes: list[tuple[object, bool]] = []
        self.raise_in_outcome = raise_in_outcome

    def _acquire(self, resource: object, permit_count: int) -> Lease:
        self.held += permit_count

        def back() -> None:
            self.held -= permit_count

        return Lease.granted(permit_count, on_release=back)

    async def _wait_async(self, resource: object, permit_count: int) -> Lease:
        return self._acquire(resource, permit_count)

    def _on_outcome(self, resource: object, lease: Lease) -> None:
        self.outcomes.append((resource, bool(lease)))
        if self.raise_in_outcome is not None:
            raise self.raise_in_outcome


def test_an_outcome_hook_raising_after_a_grant_gives_the_grant_back() -> None:
    limiter = Counted(raise_in_outcome=ValueError("bookkeeping failed"))
    with pytest.raises(ValueError, match="bookkeeping failed"):
        limiter.acquire("k", 2)
    assert limiter.held == 0


async def test_an_outcome_hook_raising_in_a_chain_gives_everything_back() -> None:
    pool = permits.ConcurrencyLimiter(1)
    limiter = Counted(raise_in_outcome=ValueError("bookkeeping failed"))
    chained = permits.chain(pool, limiter)
    with pytest.raises(ValueError):
        chained.acquire("k")
    with pytest.raises(ValueError):
        await chained.wait_async("k")
    assert limiter.held == 0 and pool.available_permits() == 1


def test_grants_of_an_overridden_wait_async_are_counted_once_with_their_outcome() -> None:
    limiter = Counted()

    async def main() -> None:
        (await limiter.wait_async("k")).release()
        (await limiter.wait_async("j", 2)).release()

    asyncio.run(main())
    assert limiter.statistics().total_successful_leases == 2
    assert limiter.outcomes == [("k", True), ("j", True)]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, asyncio.CancelledError])
def test_an_interruption_in_a_refund_callback_gives_every_member_back_first(interruption: type) -> None:
    given_back: list[str] = []

    class Member(permits.RateLimiter):
        def __init__(self, name: str, raises: bool) -> None:
            super().__init__(name=name)
            self.raises = raises

        def _acquire(self, permit_count: int) -> Lease:
            def refund() -> None:
                given_back.append(self.name)
                if self.raises:
                    raise interruption()

            return Lease.granted(permit_count, on_refund=refund)

    refusing = Refusing()
    chained = permits.chain(Member("a", True), Member("b", True), Member("c", False), refusing)
    with pytest.raises(interruption) as raised:
        chained.acquire()
    assert given_back == ["c", "b", "a"]  # every member, in reverse order
    assert type(raised.value) is interruption  # the first raised, itself (not in a group)


def test_a_denial_a_hook_keeps_is_not_rewritten() -> None:
    kept = Lease.denied(retry_after=2.0, metadata={"why": "cpu"})

    class Shared(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> Lease:
            return kept

    before = kept.permit_count
    lease = Shared().acquire(3)
    assert lease.permit_count == 3 and lease.retry_after == 2.0 and lease.metadata["why"] == "cpu"
    assert kept.permit_count == before != 3


async def test_hooks_get_a_plain_int_permit_count() -> None:
    class Count(int):
        pass

    seen: list[type] = []

    class Seeing(permits.RateLimiter):
        def _acquire(self, permit_count: int) -> Lease:
            seen.append(type(permit_count))
            return Lease.granted(permit_count)

        async def _wait_async(self, permit_count: int) -> Lease:
            seen.append(type(permit_count))
            return Lease.granted(permit_count)

    limiter = Seeing()
    limiter.acquire(Count(1))
    await limiter.wait_async(Count(1))
    await limiter.acquire_async(Count(1))
    assert seen == [int, int, int]


# ------------------------------------------------------------------------- awaited once


@pytest.mark.parametrize(
    "make",
    [lambda: Counted(), lambda: permits.chain(permits.ConcurrencyLimiter(3), Counted())],
    ids=["custom", "chain"],
)
async def test_a_wait_async_awaited_twice_raises(make: Callable[[], Any]) -> None:
    limiter = make()
    waiting = limiter.wait_async("k")
    lease = await waiting
    with pytest.raises(RuntimeError, match="already awaited"):
        await waiting
    with pytest.raises(RuntimeError, match="already awaited"):
        async with waiting:
            pass
    lease.release()


async def test_an_acquire_async_awaited_twice_acquires_once() -> None:
    limiter = Counted()
    attempt = limiter.acquire_async("k")
    first = await attempt
    assert await attempt is first
    async with attempt as lease:
        assert lease is first
    assert limiter.statistics().total_successful_leases == 1
    assert limiter.held == 0  # released once, by the async with


async def test_a_partitioned_acquire_async_awaited_twice_acquires_once() -> None:
    limiter = PartitionedLimiter(lambda key: Partition.concurrency(key, 2))
    attempt = limiter.acquire_async("k")
    first = await attempt
    assert await attempt is first
    assert limiter.available_permits("k") == 1


# ------------------------------------------------------------------------------ partitions


def test_a_factory_that_uses_its_own_key_raises_instead_of_hanging() -> None:
    run_ok(
        """
        import permits
        from permits import Partition, PartitionedLimiter
        errors = []

        def factory(key):
            try:
                limiter.statistics(key)
            except RuntimeError as exc:
                errors.append(str(exc))
            return permits.ConcurrencyLimiter(1)

        limiter = PartitionedLimiter(lambda key: Partition.custom(key, factory))
        held = limiter.acquire("a")
        assert held
        assert errors and "being built by this thread" in errors[0], errors
        assert not limiter.acquire("a")  # the key works afterwards
        assert limiter.statistics("a").current_available_permits == 0
        print("ok")
        """,
        timeout=30,
    )


class BadStatistics(permits.RateLimiter):
    closed_count = 0

    def _acquire(self, permit_count: int) -> Lease:
        return Lease.granted(permit_count)

    @property
    def idle_duration(self) -> float | None:
        return 100.0

    def _statistics(self) -> permits.Statistics:
        raise ValueError("statistics failed")

    def close(self) -> None:
        BadStatistics.closed_count += 1
        super().close()


def test_an_eviction_whose_statistics_raise_disturbs_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    BadStatistics.closed_count = 0
    clock = permits.ManualClock()
    limiter = PartitionedLimiter(
        lambda key: Partition.custom(key, lambda k: BadStatistics()), idle_timeout=1.0, clock=clock
    )
    assert limiter.acquire("a")
    clock.advance(5.0)  # evicts "a": its statistics raise, advance does not
    assert limiter.acquire("b")  # nor another key's acquire
    assert BadStatistics.closed_count == 1  # the evicted limiter was closed all the same
    assert reported and isinstance(reported[0].exc_value, ValueError)
    assert type(reported[0]).__name__ == "UnraisableHookArgs"


def test_eviction_errors_reach_the_default_unraisable_hook() -> None:
    child = run_ok(
        """
        import permits
        from permits import Lease, Partition, PartitionedLimiter

        class Bad(permits.RateLimiter):
            def _acquire(self, n):
                return Lease.granted(n)
            @property
            def idle_duration(self):
                return 100.0
            def _statistics(self):
                raise ValueError("statistics failed")
            def close(self):
                super().close()
                raise OSError("close failed")

        clock = permits.ManualClock()
        limiter = PartitionedLimiter(lambda key: Partition.custom(key, lambda k: Bad()), idle_timeout=1.0, clock=clock)
        limiter.acquire("a")
        clock.advance(5.0)
        print("advanced")
        """,
        timeout=30,
    )
    assert child.lines() == ["advanced"]
    assert "statistics failed" in child.stderr and "close failed" in child.stderr
    assert "Exception ignored while" in child.stderr


def test_a_key_whose_hash_changes_does_not_break_eviction() -> None:
    class Shifty(str):
        calls = 0

        def __hash__(self) -> int:
            Shifty.calls += 1
            return Shifty.calls

        def __eq__(self, other: object) -> bool:
            return False

    clock = permits.ManualClock()
    shifty = PartitionedLimiter(lambda key: Partition.concurrency(key, 1), idle_timeout=1.0, clock=clock)
    other = PartitionedLimiter(lambda key: Partition.concurrency(key, 1), idle_timeout=1.0, clock=clock)
    lease = shifty.acquire(Shifty("x"))
    assert lease and not shifty.acquire(Shifty("x"))  # the same key, by its value
    lease.release()
    held = other.acquire("y")
    assert held
    clock.advance(5.0)
    assert shifty.partition_count == 0 and other.partition_count == 1


def test_max_partitions_beyond_the_engines_range_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="max_partitions is too large"):
        PartitionedLimiter.per_key(specs.TokenBucket(1, 1, 1.0), max_partitions=2**63)
    with pytest.raises(ValueError, match="max_partitions is too large"):
        PartitionedLimiter(lambda key: Partition.concurrency(key, 1), max_partitions=2**63)
    assert PartitionedLimiter.per_key(specs.TokenBucket(1, 1, 1.0), max_partitions=2**63 - 1)


# ----------------------------------------------------------------------------- spec repr


@given(st.integers(1, 2**62), st.sampled_from(["ns", "float", "timedelta"]))
def test_a_specs_repr_gives_it_back(ns: int, made_from: str) -> None:
    if made_from == "float":
        duration: Any = ns / 1e9
    elif made_from == "timedelta":
        duration = timedelta(microseconds=max(1, ns // 1000))
    else:
        duration = timedelta(microseconds=max(1, ns // 1000)) if ns % 1000 else ns // 10**9 or 1
    for spec in (
        specs.TokenBucket(3, 1, duration),
        specs.FixedWindow(3, duration),
        specs.SlidingWindowCounter(3, duration),
    ):
        assert eval(repr(spec), {**vars(specs), "timedelta": timedelta}) == spec
