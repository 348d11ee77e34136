"""Leases, as every implementation hands them out: granted or failed, their fields, release."""

from __future__ import annotations

import gc
from collections.abc import Mapping

import pytest

from _support import MAX_INT32, stats
from subjects import Make, needs


def test_a_granted_lease(make: Make) -> None:
    subject = make(3)
    lease = subject.acquire(2)
    assert lease.acquired is True
    assert bool(lease) is True
    assert lease.permit_count == 2
    assert lease.reason is None
    assert lease.retry_after is None
    assert isinstance(lease.metadata, Mapping)
    assert "reason" not in lease.metadata
    assert "retry_after" not in lease.metadata
    assert subject.available_permits() == 1


def test_a_failed_lease(make: Make) -> None:
    subject = make(3)
    _held = subject.exhaust()
    lease = subject.acquire(2)
    assert lease.acquired is False
    assert bool(lease) is False
    assert lease.permit_count == 2
    assert lease.reason == "limit_reached"
    assert lease.metadata["reason"] == "limit_reached"
    with pytest.raises(TypeError):
        lease.metadata["reason"] = "changed"  # type: ignore[index]
    if subject.has("timed"):
        assert isinstance(lease.retry_after, float)
        assert 0 < lease.retry_after <= subject.recovery
        assert lease.metadata["retry_after"] == lease.retry_after
    else:
        assert lease.retry_after is None
        assert "retry_after" not in lease.metadata


def test_the_if_lease_pattern(make: Make) -> None:
    subject = make(2)
    taken = []
    for _ in range(5):
        if lease := subject.acquire():
            taken.append(lease)
    assert len(taken) == 2


@needs("releases")
def test_release_gives_the_permits_back_once(make: Make) -> None:
    subject = make(3)
    lease = subject.acquire(2)
    other = subject.acquire(1)
    for _ in range(3):
        lease.release()  # idempotent
    assert subject.available_permits() == 2
    again = subject.acquire(2)  # kept: a dropped engine concurrency lease is released when collected
    assert again
    assert not subject.acquire(1)
    subject.restore(again, other)


@needs("releases", "releases_dropped_leases")
def test_a_dropped_lease_is_released_when_collected_with_a_resource_warning(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire(2)
    assert subject.available_permits() == 0
    with pytest.warns(ResourceWarning, match="without release"):
        del lease
        gc.collect()
    assert subject.available_permits() == 2


@needs("timed")
def test_release_of_a_time_based_lease_gives_nothing_back(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire(2)
    lease.release()
    lease.release()
    assert subject.available_permits() == 0
    assert not subject.acquire()


def test_a_lease_is_a_context_manager(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire(2)
    with lease as entered:
        assert entered is lease
    lease.release()  # already released by the with block: nothing more
    assert subject.available_permits() == (2 if subject.has("releases") else 0)


def test_the_with_block_releases_on_an_exception(make: Make) -> None:
    subject = make(1)
    with pytest.raises(KeyError), subject.acquire():
        raise KeyError("boom")
    assert subject.available_permits() == (1 if subject.has("releases") else 0)


def test_a_failed_lease_releases_nothing(make: Make) -> None:
    subject = make(1)
    held = subject.acquire()
    failed = subject.acquire()
    failed.release()
    with failed:
        pass
    assert subject.available_permits() == 0
    subject.restore(held)
    assert subject.available_permits() == 1


def test_zero_permits_are_granted_while_a_permit_is_available_and_take_nothing(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire(0)
    assert lease.acquired and lease.permit_count == 0
    assert subject.available_permits() == 2
    _held = subject.acquire(1)
    assert subject.acquire(0)
    assert subject.available_permits() == 1


def test_zero_permits_fail_when_none_is_available(make: Make) -> None:
    subject = make(2)
    _held = subject.exhaust()
    zero = subject.acquire(0)
    assert not zero.acquired
    assert zero.permit_count == 0
    assert zero.reason == "limit_reached"
    one = subject.acquire(1)
    assert zero.retry_after == one.retry_after  # a zero-permit failure counts as one permit


@pytest.mark.parametrize("count", [3, MAX_INT32, MAX_INT32 + 1, 2**63 - 1])
async def test_more_permits_than_the_limit_is_a_value_error(make: Make, count: int) -> None:
    subject = make(2)
    with pytest.raises(ValueError, match="permit_count"):
        subject.acquire(count)
    with pytest.raises(ValueError, match="permit_count"):
        await subject.acquire_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        subject.wait(count, timeout=0)
    with pytest.raises(ValueError, match="permit_count"):
        await subject.wait_async(count)
    assert stats(subject) == (2, 0, 0, 0)  # nothing taken, nothing counted


@pytest.mark.parametrize("count", [-1, -(2**40)])
async def test_a_negative_permit_count_is_a_value_error(make: Make, count: int) -> None:
    subject = make(2)
    with pytest.raises(ValueError, match="permit_count"):
        subject.acquire(count)
    with pytest.raises(ValueError, match="permit_count"):
        await subject.acquire_async(count)
    with pytest.raises(ValueError, match="permit_count"):
        subject.wait(count, timeout=0)
    with pytest.raises(ValueError, match="permit_count"):
        await subject.wait_async(count)
    assert stats(subject) == (2, 0, 0, 0)


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
async def test_a_permit_count_that_is_no_int_is_a_type_error(make: Make, value: object) -> None:
    subject = make(2)
    with pytest.raises(TypeError):
        subject.acquire(value)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await subject.acquire_async(value)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        subject.wait(value, timeout=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await subject.wait_async(value)  # type: ignore[arg-type]
    assert stats(subject) == (2, 0, 0, 0)


def test_restore_brings_every_permit_back(make: Make) -> None:
    subject = make(3)
    first = subject.acquire(1)
    second = subject.acquire(2)
    assert not subject.acquire()
    subject.restore(first, second)
    assert subject.available_permits() == 3
    again = subject.acquire(3)
    assert again
    subject.restore(again)
    assert subject.available_permits() == 3
