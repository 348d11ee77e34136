"""lease.settle(n), as every implementation that settles does it: the permits a lease no longer
keeps come back by the refund rule (at once while the window they were counted in is current),
never beyond the limit, and its release gives back what it kept."""

from __future__ import annotations

import pytest

import permits

from subjects import Make, needs


@needs("settles")
def test_settle_gives_back_what_the_lease_no_longer_keeps(make: Make) -> None:
    subject = make(4)
    lease = subject.acquire(4)
    assert subject.available_permits() == 0
    lease.settle(3)
    assert lease.permit_count == 3 and subject.available_permits() == 1
    lease.settle(1)
    assert lease.permit_count == 1 and subject.available_permits() == 3
    others = subject.acquire(3)
    assert others and not subject.acquire(1).acquired
    lease.release()
    assert subject.available_permits() == (1 if subject.has("releases") else 0)
    others.release()


@needs("settles")
def test_a_settled_lease_refunded_gives_back_only_what_it_kept(make: Make) -> None:
    subject = make(4)
    pool = permits.ConcurrencyLimiter(4)
    chained = subject.chained(after=[pool])
    lease = chained.acquire(4)
    lease.settle(1)  # every member keeps one
    assert subject.available_permits() == 3 and pool.available_permits() == 3
    lease.release()
    assert pool.available_permits() == 4
    assert subject.available_permits() == (4 if subject.has("releases") else 3)


@needs("settles", "timed")
def test_a_settle_after_the_permits_came_back_gives_nothing_more(make: Make) -> None:
    subject = make(4)
    lease = subject.acquire(4)
    subject.restore()  # the window (a bucket's refills) has moved on: all four are back anyway
    assert subject.available_permits() == 4
    lease.settle(0)
    assert subject.available_permits() == 4  # never beyond the limit
    held = subject.acquire(4)
    assert held and not subject.acquire(1).acquired


@needs("settles")
def test_settle_refuses_a_failed_lease_and_a_count_out_of_range(make: Make) -> None:
    subject = make(2)
    lease = subject.acquire(2)
    refused = subject.acquire(1)
    with pytest.raises(ValueError, match="failed lease"):
        refused.settle(0)
    with pytest.raises(ValueError, match="from 0 to the lease's 2"):
        lease.settle(3)
    with pytest.raises(TypeError, match="must be an int"):
        lease.settle(1.0)  # type: ignore[arg-type]
    assert lease.permit_count == 2 and subject.available_permits() == 0
    lease.release()
