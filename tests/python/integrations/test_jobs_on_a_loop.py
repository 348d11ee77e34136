"""A sync job (``@permits.limit`` on a plain or generator function, ``throttle`` of a plain
iterable) called from a coroutine never deadlocks the event loop: a wait for a permit that only
a release brings back raises instead, naming the async form. The deadlock scenarios run in a
child interpreter under a time limit, so a regression fails one test instead of hanging the run."""

from __future__ import annotations

import asyncio

import permits
from permits import limit, throttle

from _child import run_ok

DEADLOCKS = """
import asyncio, threading
import permits
from permits import limit, throttle

slots = permits.ConcurrencyLimiter(1, name="slots")

@limit(slots)
def sync_job():
    return "ran"

@limit(slots)
def generator_job():
    yield "ran"

@limit(slots)
async def holder(started, done):
    started.set()
    await done.wait()

def attempt(call):
    try:
        return call()
    except RuntimeError as error:
        return "RuntimeError: " + str(error)

async def main():
    started, done = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(holder(started, done))
    await started.wait()  # a task of this loop holds the only permit
    print(attempt(sync_job))
    print(attempt(lambda: list(generator_job())))
    print(attempt(lambda: list(throttle(iter("ab"), slots))))
    done.set()
    await task
    print(attempt(sync_job))  # free again: taken at once, nothing blocks
    held = slots.acquire()  # held by another thread: the wait cannot tell, so it refuses too
    print(attempt(sync_job).split(" would ")[0])
    held.release()

asyncio.run(main())
"""


def test_a_sync_job_on_a_loops_thread_raises_instead_of_deadlocking() -> None:
    lines = run_ok(DEADLOCKS, timeout=30).lines()
    assert len(lines) == 5
    for line, what, use in zip(
        lines[:3],
        ["@permits.limit: sync_job", "@permits.limit: generator_job", "permits.throttle"],
        ["@permits.limit on an async def, awaited"] * 2 + ["async for over permits.throttle of an async iterable"],
        strict=True,
    ):
        assert line.startswith(f"RuntimeError: {what} would block the running event loop's thread")
        assert "<ConcurrencyLimiter name='slots'>" in line
        assert f"use the async form ({use})" in line
        assert "asyncio.to_thread" in line
    assert lines[3:] == ["ran", "RuntimeError: @permits.limit: sync_job"]


async def test_a_sync_job_on_a_loops_thread_still_waits_for_time(clock: permits.ManualClock) -> None:
    # Time frees a rate limit's permits: that wait ends (on a ManualClock it advances the clock).
    limiter = permits.FixedWindowLimiter(1, 1.0, clock=clock)

    @limit(limiter)
    def job() -> float:
        return clock.now()

    assert [job(), job()] == [0.0, 1.0]
    assert [(item, clock.now()) for item in throttle(iter("ab"), limiter)] == [("a", 2.0), ("b", 3.0)]


async def test_a_sync_job_on_a_loops_thread_takes_a_free_concurrency_permit() -> None:
    limiter = permits.ConcurrencyLimiter(1)

    @limit(limiter)
    def job() -> int:
        return limiter.available_permits()

    assert [job(), job()] == [0, 0]
    assert limiter.available_permits() == 1
    assert await asyncio.to_thread(job) == 0  # (off the loop's thread: the blocking wait, as always)
