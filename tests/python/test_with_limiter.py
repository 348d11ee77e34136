"""`with limiter:` and `async with limiter:` hold one permit for the block, as threading.Semaphore
and aiolimiter do, and never close the limiter (issue 40, item 1)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

import permits
from permits import Lease


class Numbered(permits.RateLimiter):
    """Grants numbered leases and records which were released, in order."""

    def __init__(self) -> None:
        super().__init__(name="numbered")
        self.granted = 0
        self.released: list[int] = []
        self._numbering = threading.Lock()  # (free-threaded: two threads' += could give one number twice)

    def _acquire(self, permit_count: int) -> Lease:
        with self._numbering:
            self.granted += 1
            number = self.granted
        return Lease.granted(permit_count, on_release=lambda: self.released.append(number))


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_with_holds_one_permit_for_the_block_and_never_closes() -> None:
    limiter = permits.ConcurrencyLimiter(2)
    with limiter as lease:
        assert lease.acquired and lease.permit_count == 1
        assert limiter.available_permits() == 1
        with limiter:  # nested blocks hold a permit each
            assert limiter.available_permits() == 0
        assert limiter.available_permits() == 1
    assert limiter.available_permits() == 2
    assert limiter.acquire()  # still open


def test_with_releases_when_the_block_raises() -> None:
    limiter = permits.ConcurrencyLimiter(1)
    with pytest.raises(KeyError), limiter:
        raise KeyError("boom")
    assert limiter.available_permits() == 1


def test_with_waits_for_the_permit() -> None:
    clock = permits.ManualClock()
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    assert limiter.acquire()
    entered = threading.Event()

    def block() -> None:
        with limiter:
            entered.set()

    thread = threading.Thread(target=block)
    thread.start()
    assert not entered.wait(0.05)  # waits in the queue: the window is spent
    clock.advance(1.0)
    assert entered.wait(5.0)
    thread.join(5.0)


def test_a_failed_wait_raises_lease_failed_error() -> None:
    limiter = permits.ConcurrencyLimiter(1, queue_limit=0, name="db")
    held = limiter.acquire()
    with pytest.raises(permits.LeaseFailedError, match=r"'db'.*queue_full") as caught, limiter:
        pytest.fail("the block must not run")
    assert isinstance(caught.value, RuntimeError)
    assert not caught.value.lease and caught.value.lease.reason == "queue_full"
    held.release()
    assert limiter.available_permits() == 1


async def test_async_with_paces_the_blocks() -> None:
    clock = permits.ManualClock()
    limiter = permits.TokenBucketLimiter(4, 1, 0.5, clock=clock)
    entered: list[int] = []

    async def job(n: int) -> None:
        async with limiter:
            entered.append(n)

    tasks = [asyncio.create_task(job(n)) for n in range(10)]
    await settle()
    assert entered == [0, 1, 2, 3]  # the burst; the rest wait their turn
    for expected in range(5, 11):
        clock.advance(0.5)
        await settle()
        assert len(entered) == expected
    await asyncio.gather(*tasks)
    assert limiter.acquire() is not None  # never closed


async def test_async_with_holds_and_releases() -> None:
    limiter = permits.ConcurrencyLimiter(2)
    async with limiter as lease:
        assert lease and limiter.available_permits() == 1
    assert limiter.available_permits() == 2


async def test_async_with_closed_meanwhile_raises_lease_failed_error() -> None:
    limiter = permits.ConcurrencyLimiter(1)
    held = limiter.acquire()

    async def block() -> None:
        async with limiter:
            pytest.fail("the block must not run")

    task = asyncio.create_task(block())
    await settle()
    limiter.close()
    with pytest.raises(permits.LeaseFailedError, match="closed") as caught:
        await task
    assert caught.value.lease.reason == "closed"
    held.release()


async def test_concurrent_blocks_release_their_own_lease() -> None:
    limiter = Numbered()
    first_in, second_in, first_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with limiter:
            first_in.set()
            await second_in.wait()
        first_out.set()

    async def second() -> None:
        await first_in.wait()
        async with limiter:
            second_in.set()
            await first_out.wait()
            assert limiter.released == [1]  # the first task's lease, not this one's

    await asyncio.gather(first(), second())
    assert limiter.released == [1, 2]


def test_threads_release_their_own_lease() -> None:
    limiter = Numbered()
    inside, leave = threading.Barrier(2), threading.Event()
    leases: dict[str, Lease] = {}

    def block(name: str) -> None:
        with limiter as lease:
            leases[name] = lease
            inside.wait(5.0)
            if name == "a":
                return
            leave.wait(5.0)

    b = threading.Thread(target=block, args=("b",))
    b.start()
    block("a")
    number_a = 1 if limiter.released == [1] else 2
    assert limiter.released == [number_a]  # b still holds its own
    leave.set()
    b.join(5.0)
    assert sorted(limiter.released) == [1, 2]


def test_chains_and_custom_limiters_hold_too() -> None:
    a, b = permits.ConcurrencyLimiter(1), permits.ConcurrencyLimiter(2)
    chained = permits.chain(a, b)
    with chained:
        assert a.available_permits() == 0 and b.available_permits() == 1
    assert a.available_permits() == 1 and b.available_permits() == 2
    custom = Numbered()
    with custom:
        assert custom.released == []
    assert custom.released == [1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: permits.PartitionedLimiter.per_key(permits.specs.Concurrency(1)),
        lambda: permits.PartitionedLimiter(lambda key: permits.Partition.concurrency(key, 1)),
    ],
    ids=["per_key", "partitioned"],
)
async def test_a_keyed_limiter_needs_a_key(make: object) -> None:
    keyed = make()  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"with keyed\.wait\(key\)"), keyed:
        pass
    with pytest.raises(TypeError, match=r"async with keyed\.wait_async\(key\)"):
        async with keyed:
            pass
    assert keyed.acquire("k")  # still open


async def test_closing_stays_close_and_aclose() -> None:
    limiter = permits.ConcurrencyLimiter(1)
    with contextlib.closing(limiter):
        pass
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire()
    other = permits.ConcurrencyLimiter(1)
    async with contextlib.aclosing(other):
        pass
    with pytest.raises(permits.LimiterClosedError):
        other.acquire()


def test_lease_failed_error_pickles_with_what_it_says() -> None:
    import pickle

    limiter = permits.ConcurrencyLimiter(1, queue_limit=0, name="db")
    held = limiter.acquire()
    with pytest.raises(permits.LeaseFailedError) as caught, limiter:
        pass
    held.release()
    copy = pickle.loads(pickle.dumps(caught.value))
    assert str(copy) == str(caught.value)
    assert copy.lease.reason == "queue_full" and copy.lease.metadata["limiter"] == "db"
