"""The awaitable that ``wait_async`` returns for the engine's limiters and per-key tables
(``permits._core.EngineLeaseWait``): the generator protocol a task drives (send, throw, close), one
await per object, ``async with``, and the checks made when it is created.
"""

from __future__ import annotations

import asyncio
import collections.abc
from collections.abc import Coroutine
from typing import Any

import pytest

import permits
from permits import _asyncio, _core

from _support import SAFETY, until


def _engine_waitables(clock: permits.ManualClock) -> list[tuple[object, tuple[object, ...]]]:
    """(limiter, leading args of wait_async): a concurrency limit of one, a queue of one."""
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1, queue_limit=1), clock=clock)
    return [
        (permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock), ()),
        (permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=1, clock=clock), ()),
        (per_key, ("k",)),
    ]


def _hold_all(limiter: object, args: tuple[object, ...]) -> permits.Lease:
    lease = limiter.acquire(*args)  # type: ignore[attr-defined]
    assert lease
    return lease


def _queued(limiter: object, args: tuple[object, ...]) -> int:
    return limiter.statistics(*args).current_queued_count  # type: ignore[attr-defined,no-any-return]


def _suspended_in_wait(limiter: object, args: tuple[object, ...]) -> tuple[Coroutine[Any, Any, Any], object]:
    """A coroutine awaiting ``limiter.wait_async(*args)``, run up to its queued wait (the limit is
    held), and what it yielded there: the awaitable itself, as the future a task would wait on."""

    async def waiter() -> permits.Lease:
        return await limiter.wait_async(*args)  # type: ignore[attr-defined,no-any-return]

    coro = waiter()
    return coro, coro.send(None)


async def test_wait_async_is_an_awaitable_and_an_async_context_manager(clock):
    lim = permits.TokenBucketLimiter(5, 5, 1.0, clock=clock)
    w = lim.wait_async()
    assert isinstance(w, collections.abc.Awaitable)
    async with w as lease:
        assert lease.acquired
    assert lim.available_permits() == 4


async def test_an_awaitable_is_awaited_once(clock):
    for limiter, args in _engine_waitables(clock):
        w = limiter.wait_async(*args)  # type: ignore[attr-defined]
        lease = await w
        assert lease.acquired
        with pytest.raises(RuntimeError, match="already awaited"):
            await w
        lease.release()


async def test_closing_a_coroutine_suspended_in_wait_async_leaves_the_queue(clock):
    # What a coroutine's close() does (a task garbage-collected while pending, an async
    # generator closed): the request leaves the engine's queue and the bridge forgets it.
    for limiter, args in _engine_waitables(clock):
        held = _hold_all(limiter, args)
        coro, fut = _suspended_in_wait(limiter, args)
        assert fut._asyncio_future_blocking is True  # type: ignore[attr-defined]
        assert fut.get_loop() is asyncio.get_running_loop() and not fut.done()  # type: ignore[attr-defined]
        assert _queued(limiter, args) == 1
        coro.close()
        assert _queued(limiter, args) == 0
        assert _asyncio.bridge_of(asyncio.get_running_loop()).pending == 0
        held.release()
        clock.advance(1.0)
        again = limiter.acquire(*args)  # type: ignore[attr-defined]
        assert again.acquired  # nothing was granted to the closed wait
        again.release()


async def test_an_exception_thrown_into_a_queued_wait_leaves_the_queue_and_propagates(clock):
    for limiter, args in _engine_waitables(clock):
        held = _hold_all(limiter, args)
        coro, _ = _suspended_in_wait(limiter, args)
        assert _queued(limiter, args) == 1
        with pytest.raises(KeyError, match="boom"):
            coro.throw(KeyError("boom"))
        assert _queued(limiter, args) == 0
        held.release()


async def _task_queued_behind_a_held_permit() -> tuple[
    permits.ConcurrencyLimiter, permits.Lease, asyncio.Future[permits.Lease], _core.LoopBridge
]:
    """A limit of one, held; a task queued in ``wait_async()``; the running loop's bridge."""
    lim = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = lim.acquire()
    task = asyncio.ensure_future(lim.wait_async())
    await until(lambda: lim.statistics().current_queued_count == 1)
    bridge = _asyncio.bridge_of(asyncio.get_running_loop())
    assert bridge is not None
    return lim, held, task, bridge


async def test_a_grant_that_arrives_after_the_task_was_cancelled_goes_back():
    # The engine grants the request and the bridge resolves the wait, but the task is cancelled
    # before it resumes: the awaitable gives the permit back when the cancellation is thrown in.
    lim, held, task, bridge = await _task_queued_behind_a_held_permit()
    held.release()  # the engine grants the queued request in this thread
    bridge.drain()  # what the loop's reader does: the wait is resolved, its task not yet woken
    assert bridge.pending == 0
    assert lim.available_permits() == 0
    task.cancel()  # before the task resumes: it never sees the lease
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, SAFETY)
    assert lim.available_permits() == 1


async def test_wait_async_checks_its_arguments_when_called(clock):
    lim = permits.ConcurrencyLimiter(2, clock=clock)
    with pytest.raises(TypeError, match="permit_count"):
        lim.wait_async("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait_async(3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        lim.wait_async(count=1)  # type: ignore[call-arg]
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1), clock=clock)
    with pytest.raises(TypeError):
        per_key.wait_async(["unhashable"])
    with pytest.raises(ValueError, match="permit_count"):
        per_key.wait_async("k", -1)
    assert per_key.partition_count == 0  # a refused call creates no partition
    lim.close()
    per_key.close()
    with pytest.raises(permits.LimiterClosedError):
        lim.wait_async()
    with pytest.raises(permits.LimiterClosedError):
        per_key.wait_async("k")


def test_wait_async_needs_a_running_loop_only_to_queue(clock):
    lim = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
    # Granted at once: no event loop is asked.
    gen = lim.wait_async().__await__()
    with pytest.raises(StopIteration) as stop:
        next(gen)
    first = stop.value.value
    assert first.acquired
    # Queued: a running event loop is needed (asyncio, or trio), as for any future.
    gen = lim.wait_async().__await__()
    with pytest.raises(RuntimeError, match="no running event loop"):
        next(gen)
    assert lim.statistics().current_queued_count == 0
    first.release()


async def test_a_grant_drained_into_a_cancelled_future_goes_back_at_once():
    # The task is cancelled after the engine granted the request but before the loop drained it:
    # the cancel takes the wait out of the bridge and gives the permit back; the drain skips it.
    lim, held, task, bridge = await _task_queued_behind_a_held_permit()
    held.release()  # granted in the engine, waiting in the bridge's notifier
    task.cancel()  # cancels the wait the task waits on; the task itself runs later
    bridge.drain()
    assert lim.available_permits() == 1  # before the cancelled task has run at all
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, SAFETY)
    assert lim.available_permits() == 1


# ---- The awaitable as the future its task waits on (asyncio's duck-typed future protocol).


async def test_a_queued_wait_is_not_taken_for_a_future_by_asyncio(clock):
    # isfuture() looks at the class: were it true, ensure_future() and gather() would take the
    # awaitable for a running future and never drive it.
    lim = permits.ConcurrencyLimiter(2, queue_limit=2, clock=clock)
    held = lim.acquire(2)
    first, second = lim.wait_async(), lim.wait_async()
    assert not asyncio.isfuture(first)
    gathered = asyncio.gather(first, second)
    await until(lambda: lim.statistics().current_queued_count == 2)
    held.release()
    leases = await asyncio.wait_for(gathered, SAFETY)
    assert [lease.acquired for lease in leases] == [True, True]
    assert lim.available_permits() == 0


async def test_cancel_with_a_message_reaches_the_task_and_leaves_the_queue():
    lim, held, task, _ = await _task_queued_behind_a_held_permit()
    assert task.cancel("shutting down")
    with pytest.raises(asyncio.CancelledError, match="shutting down"):
        await asyncio.wait_for(task, SAFETY)
    assert lim.statistics().current_queued_count == 0
    held.release()
    assert lim.available_permits() == 1


async def test_the_future_side_reports_its_state_and_runs_callbacks_in_their_context(clock):
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
    lim = permits.TokenBucketLimiter(1, 1, 1.0, queue_limit=1, clock=clock)
    assert lim.acquire().acquired
    coro, fut = _suspended_in_wait(lim, ())
    with pytest.raises(asyncio.InvalidStateError):
        fut.result()  # type: ignore[attr-defined]
    seen: list[tuple[object, str]] = []
    ctx = contextvars.copy_context()
    ctx.run(var.set, "inside")
    fut.add_done_callback(lambda f: seen.append((f, var.get())), context=ctx)  # type: ignore[attr-defined]
    dropped = fut.add_done_callback(lambda f: seen.append((f, "dropped")))  # type: ignore[attr-defined]
    assert dropped is None
    assert fut.remove_done_callback(seen.append) == 0  # type: ignore[attr-defined]
    clock.advance(1.0)  # the engine grants the request; the loop's reader drains, then resumes
    await until(lambda: len(seen) == 2)
    assert seen == [(fut, "inside"), (fut, "dropped")]
    assert fut.done() and not fut.cancelled() and fut.result() is None  # type: ignore[attr-defined]
    late: list[object] = []
    fut.add_done_callback(late.append)  # type: ignore[attr-defined]
    await until(lambda: late == [fut])  # added once done: called soon, as for a done future
    with pytest.raises(StopIteration) as stop:
        coro.send(None)  # the coroutine resumes with the lease
    assert stop.value.value.acquired
    assert not fut.cancel()  # type: ignore[attr-defined]


async def test_removed_callbacks_are_not_called_and_cancel_wakes_the_others(clock):
    lim = permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock)
    held = lim.acquire()
    coro, fut = _suspended_in_wait(lim, ())
    called: list[str] = []

    def gone(_: object) -> None:
        called.append("gone")

    fut.add_done_callback(gone)  # type: ignore[attr-defined]
    fut.add_done_callback(lambda _: called.append("kept"))  # type: ignore[attr-defined]
    assert fut.remove_done_callback(gone) == 1  # type: ignore[attr-defined]
    assert fut.cancel("stop")  # type: ignore[attr-defined]
    assert fut.cancelled() and fut.done()  # type: ignore[attr-defined]
    assert lim.statistics().current_queued_count == 0
    with pytest.raises(asyncio.CancelledError, match="stop"):
        fut.result()  # type: ignore[attr-defined]
    await until(lambda: called == ["kept"])
    with pytest.raises(asyncio.CancelledError):
        coro.send(None)
    held.release()
    assert lim.available_permits() == 1


async def test_a_raising_callback_is_reported_and_the_other_tasks_still_wake(clock, monkeypatch):
    import sys

    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    lim = permits.ConcurrencyLimiter(2, queue_limit=2, clock=clock)
    held = lim.acquire(2)
    _, fut = _suspended_in_wait(lim, ())

    def boom(_: object) -> None:
        raise ValueError("boom")

    fut.add_done_callback(boom)  # type: ignore[attr-defined]
    task = asyncio.ensure_future(lim.wait_async())
    await until(lambda: lim.statistics().current_queued_count == 2)
    held.release()
    lease = await asyncio.wait_for(task, SAFETY)
    assert lease.acquired
    assert len(reported) == 1 and isinstance(reported[0], ValueError)
