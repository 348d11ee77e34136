"""keyed.reset(key) on shared memory (issue 42, item 5): the key's time-based record made anew for
every process, another process's reset included; nothing granted before comes back into it; a
concurrency key's held leases stay held; this process's queued wait is served at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import permits
from permits.shm import SharedMemoryStore

import _shm_workers as workers

SPECS = {
    "token_bucket": permits.specs.TokenBucket(10, 10, 60.0),
    "fixed_window": permits.specs.FixedWindow(10, 60.0),
    "sliding_window": permits.specs.SlidingWindow(10, 60.0, 4),
    "sliding_log": permits.specs.SlidingLog(10, 60.0),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(10, 60.0),
}


def take_all(keyed: Any, key: str, limit: int) -> list[permits.Lease]:
    leases = [keyed.acquire(key) for _ in range(limit)]
    assert all(leases)
    assert not keyed.acquire(key)
    return leases


@pytest.mark.parametrize("kind", list(SPECS))
def test_a_reset_key_has_its_whole_limit_again_for_every_handle_and_no_more(segment_name: str, kind: str) -> None:
    clock = permits.ManualClock()
    mine = SharedMemoryStore(segment_name, clock=clock).partitioned(SPECS[kind], name="users")
    theirs = SharedMemoryStore(segment_name, clock=clock).partitioned(SPECS[kind], name="users")
    before = take_all(mine, "alice", 10)
    take_all(mine, "bob", 10)
    theirs.reset("alice")  # at the instant of the grants: still none of them comes back
    assert mine.available_permits("alice") == 10
    take_all(mine, "alice", 10)
    for lease in before:
        lease.settle(0)
    assert theirs.available_permits("alice") == 0 and not mine.acquire("alice")
    assert not theirs.acquire("bob"), "another key was reset too"


def test_another_process_resets_a_key_it_never_used(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned("3/hour", name="logins")
    take_all(keyed, "alice", 3)
    assert workers.in_spawned_process(workers.reset_key, segment_name, "3/hour", "alice") == 3
    take_all(keyed, "alice", 3)  # her three again here, and no more


def test_a_concurrency_keys_held_leases_stay_held(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned(permits.specs.Concurrency(2), name="jobs")
    held = take_all(keyed, "k", 2)
    keyed.reset("k")
    assert keyed.available_permits("k") == 0 and not keyed.acquire("k")
    for lease in held:
        lease.release()
    assert keyed.available_permits("k") == 2


def test_a_reset_serves_a_waiting_thread_of_this_process(segment_name: str) -> None:
    clock = permits.ManualClock()
    keyed = SharedMemoryStore(segment_name, clock=clock).partitioned(
        permits.Partition.fixed_window(None, 2, 60.0, queue_limit=1), name="users"
    )
    take_all(keyed, "k", 2)
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(keyed.wait("k", timeout=30.0)))
    waiter.start()
    while keyed.statistics("k").current_queued_count == 0:
        assert waiter.is_alive(), got
        waiter.join(0.01)
    keyed.reset("k")  # the clock never moves: only the reset can grant it
    waiter.join(10)
    assert not waiter.is_alive() and got and got[0], got
    assert keyed.available_permits("k") == 1


def test_resetting_a_key_nobody_used_makes_no_record(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned("3/hour", name="logins")
    keyed.reset("nobody")
    assert keyed.partition_count == 0
