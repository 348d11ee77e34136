"""@permits.limit and permits.throttle: jobs paced by a limiter. On a ManualClock a paced wait
advances the clock, so the clock's readings are the exact schedule."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterator

import pytest

import permits
from permits import Partition, limit, throttle
from permits.specs import FixedWindow


# ---- @limit ----
def test_a_sync_function_is_paced(clock: permits.ManualClock):
    @limit(permits.FixedWindowLimiter(2, 1.0, clock=clock))
    def job(i: int) -> int:
        return i * 10

    seen = [(job(i), clock.now()) for i in range(5)]
    assert seen == [(0, 0.0), (10, 0.0), (20, 1.0), (30, 1.0), (40, 2.0)]


async def test_an_async_function_is_paced(clock: permits.ManualClock):
    @limit(permits.FixedWindowLimiter(2, 1.0, queue_limit=0, clock=clock))
    async def job(i: int) -> int:
        await asyncio.sleep(0)
        return i * 10

    seen = [(await job(i), clock.now()) for i in range(5)]
    assert seen == [(0, 0.0), (10, 0.0), (20, 1.0), (30, 1.0), (40, 2.0)]


async def test_an_async_function_waits_in_the_queue(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=5)

    @limit(limiter)
    async def job(i: int) -> int:
        return i

    assert await job(1) == 1
    second = asyncio.create_task(job(2))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    clock.advance(1.0)
    assert await second == 2


def test_permit_count_per_call(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(6, 1.0, clock=clock)

    @limit(limiter, 3)
    def job() -> float:
        return clock.now()

    assert [job() for _ in range(4)] == [0.0, 0.0, 1.0, 1.0]


def test_wraps_keeps_the_functions_identity():
    def job(a: int, b: int = 2) -> int:
        """Adds."""
        return a + b

    paced = limit(permits.NoLimiter())(job)
    assert paced.__name__ == "job" and paced.__doc__ == "Adds." and paced.__wrapped__ is job  # type: ignore[attr-defined]
    assert inspect.signature(paced) == inspect.signature(job)
    assert paced(1, b=5) == 6

    async def ajob() -> None: ...

    assert inspect.iscoroutinefunction(limit(permits.NoLimiter())(ajob))


def test_a_concurrency_lease_is_held_for_the_call_and_released_on_error():
    limiter = permits.ConcurrencyLimiter(1)
    inside = []

    @limit(limiter)
    def job(fail: bool) -> None:
        inside.append(limiter.available_permits())
        if fail:
            raise RuntimeError("boom")

    job(False)
    with pytest.raises(RuntimeError, match="boom"):
        job(True)
    assert inside == [0, 0]
    assert limiter.available_permits() == 1


async def test_an_async_call_holds_its_lease_and_cancelling_it_releases():
    limiter = permits.ConcurrencyLimiter(1)
    started = asyncio.Event()

    @limit(limiter)
    async def job() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(job())
    await started.wait()
    assert limiter.available_permits() == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.available_permits() == 1


async def test_cancelling_a_waiting_call_gives_nothing_away(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)
    ran = []

    @limit(limiter)
    async def job(i: int) -> None:
        ran.append(i)

    await job(1)
    task = asyncio.create_task(job(2))
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.statistics().current_queued_count == 0
    clock.advance(1.0)
    assert limiter.available_permits() == 1  # the new window's permit went to nobody
    assert ran == [1]
    assert limiter.statistics().total_successful_leases == 1


def test_a_generator_takes_its_permits_when_iteration_starts_and_holds_them_to_the_end():
    limiter = permits.ConcurrencyLimiter(1)

    @limit(limiter)
    def numbers() -> Iterator[int]:
        yield 1
        yield 2
        return None

    gen = numbers()
    assert limiter.available_permits() == 1
    assert next(gen) == 1
    assert limiter.available_permits() == 0
    assert list(gen) == [2]
    assert limiter.available_permits() == 1
    early = numbers()
    next(early)
    early.close()
    assert limiter.available_permits() == 1


async def test_an_async_generator_holds_its_lease_while_iterated():
    limiter = permits.ConcurrencyLimiter(1)

    @limit(limiter)
    async def numbers() -> AsyncIterator[int]:
        yield 1
        yield 2

    seen = []
    async for n in numbers():
        seen.append((n, limiter.available_permits()))
    assert seen == [(1, 0), (2, 0)]
    assert limiter.available_permits() == 1


def test_a_keyed_limiter_takes_a_key_from_the_arguments(clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0), clock=clock)

    @limit(limiter, key=lambda user, **_: user)
    def fetch(user: str, page: int = 0) -> float:
        return clock.now()

    assert [fetch("ann"), fetch("bob"), fetch("ann", page=2)] == [0.0, 0.0, 1.0]


async def test_an_async_key(clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(Partition.of(None, FixedWindow(1, 1.0), queue_limit=0), clock=clock)

    async def tenant(user: str) -> str:
        return user.split("@")[1]

    @limit(limiter, key=tenant)
    async def fetch(user: str) -> float:
        return clock.now()

    assert [await fetch("a@x"), await fetch("b@y"), await fetch("c@x")] == [0.0, 0.0, 1.0]


def test_a_fixed_key(clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0), clock=clock)
    job = limit(limiter, key="nightly")(lambda: clock.now())
    assert [job(), job()] == [0.0, 1.0]
    assert limiter.statistics("nightly").total_successful_leases == 2


def test_a_closed_limiter_raises(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)
    job = limit(limiter)(lambda: None)
    limiter.close()
    with pytest.raises(permits.LimiterClosedError):
        job()


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: limit(None), TypeError, "limiter"),
        (lambda: limit(permits.NoLimiter(), "1"), TypeError, "permit_count"),
        (lambda: limit(permits.NoLimiter(), -1), ValueError, "permit_count"),
        (lambda: limit(permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0))), TypeError, "key"),
        (lambda: limit(permits.NoLimiter())(42), TypeError, "function"),
        (lambda: throttle([1], None), TypeError, "limiter"),
        (lambda: throttle(42, permits.NoLimiter()), TypeError, "iterable"),
        (lambda: throttle([1], permits.NoLimiter(), True), TypeError, "permit_count"),
        (lambda: throttle([1], permits.PartitionedLimiter.per_key(FixedWindow(1, 1.0))), TypeError, "key"),
    ],
)
def test_bad_arguments_fail_at_once(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---- throttle ----
def test_throttle_a_list(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 1.0, clock=clock)
    paced = throttle(range(5), limiter)
    assert inspect.isgenerator(paced)
    assert [(item, clock.now()) for item in paced] == [(0, 0.0), (1, 0.0), (2, 1.0), (3, 1.0), (4, 2.0)]


async def test_throttle_an_async_iterable(clock: permits.ManualClock):
    async def source() -> AsyncIterator[str]:
        for item in "abcd":
            yield item

    limiter = permits.TokenBucketLimiter(1, 1, 0.5, queue_limit=0, clock=clock)
    seen = [(item, clock.now()) async for item in throttle(source(), limiter)]
    assert seen == [("a", 0.0), ("b", 0.5), ("c", 1.0), ("d", 1.5)]


def test_throttle_waits_for_the_permit_before_it_pulls_from_the_source(clock: permits.ManualClock):
    # A paginating source: each step is a call. (Before: the item was pulled, then its permit
    # waited for, so 4 calls ran in the first second under 3 a second.)
    limiter = permits.FixedWindowLimiter(3, 1.0, clock=clock)
    calls: list[float] = []

    def pages() -> Iterator[int]:
        for page in range(6):
            calls.append(clock.now())
            yield page
        calls.append(clock.now())  # the last call, an empty page: it waits its turn too

    assert list(throttle(pages(), limiter)) == list(range(6))
    assert calls == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0]


async def test_throttle_waits_for_the_permit_before_it_pulls_from_an_async_source(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(3, 1.0, queue_limit=0, clock=clock)
    calls: list[float] = []

    async def pages() -> AsyncIterator[int]:
        for page in range(6):
            calls.append(clock.now())
            yield page
        calls.append(clock.now())

    assert [page async for page in throttle(pages(), limiter)] == list(range(6))
    assert calls == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0]


def test_throttle_reads_a_sequence_first_and_waits_for_no_item_past_its_end(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(2, 1.0, clock=clock)
    assert [(item, clock.now()) for item in throttle([1, 2, 3, 4], limiter)] == [(1, 0.0), (2, 0.0), (3, 1.0), (4, 1.0)]
    assert clock.now() == 1.0  # (an iterator's end is one more step: it would have waited until 2.0)
    assert limiter.statistics().total_successful_leases == 4


def test_throttle_holds_each_items_lease_until_the_next_is_asked_for():
    limiter = permits.ConcurrencyLimiter(1)
    seen = []
    for _ in throttle("xy", limiter):
        seen.append(limiter.available_permits())
    assert seen == [0, 0]
    assert limiter.available_permits() == 1
    paced = throttle("xyz", limiter)
    next(paced)
    paced.close()
    assert limiter.available_permits() == 1


def test_throttle_with_permits_and_keys(clock: permits.ManualClock):
    limiter = permits.PartitionedLimiter.per_key(FixedWindow(4, 1.0), clock=clock)
    urls = ["a/1", "b/1", "a/2", "a/3"]
    seen = [(url, clock.now()) for url in throttle(urls, limiter, 2, key=lambda url: url.split("/")[0])]
    assert seen == [("a/1", 0.0), ("b/1", 0.0), ("a/2", 0.0), ("a/3", 1.0)]


async def test_throttle_async_cancelled_while_waiting_gives_nothing_away(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock, queue_limit=1)

    async def source() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    async def consume() -> list[int]:
        return [item async for item in throttle(source(), limiter)]

    task = asyncio.create_task(consume())
    while limiter.statistics().current_queued_count == 0:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.advance(1.0)
    assert limiter.available_permits() == 1


def test_limit_works_on_methods_too(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)

    class Crawler:
        @limit(limiter)
        def visit(self, page: int) -> tuple[int, float]:
            return page, clock.now()

    crawler = Crawler()
    assert [crawler.visit(1), crawler.visit(2)] == [(1, 0.0), (2, 1.0)]


def test_under_trio(clock: permits.ManualClock):
    import httpx
    import trio

    from permits.httpx import AsyncRateLimitedTransport

    limiter = permits.FixedWindowLimiter(2, 1.0, queue_limit=0, clock=clock)

    @limit(limiter)
    async def job() -> float:
        await trio.sleep(0)
        return clock.now()

    async def items() -> AsyncIterator[int]:
        for i in range(2):
            yield i

    async def main() -> list[float]:
        seen = [await job() for _ in range(3)]
        seen += [clock.now() async for _ in throttle(items(), limiter)]
        transport = AsyncRateLimitedTransport(limiter, transport=httpx.MockTransport(lambda r: httpx.Response(204)))
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(2):
                await client.get("https://example.com/")
                seen.append(clock.now())
        return seen

    # (throttle's step that finds items() exhausted took the last permit of second 2)
    assert trio.run(main) == [0.0, 0.0, 1.0, 1.0, 2.0, 3.0, 3.0]


async def test_a_plain_function_returning_a_coroutine_is_refused_at_the_first_call(clock: permits.ManualClock):
    limiter = permits.FixedWindowLimiter(1, 10.0, clock=clock)
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    @limit(limiter)
    def plain() -> object:
        return work()

    with pytest.raises(TypeError, match=r"plain .*returned a coroutine; decorate the async def"):
        plain()
    assert limiter.available_permits() == 1  # refunded: the call's work never ran
    assert ran == []
    assert limiter.statistics().total_successful_leases == 1


def test_a_refused_coroutine_call_gives_a_concurrency_permit_back_once():
    limiter = permits.ConcurrencyLimiter(1)

    async def work() -> None:
        pass

    @limit(limiter)
    def plain() -> object:
        return work()

    for _ in range(2):
        with pytest.raises(TypeError, match="async def"):
            plain()
        assert limiter.available_permits() == 1
