"""A forgotten await says so (issue 40, item 2): the awaitables of wait_async() and acquire_async()
have no truth value and warn when collected unawaited, as a coroutine does; a blocking wait() on an
event loop's thread warns."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import permits
from permits import Lease


class Custom(permits.RateLimiter):
    def _acquire(self, permit_count: int) -> Lease:
        return Lease.granted(permit_count)


def engine() -> Any:
    return permits.ConcurrencyLimiter(2)


def custom() -> Any:
    return Custom()


def chained() -> Any:
    return permits.chain(permits.ConcurrencyLimiter(2), permits.TokenBucketLimiter(5, 5, 1.0))


def nothing() -> Any:
    return permits.NoLimiter()


class _Keyed:
    """A per-key limiter's awaitables, with the key given."""

    def __init__(self, keyed: Any) -> None:
        self.keyed = keyed

    def wait_async(self) -> Any:
        return self.keyed.wait_async("k")

    def acquire_async(self) -> Any:
        return self.keyed.acquire_async("k")

    def wait(self) -> Lease:
        lease: Lease = self.keyed.wait("k")
        return lease


def per_key() -> Any:
    return _Keyed(permits.PartitionedLimiter.per_key(permits.specs.Concurrency(2)))


def partitioned() -> Any:
    return _Keyed(permits.PartitionedLimiter(lambda key: permits.Partition.concurrency(key, 2)))


def instrumented() -> Any:
    prometheus = pytest.importorskip("prometheus_client")
    from permits.metrics import instrument

    return instrument(permits.ConcurrencyLimiter(2), registry=prometheus.CollectorRegistry())


def instrumented_keyed() -> Any:
    prometheus = pytest.importorskip("prometheus_client")
    from permits.metrics import instrument

    keyed = permits.PartitionedLimiter.per_key(permits.specs.Concurrency(2))
    return _Keyed(instrument(keyed, registry=prometheus.CollectorRegistry()))


MAKERS: list[Callable[[], Any]] = [
    engine, custom, chained, nothing, per_key, partitioned, instrumented, instrumented_keyed,
]  # fmt: skip
METHODS = ["wait_async", "acquire_async"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("make", MAKERS, ids=lambda m: m.__name__)
async def test_bool_of_an_awaitable_is_a_type_error(make: Callable[[], Any], method: str) -> None:
    awaitable = getattr(make(), method)()
    with pytest.raises(TypeError, match=rf"{method}\(\).*did you forget await"):
        bool(awaitable)
    with pytest.raises(TypeError, match="forget await"):
        if awaitable:
            pass
    (await awaitable).release()  # awaited after all: no warning either


def collected(awaitable: object) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del awaitable
        gc.collect()
    return [w for w in seen if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("make", MAKERS, ids=lambda m: m.__name__)
async def test_an_awaitable_collected_unawaited_warns_once(
    make: Callable[[], Any], method: str, frozen_heap: None
) -> None:
    limiter = make()
    found = collected(getattr(limiter, method)())
    assert len(found) == 1, [str(w.message) for w in found]
    assert f"{method}() was never awaited" in str(found[0].message)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("make", MAKERS, ids=lambda m: m.__name__)
async def test_awaited_entered_cancelled_or_tasked_awaitables_do_not_warn(
    make: Callable[[], Any], method: str, frozen_heap: None
) -> None:
    limiter = make()
    awaited = getattr(limiter, method)()
    (await awaited).release()
    assert collected(awaited) == []

    entered = getattr(limiter, method)()
    async with entered:
        pass
    assert collected(entered) == []

    tasked = getattr(limiter, method)()
    (await asyncio.create_task(tasked)).release()
    assert collected(tasked) == []

    closed = getattr(limiter, method)()
    closed.close()
    assert collected(closed) == []

    cancelled = getattr(limiter, method)()
    task = asyncio.ensure_future(cancelled)
    task.cancel()  # before its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert collected(cancelled) == []


async def test_blocking_wait_on_the_loop_thread_warns() -> None:
    for make in MAKERS:
        if make is nothing:
            continue  # NoLimiter.wait() never blocks
        limiter = make()
        with pytest.warns(RuntimeWarning, match=r"wait\(\) blocks the running event loop.*wait_async") as seen:
            limiter.wait().release()
        assert len(seen) == 1, make.__name__
        assert seen[0].filename == __file__  # the caller's line, not permits' own


async def test_with_limiter_on_the_loop_thread_warns() -> None:
    limiter = permits.ConcurrencyLimiter(1)
    with pytest.warns(RuntimeWarning, match="with limiter: blocks the running event loop.*async with limiter") as seen:
        with limiter:
            pass
    assert len(seen) == 1 and seen[0].filename == __file__


def test_blocking_wait_without_a_loop_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for make in MAKERS:
            make().wait().release()
        with permits.ConcurrencyLimiter(1):
            pass


async def test_a_wait_that_never_blocks_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        permits.ConcurrencyLimiter(1).wait(timeout=0).release()  # an attempt, as acquire()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("chained", [False, True], ids=["engine", "chained"])
async def test_a_task_running_an_awaitable_has_a_repr(method: str, chained: bool) -> None:
    # asyncio's repr of a task tests its coroutine's truth (3.12+): once stepped, it is true.
    engine = permits.ConcurrencyLimiter(1)
    limiter: Any = permits.chain(engine) if chained else engine
    held = engine.acquire()
    awaitable = getattr(limiter, method)()
    task = asyncio.ensure_future(awaitable)
    await asyncio.sleep(0)
    assert "Task" in repr(task)
    assert bool(awaitable) is True
    held.release()
    if method == "wait_async":
        (await task).release()
    else:
        assert not await task  # acquire_async never waits: refused while the permit was held
