"""Ctrl-C reaches a thread blocked in wait(), and the interrupted request leaves the queue."""

from __future__ import annotations

import signal

import pytest

import permits


class Interrupted(Exception):
    pass


def _raise(signum: int, frame: object) -> None:
    raise Interrupted


def test_a_signal_interrupts_a_blocking_wait_and_restores_the_queue() -> None:
    # pytest runs tests in the main thread, where Python delivers signals.
    limiter = permits.ConcurrencyLimiter(1, queue_limit=1)
    held = limiter.acquire()
    previous = signal.signal(signal.SIGALRM, _raise)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            limiter.wait()  # would block forever: only the signal ends it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert limiter.statistics().current_queued_count == 0
    held.release()
    assert limiter.available_permits() == 1
