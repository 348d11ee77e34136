"""A chain's close ends its blocking waits at once, wherever each is blocked: queued in an engine
member (plain or per key), pausing between a custom member's attempts, or in an inner chain;
what earlier members granted goes back, and the members stay open and unharmed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import permits

from _support import wait_until


class Blocked(threading.Thread):
    """Runs ``call()`` (a chain's blocking wait) in a thread and keeps its lease."""

    def __init__(self, call: Callable[[], permits.Lease]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.lease: permits.Lease | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.lease = self.call()
        except BaseException as exc:
            self.error = exc

    def ended(self) -> permits.Lease:
        self.join(30)  # a safety bound for a hang, not a measure: the wait ends at close
        assert not self.is_alive(), "the chain's wait() did not end at close()"
        assert self.error is None, self.error
        assert self.lease is not None
        return self.lease


class Polling(permits.RateLimiter):
    """A custom limiter that never grants and says so without retry_after: waits poll it."""

    def __init__(self) -> None:
        super().__init__(name="polling")
        self.asked = 0

    def _acquire(self, permit_count: int) -> permits.Lease:
        self.asked += 1
        return permits.Lease.denied()


def _closed_by_the_chain(lease: permits.Lease, chained: Any) -> None:
    assert not lease
    assert lease.reason == "closed"
    assert lease.metadata["limiter"] == chained.name


@pytest.mark.parametrize("timeout", [None, 3600.0])
def test_a_wait_queued_in_an_engine_member_ends_at_close(timeout: float | None) -> None:
    first = permits.TokenBucketLimiter(5, 1, 3600.0, clock=permits.ManualClock())
    pool = permits.ConcurrencyLimiter(2, name="pool")
    held = pool.acquire(2)
    chained = permits.chain(first, pool, name="both")
    blocked = Blocked(lambda: chained.wait(2, timeout=timeout))
    blocked.start()
    wait_until(lambda: pool.statistics().current_queued_count == 2)  # (queued permits)
    chained.close()
    _closed_by_the_chain(blocked.ended(), chained)
    assert first.available_permits() == 5  # the first member's grant went back
    assert pool.statistics().current_queued_count == 0  # the request left the member's queue
    held.release()
    assert pool.acquire(2) and first.acquire(5)  # the members stay open and whole


def test_a_wait_queued_in_a_per_key_member_ends_at_close() -> None:
    per_user = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1), idle_timeout=0.0)
    held = per_user.acquire("alice")
    chained = permits.chain(permits.TokenBucketLimiter(5, 1, 3600.0), per_user, name="keyed")
    blocked = Blocked(lambda: chained.wait("alice"))
    blocked.start()
    wait_until(lambda: per_user.statistics("alice").current_queued_count == 1)
    chained.close()
    _closed_by_the_chain(blocked.ended(), chained)
    assert per_user.statistics("alice").current_queued_count == 0
    held.release()
    assert per_user.acquire("alice")


def test_a_wait_pausing_in_a_custom_member_ends_at_close() -> None:
    polling = Polling()
    chained = permits.chain(permits.ConcurrencyLimiter(1), polling, name="custom")
    blocked = Blocked(lambda: chained.wait())
    blocked.start()
    wait_until(lambda: polling.asked >= 2)  # it pauses between attempts
    chained.close()
    _closed_by_the_chain(blocked.ended(), chained)
    assert chained.limiters[0].available_permits() == 1
    assert polling.acquire() is not None  # the member itself stays open


def test_a_wait_in_an_inner_chain_ends_when_the_outer_one_closes() -> None:
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    inner = permits.chain(pool, name="inner")
    outer = permits.chain(permits.TokenBucketLimiter(5, 1, 3600.0), inner, name="outer")
    blocked = Blocked(lambda: outer.wait())
    blocked.start()
    wait_until(lambda: pool.statistics().current_queued_count == 1)
    outer.close()
    _closed_by_the_chain(blocked.ended(), outer)
    assert pool.statistics().current_queued_count == 0
    assert inner.acquire() is not None  # the inner chain was not closed
    held.release()


def test_closing_the_chain_ends_only_its_own_waits() -> None:
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    closing = permits.chain(pool, name="closing")
    other = permits.chain(pool, name="other")
    mine = Blocked(lambda: closing.wait())
    theirs = Blocked(lambda: other.wait())
    mine.start()
    wait_until(lambda: pool.statistics().current_queued_count == 1)
    theirs.start()
    wait_until(lambda: pool.statistics().current_queued_count == 2)
    closing.close()
    _closed_by_the_chain(mine.ended(), closing)
    assert theirs.is_alive()
    held.release()
    lease = theirs.ended()
    assert lease
    lease.release()


def test_a_member_waited_in_directly_is_not_ended_by_a_chain_close() -> None:
    pool = permits.ConcurrencyLimiter(1)
    held = pool.acquire()
    chained = permits.chain(pool)
    direct = Blocked(lambda: pool.wait())
    direct.start()
    wait_until(lambda: pool.statistics().current_queued_count == 1)
    chained.close()
    assert direct.is_alive()
    held.release()
    assert direct.ended()
