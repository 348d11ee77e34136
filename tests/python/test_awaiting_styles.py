"""Every limiter's ``wait_async`` / ``acquire_async`` result, awaited every way asyncio offers.

The engine's limiters return a C awaitable; chains, partitions, ``NoLimiter`` and custom limiters
a Python one; ``acquire_async`` a Python one everywhere. Each must work with ``await``, ``async
with``, ``asyncio.create_task``, ``ensure_future``, ``TaskGroup.create_task``, ``gather`` and
``wait_for``: for an immediate grant, and for a queued wait granted later (by a release or by
``ManualClock.advance``). Under trio (through anyio) every wait works too, granted at once or
queued; with no event loop at all a wait is granted at once or refused once it must queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter

from _support import KINDS, SAFETY, LimiterKit, need, settle


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


# NoLimiter and per_key over no_limiter grant every wait at once: they never queue or refuse.
QUEUEING = [kind for kind in SUBJECTS if kind not in ("no_limiter", "per_key_no_limiter")]


@pytest.fixture(params=QUEUEING)
def queueing(request: pytest.FixtureRequest, clock: permits.ManualClock) -> Subject:
    return SUBJECTS[request.param](clock)


async def test_wait_async_queued_then_granted(
    queueing: Subject, style: Callable[[Any], Awaitable[permits.Lease]]
) -> None:
    subject = queueing
    held = subject.hold()
    runner = asyncio.ensure_future(style(subject.wait_async()))
    await settle()
    assert not runner.done(), "the wait should be queued while the permit is held"
    subject.free(held)  # a release, or the ManualClock moved to the next period
    lease = await asyncio.wait_for(runner, SAFETY)
    _check_granted(subject, lease, style)


async def test_acquire_async_refused(queueing: Subject, style: Callable[[Any], Awaitable[permits.Lease]]) -> None:
    subject = queueing
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


# ---- trio (through anyio), or no event loop at all ----
class Polling(permits.RateLimiter):
    """A custom limiter with the default _wait_async (asks again after retry_after), which must
    pause in whichever library runs it."""

    def __init__(self) -> None:
        super().__init__(name="polling")
        self.free = 1

    def _acquire(self, permit_count: int) -> permits.Lease:
        if permit_count <= self.free:
            self.free -= permit_count
            return permits.Lease.granted(permit_count, on_release=lambda: self._put(permit_count))
        return permits.Lease.denied(retry_after=0.001)

    def _put(self, permit_count: int) -> None:
        self.free += permit_count


# Gate's own _wait_async is written for asyncio (asyncio.Event); Polling stands for custom limiters.
TRIO_SUBJECTS = {
    **{k: v for k, v in SUBJECTS.items() if k != "custom"},
    "polling": lambda c: Subject(Polling(), (), _release),
}


@pytest.fixture(params=list(TRIO_SUBJECTS))
def any_subject(request: pytest.FixtureRequest, clock: permits.ManualClock) -> Subject:
    return TRIO_SUBJECTS[request.param](clock)


def _under_trio(main: Callable[[], Awaitable[None]]) -> None:
    anyio = need("anyio")
    need("trio")
    anyio.run(main, backend="trio")


@pytest.mark.parametrize(
    ("kind", "busy"),
    [(kind, False) for kind in TRIO_SUBJECTS]
    + [(kind, True) for kind in TRIO_SUBJECTS if kind in [*QUEUEING, "polling"]],
)
def test_under_trio_a_wait_works_whatever_the_load(kind: str, busy: bool, clock: permits.ManualClock) -> None:
    # Not only while a permit is free: a queued wait is woken under trio too.
    import anyio

    any_subject = TRIO_SUBJECTS[kind](clock)
    got: list[permits.Lease] = []

    async def waiter() -> None:
        got.append(await any_subject.wait_async())

    async def main() -> None:
        held = any_subject.hold() if busy else None
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            if held is not None:
                while any_subject.limiter.statistics(*any_subject.args).current_queued_count == 0 and not isinstance(
                    any_subject.limiter, Polling
                ):
                    await anyio.sleep(0.001)
                any_subject.free(held)

    _under_trio(main)
    assert got[0].acquired
    got[0].release()
    assert any_subject.limiter.statistics(*any_subject.args).current_queued_count == 0


def test_under_trio_acquire_async_works(any_subject: Subject) -> None:
    leases: list[permits.Lease] = []

    async def main() -> None:
        leases.append(await any_subject.acquire_async())

    _under_trio(main)
    assert leases[0].acquired


def test_without_any_loop_a_wait_is_granted_at_once_and_refused_once_it_must_queue(any_subject: Subject) -> None:
    aw: Any = any_subject.wait_async()
    with pytest.raises(StopIteration) as stop:
        aw.send(None)
    first = stop.value.value
    assert first.acquired
    if any_subject.queues:
        aw = any_subject.wait_async()
        with pytest.raises(RuntimeError, match="no running event loop"):
            aw.send(None)
        assert any_subject.limiter.statistics(*any_subject.args).current_queued_count == 0
