"""The deadlines of a backend's asyncio steps (permits._stores.deadlines): asyncio.timeout's
behaviour for many steps with one timer per loop."""

from __future__ import annotations

import asyncio

import pytest

from permits._stores.deadlines import Deadlines


async def test_a_step_past_its_deadline_raises_timeout_error() -> None:
    deadlines = Deadlines(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        with deadlines.start():
            await asyncio.sleep(10)
    assert 0.05 <= loop.time() - started < 5
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_step_that_ends_in_time_is_never_cancelled_later() -> None:
    deadlines = Deadlines(0.05)
    with deadlines.start():
        await asyncio.sleep(0)
    await asyncio.sleep(0.15)  # past the deadline of the step that ended: nothing happens to this task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    deadlines = Deadlines(10.0)

    async def step() -> None:
        with deadlines.start():
            await asyncio.sleep(10)

    task = asyncio.ensure_future(step())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_steps_share_one_timer_and_each_meets_its_own_deadline() -> None:
    deadlines = Deadlines(0.1)
    outcomes: list[str] = []

    async def step(seconds: float) -> None:
        try:
            with deadlines.start():
                await asyncio.sleep(seconds)
            outcomes.append("done")
        except TimeoutError:
            outcomes.append("timeout")

    await asyncio.gather(*(step(0.0 if i % 2 else 10.0) for i in range(200)))
    assert outcomes.count("done") == 100 and outcomes.count("timeout") == 100
    queue = next(iter(deadlines._queues.values()))
    scheduled: list[asyncio.TimerHandle] = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    assert len([h for h in scheduled if not h.cancelled() and h._callback == queue._sweep]) <= 1  # type: ignore[attr-defined]
    assert all(step.task is None for step in queue._steps)  # every step has ended


def test_each_loop_has_its_queue() -> None:
    deadlines = Deadlines(0.05)

    async def late() -> bool:
        try:
            with deadlines.start():
                await asyncio.sleep(10)
        except TimeoutError:
            return True
        return False

    assert asyncio.run(late()) and asyncio.run(late())


async def test_a_step_that_swallows_its_first_cancellation_is_cancelled_again() -> None:
    """As redis-py may, cleaning up a connection to a hung server in an await of its own: the step
    still ends soon after its deadline, with TimeoutError, and the task keeps no cancellation."""
    deadlines = Deadlines(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    swallowed = 0
    with pytest.raises(TimeoutError):
        with deadlines.start():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                swallowed += 1
                await asyncio.sleep(10)  # (the cleanup that hangs)
    assert swallowed == 1
    assert 0.05 <= loop.time() - started < 5
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_step_that_swallows_its_cancellation_and_answers_keeps_its_answer() -> None:
    """(A reply that lands as the deadline fires is the step's: a grant is never lost on the way.)"""
    deadlines = Deadlines(0.05)
    with deadlines.start():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            answer = "granted"
    assert answer == "granted"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.15)  # nothing more comes for this task
