"""Every limiter's ``wait_async`` / ``acquire_async`` result, awaited every way asyncio offers.

The engine's limiters return a C awaitable; chains, partitions, ``NoLimiter`` and custom limiters
a Python one; ``acquire_async`` a Python one everywhere. Each must work with ``await``, ``async
with``, ``asyncio.create_task``, ``ensure_future``, ``TaskGroup.create_task``, ``gather`` and
``wait_for``: for an immediate grant, and for a queued wait granted later (by a release or by
``ManualClock.advance``). Under trio there is no asyncio loop: the Python awaitables fail at once
with a clear error, whether or not a permit is free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter

from _support import KINDS, SAFETY, LimiterKit, settle


class Gate(permits.RateLimiter):
    """A custom limiter: one permit, and its own _wait_async that sleeps until a release."""

    def __init__(self) -> None:
        super().__init__(name="gate")
        self.free = 1
        self.changed: asyncio.Event | None = None

    def _acquire(self, permit_count: int) -> permits.Lease:
        if permit_count <= self.free:
            self.free -= permit_count
            return permits.Lease.granted(permit_count, on_release=lambda: self._put(permit_count))
        return permits.Lease.denied()

    def _put(self, permit_count: int) -> None:
        self.free += permit_count
        if self.changed is not None:
            self.changed.set()

    async def _wait_async(self, permit_count: int) -> permits.Lease:
        while True:
            lease = self.acquire(permit_count)
            if lease:
                return lease
            self.changed = asyncio.Event()
            await self.changed.wait()


@dataclass
class Subject:
    """A limiter of one kind with one permit (and room to queue one request), and how to free it."""

    limiter: Any
    args: tuple[Any, ...]  # the resource, for the partitioned kinds
    free: Callable[[permits.Lease], None]
    queues: bool = True

    def wait_async(self) -> Awaitable[permits.Lease]:
        return self.limiter.wait_async(*self.args)

    def acquire_async(self) -> Awaitable[permits.Lease]:
        return self.limiter.acquire_async(*self.args)

    def hold(self) -> permits.Lease:
        lease = self.limiter.acquire(*self.args)
        assert lease
        return lease


def _release(lease: permits.Lease) -> None:
    lease.release()


def _engine(kind: str) -> Callable[[permits.ManualClock], Subject]:
    def make(clock: permits.ManualClock) -> Subject:
        kit = LimiterKit(kind, clock)
        return Subject(kit.make(1, queue_limit=1), (), lambda lease: kit.give_back(lease))

    return make


def _no_limiter(clock: permits.ManualClock) -> Subject:
    return Subject(permits.NoLimiter(), (), _release, queues=False)


def _custom(clock: permits.ManualClock) -> Subject:
    return Subject(Gate(), (), _release)


def _chain(clock: permits.ManualClock) -> Subject:
    limiter = permits.chain(
        permits.ConcurrencyLimiter(1, queue_limit=1, clock=clock),
        permits.TokenBucketLimiter(100, 100, 1.0, clock=clock),
    )
    return Subject(limiter, (), _release)


def _chain_partitioned(clock: permits.ManualClock) -> Subject:
    per_key = PartitionedLimiter.per_key(Partition.concurrency(None, 1, queue_limit=1), clock=clock)
    return Subject(permits.chain(per_key, permits.NoLimiter()), ("k",), _release)


def _partitioned(clock: permits.ManualClock) -> Subject:
    limiter = PartitionedLimiter(lambda r: Partition.concurrency(r, 1, queue_limit=1), clock=clock)
    return Subject(limiter, ("k",), _release)


def _per_key(clock: permits.ManualClock) -> Subject:
    limiter = PartitionedLimiter.per_key(Partition.concurrency(None, 1, queue_limit=1), clock=clock)
    assert isinstance(limiter, permits.PerKeyLimiter)
    return Subject(limiter, ("k",), _release)


def _per_key_no_limiter(clock: permits.ManualClock) -> Subject:
    limiter = PartitionedLimiter.per_key(Partition.no_limiter(None), clock=clock)
    assert type(limiter) is PartitionedLimiter
    return Subject(limiter, ("k",), _release, queues=False)


SUBJECTS: dict[str, Callable[[permits.ManualClock], Subject]] = {
    **{kind: _engine(kind) for kind in KINDS},
    "no_limiter": _no_limiter,
    "custom": _custom,
    "chain": _chain,
    "chain_partitioned": _chain_partitioned,
    "partitioned": _partitioned,
    "per_key": _per_key,
    "per_key_no_limiter": _per_key_no_limiter,
}


# Each style awaits the awaitable it is given and returns the lease (async with: the lease it
# held, released by then).
async def _await(aw: Awaitable[permits.Lease]) -> permits.Lease:
    return await aw


async def _async_with(aw: Any) -> permits.Lease:
    async with aw as lease:
        return lease


async def _create_task(aw: Any) -> permits.Lease:
    return await asyncio.create_task(aw)


async def _ensure_future(aw: Awaitable[permits.Lease]) -> permits.Lease:
    return await asyncio.ensure_future(aw)


async def _task_group(aw: Any) -> permits.Lease:
    async with asyncio.TaskGroup() as group:
        task = group.create_task(aw)
    return task.result()


async def _gather(aw: Awaitable[permits.Lease]) -> permits.Lease:
    (lease,) = await asyncio.gather(aw)
    return lease


async def _wait_for(aw: Awaitable[permits.Lease]) -> permits.Lease:
    return await asyncio.wait_for(aw, SAFETY)


STYLES: dict[str, Callable[[Any], Awaitable[permits.Lease]]] = {
    "await": _await,
    "async_with": _async_with,
    "create_task": _create_task,
    "ensure_future": _ensure_future,
    "task_group": _task_group,
    "gather": _gather,
    "wait_for": _wait_for,
}


@pytest.fixture(params=list(SUBJECTS))
def subject(request: pytest.FixtureRequest, clock: permits.ManualClock) -> Subject:
    return SUBJECTS[request.param](clock)


@pytest.fixture(params=list(STYLES))
def style(request: pytest.FixtureRequest) -> Callable[[Any], Awaitable[permits.Lease]]:
    return STYLES[request.param]


def _is_releasing(subject: Subject) -> bool:
    """Kinds whose permit comes back on release (not the time-based ones), so it can be checked."""
    timed = (
        permits.TokenBucketLimiter,
        permits.FixedWindowLimiter,
        permits.SlidingWindowLimiter,
        permits.SlidingWindowCounterLimiter,
    )
    return not isinstance(subject.limiter, timed)


def _check_granted(subject: Subject, lease: permits.Lease, style: Callable[..., Any]) -> None:
    """The lease is a grant of one permit; once released (async with did it) the permit is back."""
    assert lease
    assert lease.permit_count == 1
    if style is not _async_with:
        lease.release()
    if _is_releasing(subject):
        again = subject.limiter.acquire(*subject.args)
        assert again, "the permit did not come back"
        again.release()


async def test_wait_async_granted_at_once(subject: Subject, style: Callable[[Any], Awaitable[permits.Lease]]) -> None:
    lease = await asyncio.wait_for(style(subject.wait_async()), SAFETY)
    _check_granted(subject, lease, style)


async def test_acquire_async_granted_at_once(
    subject: Subject, style: Callable[[Any], Awaitable[permits.Lease]]
) -> None:
    lease = await asyncio.wait_for(style(subject.acquire_async()), SAFETY)
    _check_granted(subject, lease, style)


async def test_wait_async_queued_then_granted(
    subject: Subject, style: Callable[[Any], Awaitable[permits.Lease]]
) -> None:
    if not subject.queues:
        pytest.skip("never queues: every wait is granted at once")
    held = subject.hold()
    runner = asyncio.ensure_future(style(subject.wait_async()))
    await settle()
    assert not runner.done(), "the wait should be queued while the permit is held"
    subject.free(held)  # a release, or the ManualClock moved to the next period
    lease = await asyncio.wait_for(runner, SAFETY)
    _check_granted(subject, lease, style)


async def test_acquire_async_refused(subject: Subject, style: Callable[[Any], Awaitable[permits.Lease]]) -> None:
    if not subject.queues:
        pytest.skip("never refuses")
    held = subject.hold()
    if style is _async_with:  # entered all the same: the lease says it failed
        async with subject.acquire_async() as lease:
            pass
    else:
        lease = await asyncio.wait_for(style(subject.acquire_async()), SAFETY)
    assert not lease
    subject.free(held)


async def test_acquire_async_cancelled_before_its_first_step_gives_the_lease_back() -> None:
    limiter = permits.ConcurrencyLimiter(1)
    task = asyncio.create_task(limiter.acquire_async())
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert limiter.available_permits() == 1  # nobody got the lease: the permit is back


async def test_a_queued_python_wait_cancelled_in_its_task_leaves_nothing_behind(clock: permits.ManualClock) -> None:
    subject = _chain(clock)
    held = subject.hold()
    task = asyncio.create_task(subject.limiter.wait_async())
    await settle()
    assert subject.limiter.statistics().current_queued_count == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert subject.limiter.statistics().current_queued_count == 0
    held.release()
    assert subject.limiter.available_permits() == 1


# ---- no asyncio loop (trio, or none at all) ----
PYTHON_WAITS = ["no_limiter", "custom", "chain", "chain_partitioned", "partitioned", "per_key_no_limiter"]
NO_LOOP = r"needs a running asyncio event loop"


@pytest.fixture(params=PYTHON_WAITS)
def python_wait(request: pytest.FixtureRequest, clock: permits.ManualClock) -> Subject:
    return SUBJECTS[request.param](clock)


def _under_trio(main: Callable[[], Awaitable[None]]) -> None:
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("trio")
    anyio.run(main, backend="trio")


@pytest.mark.parametrize("busy", [False, True], ids=["free", "busy"])
def test_under_trio_a_python_wait_fails_clearly_whatever_the_load(python_wait: Subject, busy: bool) -> None:
    if busy and not python_wait.queues:
        pytest.skip("never busy")
    if busy:
        python_wait.hold()

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"^wait_async\(\) " + NO_LOOP):
            await python_wait.wait_async()

    _under_trio(main)
    assert python_wait.limiter.statistics().current_queued_count == 0


@pytest.mark.parametrize("kind", list(SUBJECTS))
def test_under_trio_acquire_async_fails_clearly_and_gives_the_lease_back(kind: str) -> None:
    subject = SUBJECTS[kind](permits.ManualClock())

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"^acquire_async\(\) " + NO_LOOP):
            await subject.acquire_async()

    _under_trio(main)
    if subject.queues:
        lease = subject.limiter.acquire(*subject.args)
        assert lease, "the lease taken by the failed acquire_async was kept"


def test_without_any_loop_a_python_wait_fails_at_its_first_step(python_wait: Subject) -> None:
    aw: Any = python_wait.wait_async()
    with pytest.raises(RuntimeError, match=r"^wait_async\(\) " + NO_LOOP):
        aw.send(None)
