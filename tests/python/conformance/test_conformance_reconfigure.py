"""limiter.reconfigure(spec), as every implementation that reconfigures does it: the new limit from
now on (once what was taken has come back, exactly the new limit), what is taken stays taken, a
request above the new limit is refused as at construction, queued waits stay queued and a queue
beyond a new queue_limit fails the request served last."""

from __future__ import annotations

import threading

import pytest

import permits

from subjects import Make, needs


@needs("reconfigures")
@pytest.mark.parametrize("new", [2, 6])
def test_once_permits_come_back_the_new_limit_is_the_limit(make: Make, new: int) -> None:
    subject = make(4)
    held = subject.exhaust()
    subject.reconfigure(new)
    subject.restore(held)
    lease = subject.acquire(new)
    assert lease and not subject.acquire(1)
    with pytest.raises(ValueError, match="exceeds"):
        subject.acquire(new + 1)


@needs("reconfigures")
def test_what_is_taken_stays_taken_under_a_lower_limit(make: Make) -> None:
    subject = make(4)
    held = subject.acquire(3)
    assert held
    subject.reconfigure(2)
    assert not subject.acquire(2)  # 1 of 4 left at most: under a limit of 2, never 2 more
    assert subject.available_permits() <= 1
    subject.restore(held)
    assert subject.acquire(2)


@needs("reconfigures", "queues")
def test_a_queue_beyond_a_new_queue_limit_fails_the_request_served_last(make: Make) -> None:
    subject = make(1, queue_limit=2)
    held = subject.exhaust()
    got: dict[str, permits.Lease] = {}
    threads = []
    for name in ("older", "newer"):
        thread = threading.Thread(target=lambda name=name: got.__setitem__(name, subject.wait(1, timeout=30.0)))
        thread.start()
        threads.append(thread)
        while subject.statistics().current_queued_count < len(threads):
            thread.join(0.01)
    subject.reconfigure(1, queue_limit=1)
    threads[1].join(30)
    assert not threads[1].is_alive() and not got["newer"] and got["newer"].reason == "queue_full"
    assert threads[0].is_alive() and subject.statistics().current_queued_count == 1
    subject.restore(held)
    threads[0].join(30)
    assert got["older"]


@needs("reconfigures")
def test_a_closed_limiter_refuses(make: Make) -> None:
    subject = make(2)
    subject.close()
    with pytest.raises(permits.LimiterClosedError):
        subject.reconfigure(3)
