"""SharedMemoryStore in one process: every kind, names sharing state, parameters checked, bad
input, the segment's mode, and segments that are foreign, truncated, corrupted or of another layout."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from typing import Any

import pytest

import permits
from permits.chain import ChainedLimiter, ChainedPartitionedLimiter
from permits.shm import SharedConcurrencyLimiter, SharedKeyedLimiter, SharedMemoryStore


def path(name: str) -> str:
    return f"/dev/shm/permits.{name}"


def test_every_kind_is_an_engine_limiter_on_shared_state(segment_name: str) -> None:
    clock = permits.ManualClock()
    with SharedMemoryStore(segment_name, clock=clock) as store:
        made = {
            permits.TokenBucketLimiter: store.token_bucket("tb", 3, 3, 1.0),
            permits.FixedWindowLimiter: store.fixed_window("fw", 3, 1.0),
            permits.SlidingWindowLimiter: store.sliding_window("sw", 3, 1.0, 2),
            permits.SlidingWindowCounterLimiter: store.sliding_window_counter("swc", 3, 1.0),
            SharedConcurrencyLimiter: store.concurrency("c", 3),
        }
        for cls, limiter in made.items():
            assert isinstance(limiter, cls)
            assert isinstance(limiter, permits.RateLimiter)
            held = limiter.acquire(3)
            assert held
            refused = limiter.acquire()
            assert not refused and refused.reason == "limit_reached"
            assert refused.metadata["limiter"] == limiter.name
            assert limiter.statistics() == permits.Statistics(0, 0, 1, 1)
            held.release()


def test_two_handles_on_one_name_share_one_state(segment_name: str) -> None:
    clock = permits.ManualClock()
    first = SharedMemoryStore(segment_name, clock=clock)
    second = SharedMemoryStore(segment_name, clock=clock)
    a = first.fixed_window("api", 5, 10.0)
    b = second.fixed_window("api", 5, 10.0)
    assert a.acquire(3) and b.acquire(2)
    assert not a.acquire() and not b.acquire()
    assert a.available_permits() == b.available_permits() == 0
    # another name is another state
    assert first.fixed_window("other", 5, 10.0).available_permits() == 5
    clock.advance(10.0)
    assert a.available_permits() == b.available_permits() == 5


def test_a_rate_is_a_sliding_log_on_shared_state_named_or_per_key(segment_name: str) -> None:
    """Two handles (as two processes would have) on "100/minute": the 100 come back together just
    over a minute after they were taken, a refusal says so, and a segmented window of the same
    numbers is another limit."""
    clock = permits.ManualClock(5.0)
    first, second = SharedMemoryStore(segment_name, clock=clock), SharedMemoryStore(segment_name, clock=clock)
    a, b = first.limiter("api", "100/minute"), second.limiter("api", "100/minute")
    keyed_a, keyed_b = first.partitioned("100/minute", name="users"), second.partitioned("100/minute", name="users")
    assert isinstance(a, permits.SlidingLogLimiter)
    assert a.acquire(60) and b.acquire(40) and keyed_a.acquire("alice", 70) and keyed_b.acquire("alice", 30)
    clock.advance(59.0)
    for refused in (a.acquire(), b.acquire(), keyed_a.acquire("alice"), keyed_b.acquire("alice")):
        assert not refused and refused.retry_after == pytest.approx(1.0 + 1e-9, abs=1e-12)
    assert keyed_b.acquire("bob", 100)
    clock.advance(1.0)
    assert not a.acquire() and not keyed_b.acquire("alice")  # [t, t + 60 s] holds its 100
    clock.advance(1e-9)
    assert a.acquire(100) and keyed_b.acquire("alice", 100)
    with pytest.raises(ValueError, match=r"'api' in segment .* is a sliding_log, not a sliding_window"):
        first.sliding_window("api", 100, 60.0, 50)


def test_limiter_takes_a_spec_or_a_rate(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name, clock=permits.ManualClock())
    limiter = store.limiter("api", "2/second")
    assert isinstance(limiter, permits.SlidingLogLimiter)
    assert limiter.spec == permits.specs.parse("2/second")
    assert store.limiter("tb", permits.specs.TokenBucket(4, 1, 1.0)).available_permits() == 4
    with pytest.raises(TypeError, match="spec must be"):
        store.limiter("x", 10)  # type: ignore[arg-type]


def test_several_rates_make_a_chain_of_shared_limiters(segment_name: str) -> None:
    """ "2/second;3/minute" (issue 42, item 7): a chain of one limiter per rate, named ``name#0``,
    ``name#1``, each shared by every handle; the same for a per-key limiter."""
    clock = permits.ManualClock()
    first, second = SharedMemoryStore(segment_name, clock=clock), SharedMemoryStore(segment_name, clock=clock)
    a, b = first.limiter("api", "2/second;3/minute"), second.limiter("api", "2/second;3/minute")
    keyed_a = first.partitioned("2/second;3/minute", name="users")
    keyed_b = second.partitioned("2/second;3/minute", name="users")
    assert isinstance(a, ChainedLimiter) and isinstance(keyed_a, ChainedPartitionedLimiter)
    assert [member.name for member in a.limiters] == ["api#0", "api#1"]
    assert [member.name for member in keyed_a.limiters] == ["users#0", "users#1"]
    assert a.acquire() and b.acquire() and not a.acquire()  # the second's 2
    assert keyed_a.acquire("alice") and keyed_b.acquire("alice") and not keyed_a.acquire("alice")
    clock.advance(1.0 + 1e-9)
    assert b.acquire() and not a.acquire()  # the minute's 3
    assert keyed_b.acquire("alice") and not keyed_a.acquire("alice") and keyed_a.acquire("bob")
    assert first.limiter("api#1", "3/minute").available_permits() == 0  # the member is that state


@pytest.mark.parametrize(
    "spec",
    [
        permits.specs.FixedWindow(10, 10.0),
        permits.specs.TokenBucket(10, 10, 10.0),
        permits.specs.SlidingWindow(10, 10.0, 5),
        permits.specs.SlidingLog(10, 10.0),
        permits.specs.SlidingWindowCounter(10, 10.0),
    ],
    ids=lambda spec: type(spec).__name__,
)
def test_a_settle_after_its_key_was_evicted_and_made_again_gives_nothing_back(
    segment_name: str, spec: permits.specs.Spec[Any]
) -> None:
    """A key's state made again (evicted once idle, then used) starts a new timeline: a lease of the
    old one settled late (work that ran long) gives back nothing into the new one's windows, which
    count other grants (before: 20 grants in a window of 10)."""
    clock = permits.ManualClock()
    keyed = SharedMemoryStore(segment_name, clock=clock).partitioned(spec, name="users", idle_timeout=1.0)
    old = keyed.acquire("alice", 10)
    assert old
    clock.advance(30.0)
    assert keyed.evict_idle() == 1
    clock.advance(5.25)
    assert keyed.acquire("alice", 10)  # the new state's whole limit
    old.settle(0)
    assert keyed.available_permits("alice") == 0
    assert not keyed.acquire("alice")


@pytest.mark.parametrize("kind", ["fixed_window", "sliding_log", "concurrency"])
@pytest.mark.parametrize("keyed", [False, True], ids=["named", "per_key"])
def test_settle_gives_back_to_every_handle(segment_name: str, kind: str, keyed: bool) -> None:
    """lease.settle(n) (issue 42, item 1) on shared state: what the lease no longer keeps is back
    for every process at once; a concurrency lease goes on holding the rest, and its release gives
    back only that."""
    spec = {
        "fixed_window": permits.specs.FixedWindow(10, 60.0),
        "sliding_log": permits.specs.SlidingLog(10, 60.0),
        "concurrency": permits.specs.Concurrency(10),
    }[kind]
    clock = permits.ManualClock()
    here, there = SharedMemoryStore(segment_name, clock=clock), SharedMemoryStore(segment_name, clock=clock)
    if keyed:
        mine, theirs = here.partitioned(spec, name="users"), there.partitioned(spec, name="users")
        lease = mine.acquire("alice", 10)
        available = lambda: theirs.available_permits("alice")  # noqa: E731
    else:
        limiter = here.limiter("api", spec)
        lease = limiter.acquire(10)
        available = there.limiter("api", spec).available_permits
    assert lease and available() == 0
    lease.settle(7)
    assert available() == 3
    lease.settle(2)
    assert available() == 8
    lease.release()
    assert available() == (10 if kind == "concurrency" else 8)


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (lambda s: s.token_bucket("tb", 4, 3, 1.0), "'tb' in segment '.*' has token_limit=3, not token_limit=4"),
        (lambda s: s.token_bucket("tb", 3, 2, 1.0), "has tokens_per_period=3, not tokens_per_period=2"),
        (lambda s: s.token_bucket("tb", 3, 3, 2.5), "has replenishment_period=1s, not replenishment_period=2.5s"),
        (lambda s: s.fixed_window("tb", 3, 1.0), "'tb' in segment '.*' is a token_bucket, not a fixed_window"),
        (lambda s: s.concurrency("tb", 3), "is a token_bucket, not a concurrency"),
        (lambda s: s.partitioned("3/second", name="tb"), "is a token_bucket, not a per-key table"),
    ],
)
def test_other_parameters_for_a_name_raise_naming_the_difference(segment_name: str, second, message: str) -> None:  # type: ignore[no-untyped-def]
    store = SharedMemoryStore(segment_name)
    store.token_bucket("tb", 3, 3, 1.0)
    with pytest.raises(ValueError, match=message):
        second(store)


def test_a_store_opened_with_another_capacity_or_clock_is_refused(segment_name: str) -> None:
    SharedMemoryStore(segment_name, capacity=100)
    with pytest.raises(ValueError, match="has capacity=100, not capacity=200"):
        SharedMemoryStore(segment_name, capacity=200)
    with pytest.raises(ValueError, match="runs on the real clock, not a ManualClock"):
        SharedMemoryStore(segment_name, capacity=100, clock=permits.ManualClock())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": ""}, ValueError, "name must be 1 to 100 characters"),
        ({"name": "../etc"}, ValueError, "name must be"),
        ({"name": ".hidden"}, ValueError, "not starting with '.'"),
        ({"name": "a/b"}, ValueError, "name must be"),
        ({"name": "x" * 101}, ValueError, "name must be"),
        ({"name": 7}, TypeError, "name must be a str"),
        ({"capacity": 0}, ValueError, "capacity must be between 1 and"),
        ({"capacity": 1.5}, TypeError, "capacity must be an int"),
        ({"capacity": True}, TypeError, "capacity must be an int"),
        ({"mode": 0o1777}, ValueError, "mode must be between 0 and 511"),
        ({"clock": "real"}, TypeError, "clock must be a permits.ManualClock or None"),
    ],
)
def test_bad_store_arguments(
    segment_name: str, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    args: dict[str, object] = {"name": segment_name, **kwargs}
    name = args.pop("name")
    with pytest.raises(error, match=message):
        SharedMemoryStore(name, **args)  # type: ignore[arg-type]
    assert not os.path.exists(path(segment_name))


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda s: s.token_bucket("", 1, 1, 1.0), ValueError, "name must be 1 to 63 bytes"),
        (lambda s: s.token_bucket("n" * 64, 1, 1, 1.0), ValueError, "name must be 1 to 63 bytes"),
        (lambda s: s.token_bucket("a\0b", 1, 1, 1.0), ValueError, "no NUL character"),
        (lambda s: s.token_bucket(None, 1, 1, 1.0), TypeError, "name must be a str"),
        (lambda s: s.token_bucket("t", 0, 1, 1.0), ValueError, "token_limit"),
        (lambda s: s.fixed_window("f", 1, 0), ValueError, "window"),
        (lambda s: s.sliding_window("s", 1, 1.0, 0), ValueError, "segments_per_window"),
        (lambda s: s.concurrency("c", 1, lease_ttl=0), ValueError, "lease_ttl"),
        (lambda s: s.concurrency("c", 1, queue_limit=-1), ValueError, "queue_limit"),
        (lambda s: s.concurrency("c", 1, queue_order="oldest"), TypeError, "queue_order"),
        (lambda s: s.partitioned("1/second", name="p", max_partitions=0), ValueError, "max_partitions"),
        (lambda s: s.partitioned(lambda k: k, name="p"), TypeError, "template must be"),
    ],
)
def test_bad_limiter_arguments(segment_name: str, make, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    store = SharedMemoryStore(segment_name)
    with pytest.raises(error, match=message):
        make(store)
    assert store.token_bucket("ok", 1, 1, 1.0).acquire()  # nothing half-made stays behind


def test_the_segment_is_made_with_mode_0600_whatever_the_umask(segment_name: str) -> None:
    old = os.umask(0)
    try:
        SharedMemoryStore(segment_name)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path(segment_name)).st_mode) == 0o600


def test_mode_widens_it_exactly(segment_name: str) -> None:
    old = os.umask(0o077)
    try:
        SharedMemoryStore(segment_name, mode=0o660)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path(segment_name)).st_mode) == 0o660


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_another_user_cannot_open_the_segment(segment_name: str) -> None:
    SharedMemoryStore(segment_name)
    # Everything imported first: nobody may not read the interpreter's own files under /root.
    code = f"""
import os
from permits.chain import ChainedLimiter, ChainedPartitionedLimiter
from permits.shm import SharedMemoryStore
os.setgid(65534); os.setuid(65534)
try:
    SharedMemoryStore({segment_name!r})
except PermissionError as e:
    print("PermissionError", e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.stdout.startswith("PermissionError"), done.stdout + done.stderr


def write_segment(name: str, data: bytes) -> None:
    fd = os.open(path(name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_a_foreign_file_is_refused(segment_name: str) -> None:
    write_segment(segment_name, b"not a permits segment".ljust(1 << 16, b"\0"))
    with pytest.raises(ValueError, match="is not a permits segment"):
        SharedMemoryStore(segment_name)


@pytest.mark.parametrize("size", [0, 100])
def test_an_empty_or_truncated_file_is_refused(segment_name: str, size: int) -> None:
    # (What a creator that made the segment in place, as earlier builds did, leaves when killed.)
    write_segment(segment_name, b"\0" * size)
    message = f"never finished .*: remove {path(segment_name)}, then open it again" if size == 0 else "truncated"
    with pytest.raises(ValueError, match=message):
        SharedMemoryStore(segment_name)


def header_of(name: str) -> bytearray:
    with open(path(name), "rb") as f:
        return bytearray(f.read(4096))


def rewrite(name: str, offset: int, data: bytes) -> None:
    with open(path(name), "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_a_truncated_segment_is_refused(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name, capacity=10)
    os.truncate(path(segment_name), store.size - 4096)
    with pytest.raises(ValueError, match="is truncated or corrupted"):
        SharedMemoryStore(segment_name, capacity=10)


def test_another_layout_version_is_refused(segment_name: str) -> None:
    SharedMemoryStore(segment_name, capacity=10)
    rewrite(segment_name, 8, (99).to_bytes(4, "little"))  # the version, after the 8-byte magic
    with pytest.raises(ValueError, match="has layout version 99, not 2"):
        SharedMemoryStore(segment_name, capacity=10)


def test_a_corrupted_header_is_refused(segment_name: str) -> None:
    SharedMemoryStore(segment_name, capacity=10)
    rewrite(segment_name, 24, (12345).to_bytes(8, "little"))  # capacity: the sizes no longer add up
    with pytest.raises(ValueError, match="corrupted"):
        SharedMemoryStore(segment_name, capacity=12345)


def test_unlink_removes_the_name_and_this_process_keeps_its_limiters(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name)
    limiter = store.fixed_window("api", 2, 60.0)
    assert limiter.acquire()
    assert store.unlink() is True
    assert not os.path.exists(path(segment_name))
    assert store.unlink() is False
    assert limiter.acquire() and not limiter.acquire()  # still mapped here
    fresh = SharedMemoryStore(segment_name).fixed_window("api", 2, 60.0)
    assert fresh.available_permits() == 2  # a new segment


def test_close_closes_the_limiters_it_made_and_refuses_new_ones(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name)
    limiter = store.concurrency("c", 1)
    keyed = store.partitioned("1/second", name="p")
    store.close()
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire()
    with pytest.raises(permits.LimiterClosedError):
        keyed.acquire("k")
    with pytest.raises(permits.LimiterClosedError):
        store.fixed_window("f", 1, 1.0)
    assert SharedMemoryStore(segment_name).concurrency("c", 1).available_permits() == 1


def test_a_store_pickles_as_its_name(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name, capacity=50)
    store.fixed_window("api", 2, 60.0).acquire()
    copy = pickle.loads(pickle.dumps(store))
    assert (copy.name, copy.capacity) == (segment_name, 50)
    assert copy.fixed_window("api", 2, 60.0).available_permits() == 1
    with pytest.raises(TypeError, match="ManualClock"):
        pickle.dumps(SharedMemoryStore(segment_name + "-m", clock=permits.ManualClock()))
    SharedMemoryStore(segment_name + "-m", clock=permits.ManualClock()).unlink()


def test_a_full_segment_says_so(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name, capacity=1)
    with pytest.raises(ValueError, match=r"no room left .* larger capacity"):
        for i in range(100):
            store.sliding_window(f"w{i}", 10, 1.0, 65536)


# ---- per-key ----


def test_per_key_limits_are_per_key_and_shared_by_handles(segment_name: str) -> None:
    clock = permits.ManualClock()
    a = SharedMemoryStore(segment_name, clock=clock).partitioned("2/second", name="users")
    b = SharedMemoryStore(segment_name, clock=clock).partitioned("2/second", name="users")
    assert isinstance(a, SharedKeyedLimiter) and isinstance(a, permits.KeyedRateLimiter)
    assert a.acquire("alice") and b.acquire("alice")
    assert not a.acquire("alice") and not b.acquire("alice")
    assert a.acquire("bob", 2)
    assert a.partition_count == b.partition_count == 2
    # keys keep their type ("7" and 7 differ) and long keys are keys too
    assert a.acquire(7) and a.acquire("7")
    long_key = "k" * 500
    assert a.acquire(long_key, 2) and not b.acquire(long_key)
    assert b.acquire("k" * 499)
    with pytest.raises(TypeError, match="a partition key must be"):
        a.acquire(1.5)
    with pytest.raises(TypeError, match="a partition key must be"):
        a.acquire([1])
    with pytest.raises(TypeError, match="a partition key must be"):
        a.acquire((1, True))
    assert a.acquire((1, 1))
    with pytest.raises(TypeError, match="a partition key must be"):
        a.acquire((1, True))  # also once an equal tuple is known
    assert a.acquire((1, "x"), 2) and not b.acquire((1, "x")) and b.acquire((1, b"x"))
    clock.advance(2.0)
    assert a.acquire("alice", 2)


def test_the_table_is_bounded_and_idle_keys_make_room(segment_name: str) -> None:
    clock = permits.ManualClock()
    store = SharedMemoryStore(segment_name, clock=clock)
    keyed = store.partitioned("1/second", name="t", max_partitions=40, idle_timeout=5.0)
    for i in range(40):
        assert keyed.acquire(f"k{i}")
    assert keyed.partition_count == 40
    refused = keyed.acquire("new")
    assert not refused
    clock.advance(7.0)  # every key full again since 6 s: idle for longer than 5 s
    assert keyed.acquire("new")
    assert keyed.partition_count <= 40
    assert keyed.evict_idle() >= 1
    clock.advance(7.0)
    keyed.evict_idle()
    assert keyed.partition_count == 0


def test_per_key_concurrency_leases_and_their_release(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name).partitioned(permits.Partition.concurrency(None, 2), name="c")
    first, second = keyed.acquire("k"), keyed.acquire("k")
    assert first and second and not keyed.acquire("k")
    assert keyed.available_permits("k") == 0
    first.release()
    assert keyed.available_permits("k") == 1
    with keyed.acquire("k") as lease:
        assert lease
    second.release()
    assert keyed.available_permits("k") == 2


def test_a_key_with_no_room_fails_at_once_and_never_waits(segment_name: str) -> None:
    keyed = SharedMemoryStore(segment_name, clock=permits.ManualClock()).partitioned(
        "1/hour", name="full", max_partitions=2, idle_timeout=3600
    )
    assert keyed.acquire("a") and keyed.acquire("b")
    refused = keyed.acquire("c")
    assert not refused and refused.reason == "partition_limit" and refused.retry_after is None
    assert keyed.available_permits("c") == 0
    waited = keyed.wait("c")  # no timeout: a wait that queued here would never end
    assert waited.reason == "partition_limit"
    assert keyed.statistics("c").current_queued_count == 0


def test_a_capacity_dev_shm_could_not_hold_is_refused(segment_name: str) -> None:
    fs = os.statvfs("/dev/shm")
    too_many = fs.f_blocks * fs.f_frsize // 2048 + 1  # keys take up to 2 KiB of the segment each
    with pytest.raises(ValueError, match="capacity"):
        SharedMemoryStore(segment_name, capacity=too_many)
    assert not os.path.exists(path(segment_name))


def test_a_lease_released_after_close_gives_its_permits_back_to_the_others(segment_name: str) -> None:
    mine, theirs = SharedMemoryStore(segment_name), SharedMemoryStore(segment_name)
    named = mine.concurrency("c", 1)
    keyed = mine.partitioned(permits.Partition.concurrency(None, 1), name="k")
    lease, key_lease = named.acquire(), keyed.acquire("a")
    mine.close()
    lease.release()
    key_lease.release()
    assert theirs.concurrency("c", 1).acquire()
    assert theirs.partitioned(permits.Partition.concurrency(None, 1), name="k").acquire("a")


def test_one_process_holds_one_holder_slot_however_often_it_opens_the_store(segment_name: str) -> None:
    for _ in range(300):  # more than the segment's 256 holder slots
        with SharedMemoryStore(segment_name) as store:
            with store.concurrency("c", 1).acquire() as lease:
                assert lease


def test_lease_ttl_is_a_parameter_of_the_name(segment_name: str) -> None:
    store = SharedMemoryStore(segment_name)
    store.concurrency("c", 2, lease_ttl=60)
    with pytest.raises(ValueError, match="has lease_ttl=60s, not lease_ttl=1s"):
        store.concurrency("c", 2, lease_ttl=1)
    store.partitioned(permits.Partition.concurrency(None, 2), name="k", lease_ttl=60)
    with pytest.raises(ValueError, match=r"'k' in segment .* has lease_ttl=60s, not lease_ttl=1s"):
        store.partitioned(permits.Partition.concurrency(None, 2), name="k", lease_ttl=1)
    store.partitioned("5/second", name="w")
    with pytest.raises(ValueError, match="has permit_limit=5, not permit_limit=6"):
        store.partitioned("6/second", name="w")


def test_a_segment_of_another_mode_or_owner_is_refused(segment_name: str) -> None:
    SharedMemoryStore(segment_name, mode=0o666)
    with pytest.raises(ValueError, match="has mode 0o666, not 0o600"):
        SharedMemoryStore(segment_name)
    os.chmod(path(segment_name), 0o600)
    os.chown(path(segment_name), 65534, 65534)
    with pytest.raises(ValueError, match="belongs to uid 65534"):
        SharedMemoryStore(segment_name)


def test_a_concurrency_state_beyond_its_limit_is_refused_naming_the_segment_and_the_name(segment_name: str) -> None:
    SharedMemoryStore(segment_name, capacity=10).concurrency("db", 2)
    # The state word as first written: {seq 1 << 16, 2 available << 32}, stored low word first.
    state = (2 << 32).to_bytes(8, "little") + (1 << 16).to_bytes(8, "little")
    with open(path(segment_name), "rb") as f:
        image = f.read()
    at = image.find(state)
    assert at > 0 and image.find(state, at + 1) == -1
    rewrite(segment_name, at, (1000 << 32).to_bytes(8, "little"))  # "1000 available" for a limit of 2
    with pytest.raises(ValueError, match=rf"'db' in shared-memory segment '{segment_name}' is corrupted: .*1000"):
        SharedMemoryStore(segment_name, capacity=10).concurrency("db", 2)


def test_a_token_bucket_state_beyond_its_limit_is_refused_naming_the_segment_and_the_name(segment_name: str) -> None:
    SharedMemoryStore(segment_name, capacity=10).token_bucket("api", 7777, 1, 1.0)
    # The state word {period 0, 7777 tokens} as first written (stored low word first), then its two
    # hints (period, tokens): 32 bytes found once.
    tokens, period = (7777).to_bytes(8, "little"), bytes(8)
    word = tokens + period + period + tokens
    with open(path(segment_name), "rb") as f:
        image = f.read()
    at = image.find(word)
    assert at > 0 and image.find(word, at + 1) == -1
    rewrite(segment_name, at, (100_000).to_bytes(8, "little"))  # 100,000 tokens in a bucket of 7,777
    with pytest.raises(ValueError, match=rf"'api' in shared-memory segment '{segment_name}' is corrupted: .*100000"):
        SharedMemoryStore(segment_name, capacity=10).token_bucket("api", 7777, 1, 1.0)


async def test_with_a_store_limiter_holds_one_permit(segment_name: str) -> None:
    # (issue 40, item 1: the base class's with / async with, for the store limiters too)
    with SharedMemoryStore(segment_name, clock=permits.ManualClock()) as store:
        limiter = store.concurrency("db", 2)
        async with limiter as lease:
            assert lease and limiter.available_permits() == 1
        assert limiter.available_permits() == 2
        keyed = store.partitioned(permits.specs.Concurrency(1), name="users")
        with pytest.raises(TypeError, match="needs a key"):
            async with keyed:
                pass
