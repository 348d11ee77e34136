"""keyed.reset(key), as every keyed implementation that resets does it: a time-based key's whole
limit is available at once and no more (nothing granted before comes back into it), its queued
waits are served from it, other keys keep theirs, and a concurrency key's held leases stay held."""

from __future__ import annotations

import threading

import permits

from subjects import Make, needs


@needs("resets", "timed")
def test_a_reset_key_has_its_whole_limit_again_and_no_more(make: Make) -> None:
    subject = make(4)
    other = subject.with_key("another key")
    before = subject.exhaust()
    kept = other.exhaust()
    subject.clock.advance(subject.recovery / 8)  # within the period of the grants
    subject.reset()
    assert subject.available_permits() == 4
    after = subject.acquire(4)
    assert after and not subject.acquire(1)
    before.settle(0)  # granted before the reset: nothing comes back
    assert subject.available_permits() == 0 and not subject.acquire(1)
    assert not other.acquire(1), "another key was reset too"
    del kept, after


@needs("resets", "releases")
def test_a_reset_concurrency_key_keeps_its_held_leases(make: Make) -> None:
    subject = make(2)
    held = subject.exhaust()
    subject.reset()
    assert subject.available_permits() == 0 and not subject.acquire(1)
    held.release()
    assert subject.available_permits() == 2


@needs("resets", "timed", "queues")
def test_a_reset_serves_the_keys_queued_wait(make: Make) -> None:
    subject = make(2, queue_limit=1)
    held = subject.exhaust()
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(subject.wait(1, timeout=30.0)))
    waiter.start()
    while subject.statistics().current_queued_count == 0:
        assert waiter.is_alive(), got
        waiter.join(0.01)
    subject.reset()  # the clock never moves: only the reset can grant it
    waiter.join(30)
    assert not waiter.is_alive() and got and got[0], got
    assert subject.available_permits() == 1
    del held


@needs("resets")
def test_resetting_a_key_nobody_used_changes_nothing(make: Make) -> None:
    subject = make(3).with_key("nobody yet")
    subject.reset()
    assert subject.available_permits() == 3
