"""Threads sharing one limiter: never more than the limit, every request counted once."""

from __future__ import annotations

import threading

import permits

from _support import SAFETY, join_while_progressing, start_waiter, stats
from subjects import Make, needs

THREADS = 4
ATTEMPTS = 150


def test_threads_never_take_more_than_the_limit(make: Make) -> None:
    limit = 300
    subject = make(limit)
    granted: list[list[permits.Lease]] = [[] for _ in range(THREADS)]  # kept: nothing is released
    start = threading.Barrier(THREADS)

    attempts = [0] * THREADS  # each thread counts its own: a hang, not slowness, fails the join

    def worker(i: int) -> None:
        start.wait(SAFETY)
        for _ in range(ATTEMPTS):
            lease = subject.acquire()
            attempts[i] += 1
            if lease:
                granted[i].append(lease)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    # A store's step may take up to its timeout on a loaded machine (STORE_TIMEOUT, 10 s).
    join_while_progressing(threads, lambda: sum(attempts), stall=SAFETY + 10.0)
    assert sum(map(len, granted)) == limit
    assert stats(subject) == (0, 0, limit, THREADS * ATTEMPTS - limit)


@needs("queues")
def test_blocking_waits_from_several_threads_are_each_served_once(make: Make) -> None:
    subject = make(2, queue_limit=2)
    held = subject.exhaust()
    first = start_waiter(subject, 1, queued_after=1)
    second = start_waiter(subject, 1, queued_after=2)
    subject.restore(held)
    leases = [first.outcome(), second.outcome()]
    assert all(leases)
    assert stats(subject) == (0, 0, 3, 0)
    subject.restore(*leases)
