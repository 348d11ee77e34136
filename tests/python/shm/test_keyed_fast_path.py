"""A shared per-key limiter's acquire(key): a time-based key is granted from its record in the
segment, with no limiter object of its own until one of its requests waits; a concurrency key goes
through its limiter (which keeps track of its leases). One state for both paths, statistics that
add up across them, idle keys evicted at the bound, a forked child's copies, and close()."""

from __future__ import annotations

import os
import threading
import time

import pytest

import permits
from permits import LimiterClosedError, Partition
from permits.shm import SharedMemoryStore

SAFETY = 30.0


def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + SAFETY
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_a_time_based_key_is_granted_from_its_record_with_no_limiter_of_its_own(segment_name: str) -> None:
    clock = permits.ManualClock()
    keyed = SharedMemoryStore(segment_name, clock=clock).partitioned("2/second", name="users")
    other = SharedMemoryStore(segment_name, clock=clock).partitioned("2/second", name="users")
    assert keyed.acquire("alice") and other.acquire("alice")
    refused = keyed.acquire("alice")
    assert not refused and refused.reason == "limit_reached" and refused.retry_after is not None
    assert refused.metadata["limiter"] == "users"
    for i in range(100):
        assert keyed.acquire(f"user-{i}")
    assert keyed._key_limiters == 0 and keyed._keys_kept == 101
    assert keyed.statistics("alice") == permits.Statistics(0, 0, 1, 1)  # this process's counts
    assert keyed._try_now("alice", 1) is None and keyed._try_now("bob", 1)
    clock.advance(1.1)  # a window (of 20 segments) later
    assert keyed.acquire("alice", 2)


def test_a_key_granted_from_its_record_then_waited_on_shares_one_state_and_its_queue(segment_name: str) -> None:
    clock = permits.ManualClock()
    store = SharedMemoryStore(segment_name, clock=clock)
    keyed = store.partitioned(Partition.fixed_window(None, 2, 1.0, queue_limit=10), name="w")
    assert keyed.acquire("k", 2)
    results: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: results.append(keyed.wait("k", timeout=SAFETY)))
    waiter.start()
    until(lambda: keyed.statistics("k").current_queued_count == 1, "the wait never queued")
    assert keyed._key_limiters == 1
    # Queued oldest first: no request of this process barges ahead of it.
    barging = keyed.acquire("k")
    assert not barging and barging.reason == "limit_reached"
    assert keyed._try_now("k", 1) is None
    clock.advance(1.0)  # the next window: the queued request is served first
    waiter.join(SAFETY)
    assert len(results) == 1 and results[0]
    assert keyed.acquire("k")  # nothing queued: granted from the record again
    assert not keyed.acquire("k")
    assert keyed.available_permits("k") == 0
    # Two grants of the record and one of the queue; one refusal through the limiter, one of the record.
    assert keyed.statistics("k") == permits.Statistics(0, 0, 3, 2)
    assert keyed.statistics() == permits.Statistics(0, 0, 3, 2)


async def test_wait_async_and_acquire_async_share_the_keys_state(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned(Partition.fixed_window(None, 3, 3600.0), name="a")
    assert keyed.acquire("k")
    assert await keyed.acquire_async("k")
    async with keyed.wait_async("k") as lease:
        assert lease
    assert not keyed.acquire("k")
    assert keyed.statistics("k").total_successful_leases == 3
    assert keyed.statistics("k").total_failed_leases == 1


def test_a_refund_of_a_records_grant_gives_its_permit_back(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned(Partition.fixed_window(None, 2, 3600.0), name="r")
    released, refunded = keyed.acquire("k"), keyed.acquire("k")
    assert released and refunded and not keyed.acquire("k")
    released.release()  # a time-based lease: its release gives nothing back
    assert keyed.available_permits("k") == 0
    refunded._refund()  # a chain's undo does
    assert keyed.available_permits("k") == 1
    assert keyed.acquire("k")


def test_statistics_add_up_across_the_keys_kept_and_dropped(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name, capacity=6000).partitioned("1/hour", name="many")
    for i in range(5000):  # more than the 4,096 keys a process keeps
        assert keyed.acquire(f"k{i}")
        assert not keyed.acquire(f"k{i}")
    assert keyed._keys_kept == 4096
    assert keyed.statistics() == permits.Statistics(0, 0, 5000, 5000)
    assert keyed.statistics("k0") == permits.Statistics(0, 0, 0, 0)  # dropped: its counts start again
    assert keyed.partition_count == 5000  # the segment's keys are not this process's to drop


def test_the_waits_limiters_are_bounded_too(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name, capacity=6000).partitioned("1/hour", name="waited")
    for i in range(5000):  # each through the key's limiter (and its Python object)
        assert keyed.wait(f"k{i}", timeout=0)
    assert len(keyed._wrappers) == 4096
    # The engine keeps the keys whose limiters a Python object holds, and drops the others.
    assert 4096 <= keyed._keys_kept < 2 * 4096
    assert keyed.statistics() == permits.Statistics(0, 0, 5000, 0)
    assert not keyed.acquire("k4999") and not keyed.acquire("k0")


def test_idle_keys_make_room_for_new_ones_at_the_bound(segment_name: str) -> None:
    clock = permits.ManualClock()
    keyed = SharedMemoryStore(segment_name, clock=clock).partitioned(
        "1/second", name="bound", max_partitions=3, idle_timeout=5.0
    )
    for key in ("a", "b", "c"):
        assert keyed.acquire(key)
    refused = keyed.acquire("d")
    assert not refused and refused.reason == "partition_limit" and refused.retry_after is None
    clock.advance(7.0)  # every key full again since 6 s: idle for longer than 5 s
    for key in ("d", "e", "f"):
        assert keyed.acquire(key)
    assert keyed.partition_count == 3
    assert keyed._key_limiters == 0
    # a, b and c dropped from the segment (no room for them: 0 available), d, e and f used up
    assert keyed.statistics() == permits.Statistics(0, 0, 6, 1)


def test_a_concurrency_key_goes_through_its_limiter(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned(Partition.concurrency(None, 2), name="c")
    first, second = keyed.acquire("k"), keyed.acquire("k")
    assert first and second and keyed._key_limiters == 1
    refused = keyed.acquire("k")
    assert not refused and refused.metadata["limiter"] == "c"
    first.release()
    second.release()
    assert keyed.statistics("k") == permits.Statistics(2, 0, 2, 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_childs_copies_of_leases_release_nothing_and_its_keys_work(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name)
    conc = store.partitioned(Partition.concurrency(None, 2), name="c")
    bucket = store.partitioned(Partition.fixed_window(None, 2, 3600.0), name="b")
    held, granted = conc.acquire("k"), bucket.acquire("k")
    assert held and granted
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        ok = False
        try:
            held.release()  # the parent's lease, copied
            granted.release()
            ok = conc.available_permits("k") == 1
            mine = conc.acquire("k")
            ok = ok and bool(mine) and conc.available_permits("k") == 0
            mine.release()
            ok = ok and bool(bucket.acquire("k")) and not bucket.acquire("k")
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert conc.available_permits("k") == 1  # the parent's lease is still held
    held.release()
    assert conc.available_permits("k") == 2
    assert bucket.available_permits("k") == 0  # the child's grant counts here too


def test_a_closed_keyed_limiter_raises_and_ends_its_waits(segment_name: str) -> None:
    clock = permits.ManualClock()
    keyed = SharedMemoryStore(segment_name, clock=clock).partitioned(
        Partition.fixed_window(None, 1, 3600.0, queue_limit=5), name="closing"
    )
    assert keyed.acquire("k")
    results: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: results.append(keyed.wait("k")))
    waiter.start()
    until(lambda: keyed.statistics("k").current_queued_count == 1, "the wait never queued")
    keyed.close()
    waiter.join(SAFETY)
    assert len(results) == 1 and results[0].reason == "closed"
    for call in (
        lambda: keyed.acquire("k"),
        lambda: keyed.acquire("new"),
        lambda: keyed.acquire(1.5),  # closed is said first, as before
        lambda: keyed._try_now("k", 1),
        lambda: keyed.wait("k"),
        lambda: keyed.statistics("k"),
        lambda: keyed.statistics(),
        lambda: keyed.available_permits("k"),
    ):
        with pytest.raises(LimiterClosedError):
            call()


def test_bad_arguments_are_refused_as_before(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned("5/second", name="args")
    with pytest.raises(TypeError, match="a partition key must be"):
        keyed.acquire([1], -1)  # the key first
    with pytest.raises(ValueError, match="must not be negative"):
        keyed.acquire("k", -1)
    with pytest.raises(ValueError, match="exceeds"):
        keyed.acquire("k", 6)
    with pytest.raises(TypeError):
        keyed.acquire("k", "1")
    with pytest.raises(TypeError):
        keyed.acquire()
    with pytest.raises(TypeError, match="unexpected keyword"):
        keyed.acquire("k", permits=1)
    assert keyed.acquire("k", permit_count=5)
    assert keyed.partition_count == 1
