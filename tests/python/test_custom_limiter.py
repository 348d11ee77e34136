"""Custom limiters written in Python (docs/custom.md; docs/design.md, Custom limiters).

A subclass of ``permits.RateLimiter`` calls ``super().__init__()`` and implements
``_acquire(permit_count) -> Lease``; the base class validates arguments and provides every
public member.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

import permits

from _support import SAFETY, Waiter, result


class Switch(permits.RateLimiter):
    """Grants while ``open``; records every call to _acquire."""

    def __init__(self, *, open_: bool = True, retry_after: float | None = None, reason: str = "switched_off") -> None:
        super().__init__()
        self.open = open_
        self.reason = reason
        self.retry_after = retry_after
        self.calls: list[int] = []
        self.released: list[int] = []

    def _acquire(self, permit_count: int) -> permits.Lease:
        self.calls.append(permit_count)
        if self.open:
            return permits.Lease.granted(permit_count, on_release=lambda: self.released.append(permit_count))
        return permits.Lease.denied(self.reason, retry_after=self.retry_after, metadata={"who": "switch"})


class DenyTimes(permits.RateLimiter):
    """Denies the first ``n`` requests with a short retry_after, then grants."""

    def __init__(self, n: int, retry_after: float | None = 0.001) -> None:
        super().__init__(name="deny-times")
        self.remaining = n
        self.retry_after = retry_after
        self.calls = 0
        self._lock = threading.Lock()

    def _acquire(self, permit_count: int) -> permits.Lease:
        with self._lock:
            self.calls += 1
            if self.remaining > 0:
                self.remaining -= 1
                return permits.Lease.denied(retry_after=self.retry_after)
            return permits.Lease.granted(permit_count)


def test_custom_limiter_is_a_rate_limiter():
    lim = Switch()
    assert isinstance(lim, permits.RateLimiter)


def test_granted_lease_and_on_release_called_once():
    lim = Switch()
    lease = lim.acquire(3)
    assert lease.acquired
    assert lease.permit_count == 3
    assert lease.reason is None and lease.retry_after is None
    assert lim.calls == [3]
    lease.release()
    lease.release()
    assert lim.released == [3]
    with lim.acquire() as second:
        assert second.acquired
    assert lim.released == [3, 1]


def test_denied_lease_gets_requested_permit_count_and_metadata():
    lim = Switch(open_=False, retry_after=2.5)
    lease = lim.acquire(4)
    assert not lease.acquired
    assert lease.permit_count == 4  # filled in by the base class
    assert lease.reason == "switched_off"
    assert lease.retry_after == pytest.approx(2.5)
    assert lease.metadata["who"] == "switch"
    assert lease.metadata["reason"] == "switched_off"
    assert lease.metadata["retry_after"] == pytest.approx(2.5)


def test_default_statistics_count_successes_and_failures():
    lim = Switch()
    lim.acquire()
    lim.acquire(2)
    lim.open = False
    lim.acquire()
    s = lim.statistics()
    assert s.total_successful_leases == 2
    assert s.total_failed_leases == 1
    assert s.current_queued_count == 0
    assert s.current_available_permits == 0
    assert lim.available_permits() == 0


def test_custom_statistics_override():
    class WithStats(Switch):
        def _statistics(self):
            return permits.Statistics(
                current_available_permits=7,
                current_queued_count=1,
                total_successful_leases=2,
                total_failed_leases=3,
            )

    s = WithStats().statistics()
    assert (s.current_available_permits, s.current_queued_count) == (7, 1)
    assert (s.total_successful_leases, s.total_failed_leases) == (2, 3)


def test_custom_limiter_is_never_idle_by_default():
    lim = Switch()
    assert lim.idle_duration is None
    lim.acquire().release()
    assert lim.idle_duration is None


def test_custom_idle_duration_override():
    class Idle(Switch):
        @property
        def idle_duration(self):
            return 12.5

    assert Idle().idle_duration == 12.5


@pytest.mark.parametrize("count", [-1, -100])
async def test_base_class_validates_negative_permit_count(count):
    lim = Switch()
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(count)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.acquire_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.wait_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait(count, timeout=0)
    assert lim.calls == []


@pytest.mark.parametrize("value", [True, 1.0, "1"])
def test_base_class_validates_permit_count_type(value):
    lim = Switch()
    with pytest.raises(TypeError):
        lim.acquire(value)
    assert lim.calls == []


def test_exceptions_from_acquire_propagate():
    class Broken(permits.RateLimiter):
        def __init__(self):
            super().__init__()

        def _acquire(self, permit_count):
            raise OSError("sensor unavailable")

    with pytest.raises(OSError, match="sensor unavailable"):
        Broken().acquire()


async def test_acquire_async_uses_acquire():
    lim = Switch()
    lease = await result(lim.acquire_async(2))
    assert lease.acquired
    assert lim.calls == [2]


async def test_default_wait_async_asks_again_until_granted():
    lim = DenyTimes(3, retry_after=0.001)
    lease = await asyncio.wait_for(lim.wait_async(), SAFETY)
    assert lease.acquired
    assert lim.calls == 4
    assert lim.remaining == 0


async def test_default_wait_async_without_retry_after_uses_a_short_pause():
    lim = DenyTimes(2, retry_after=None)
    lease = await asyncio.wait_for(lim.wait_async(), SAFETY)
    assert lease.acquired
    assert lim.calls == 3


async def test_default_wait_async_can_be_cancelled():
    lim = Switch(open_=False, retry_after=0.001, reason="limit_reached")
    task = asyncio.ensure_future(lim.wait_async())
    await asyncio.sleep(0.02)
    assert not task.done()
    assert len(lim.calls) >= 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    calls = len(lim.calls)
    await asyncio.sleep(0.02)
    assert len(lim.calls) == calls  # stopped asking


async def test_custom_wait_async_override_is_used():
    class Fast(Switch):
        async def _wait_async(self, permit_count):
            return permits.Lease.granted(permit_count, metadata={"path": "custom"})

    lim = Fast(open_=False)
    lease = await result(lim.wait_async(2))
    assert lease.acquired
    assert lease.metadata["path"] == "custom"


async def test_wait_async_context_manager_releases_custom_lease():
    lim = Switch()
    async with lim.wait_async() as lease:
        assert lease.acquired
        assert lim.released == []
    assert lim.released == [1]


def test_blocking_wait_on_custom_limiter():
    lim = DenyTimes(2, retry_after=0.001)
    waiter = Waiter(lim)
    waiter.start()
    lease = waiter.outcome()
    assert lease.acquired
    assert lim.calls == 3


def test_close_makes_later_calls_raise():
    lim = Switch()
    with contextlib.closing(lim):
        assert lim.acquire().acquired
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire()
    with pytest.raises(permits.LimiterClosedError):
        lim.statistics()


def test_name_keyword_is_accepted():
    lim = DenyTimes(0)
    assert lim.acquire().acquired


def test_thread_safety_is_the_subclass_concern_but_base_counts_are_exact():
    lim = Switch()
    n_threads, per_thread = 8, 500

    def hammer():
        for _ in range(per_thread):
            lim.acquire().release()

    threads = [threading.Thread(target=hammer) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SAFETY * 4)
    assert lim.statistics().total_successful_leases == n_threads * per_thread


def test_close_ends_a_blocking_wait_with_a_closed_lease():
    """A custom limiter's wait() asks again every 10 ms; a close in between ends it (not an error)."""
    lim = DenyTimes(10**9, retry_after=None)
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(lim.wait(1)))
    waiter.start()
    while lim.calls == 0:
        threading.Event().wait(0.001)
    lim.close()
    waiter.join(SAFETY)
    assert not waiter.is_alive()
    assert got[0].reason == "closed" and got[0].permit_count == 1
