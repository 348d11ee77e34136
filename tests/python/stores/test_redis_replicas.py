"""``RedisStore(..., wait_replicas=N)``: a grant counts once N replicas have it (WAIT on the connection
that made it). Against a real master and replica: a grant is on the replica when it is returned; a
paused replica (SIGSTOP) makes WAIT time out, and then the grant's permits go back and the acquisition
ends as on_error says, sync and asyncio, every kind; on a Cluster (no replicas) WAIT reaches the
node of the keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import permits
from permits.errors import BackendError
from permits.redis import RedisStore

KINDS = {
    "token_bucket": permits.specs.TokenBucket(3, 1, 100.0),
    "fixed_window": permits.specs.FixedWindow(3, 100.0),
    "sliding_window": permits.specs.SlidingWindow(3, 100.0, 4),
    "sliding_window_counter": permits.specs.SlidingWindowCounter(3, 100.0),
    "concurrency": permits.specs.Concurrency(3),
}
#: The store's timeout: a paused replica fails a grant within it (WAIT waits half of it).
TIMEOUT = 1.0
#: The test's own reads of a healthy server: a loaded host's first steps on a Cluster take a while.
READER_TIMEOUT = 10.0
#: The store's timeout where a live replica must acknowledge: long enough for a loaded machine.
ACKED = 10.0


def prefix() -> str:
    return f"replicas-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def paused(redis_replicated: Any) -> Iterator[Any]:
    """The replicated pair, its replica paused (resumed at the end)."""
    redis_replicated.replica.pause()
    try:
        yield redis_replicated
    finally:
        redis_replicated.replica.resume()


def state_on(process: Any, store: RedisStore, name: str) -> dict[bytes, bytes]:
    key = store._backend.keys_of(name)[0]
    with process.client(socket_timeout=5.0) as client:
        return client.hgetall(key)  # type: ignore[no-any-return]


def available(process: Any, store: RedisStore, name: str, spec: Any) -> int:
    """The permits the master has for ``name``, asked by a store that does not wait."""
    with process.client(socket_timeout=5.0) as client:
        reader = RedisStore(client, prefix=store.prefix, timeout=READER_TIMEOUT)
        try:
            return reader.limiter(name, spec).available_permits()
        finally:
            reader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_grant_is_on_the_replica_when_it_is_returned(redis_replicated: Any, kind: str) -> None:
    with redis_replicated.master.client() as client:
        store = RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=ACKED)
        lease = store.limiter("l", KINDS[kind]).acquire(2)
        assert lease
        # no pause, no polling: WAIT returned only once the replica had the write
        on_replica = state_on(redis_replicated.replica, store, "l")
        assert on_replica == state_on(redis_replicated.master, store, "l")
        assert on_replica[b"sig"]
        lease.release()
        store.close()


async def test_an_asyncio_grant_is_on_the_replica_when_it_is_returned(redis_replicated: Any) -> None:
    client = redis_replicated.master.async_client()
    try:
        async with RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=ACKED) as store:
            assert await store.fixed_window("l", 3, 100.0).acquire_async(2)
            assert state_on(redis_replicated.replica, store, "l")[b"b"] == b"2"
    finally:
        await client.aclose()


@pytest.mark.parametrize("kind", KINDS)
def test_a_paused_replica_fails_the_grant_and_its_permits_go_back(paused: Any, kind: str) -> None:
    with paused.master.client() as client:
        store = RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT)
        limiter = store.limiter("l", KINDS[kind])
        with pytest.raises(BackendError, match="only 0 of 1 replicas acknowledged"):
            limiter.acquire(2)
        assert available(paused.master, store, "l", KINDS[kind]) == 3  # given back
        store.close()


@pytest.mark.parametrize("on_error", ["deny", "allow"])
def test_a_paused_replica_ends_the_acquisition_as_on_error_says(paused: Any, on_error: str) -> None:
    with paused.master.client() as client:
        store = RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT, on_error=on_error)
        lease = store.fixed_window("l", 3, 100.0).acquire(1)
        if on_error == "deny":
            assert not lease and lease.reason == "backend_unavailable"
            assert "only 0 of 1 replicas acknowledged" in lease.metadata["error"]
        else:
            assert lease and lease.metadata["degraded"]
        assert available(paused.master, store, "l", KINDS["fixed_window"]) == 3
        store.close()


@pytest.mark.parametrize("kind", ["fixed_window", "concurrency"])
async def test_an_asyncio_grant_fails_with_a_paused_replica_and_goes_back(paused: Any, kind: str) -> None:
    client = paused.master.async_client()
    try:
        async with RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT) as store:
            with pytest.raises(BackendError, match="only 0 of 1 replicas acknowledged"):
                await store.limiter("l", KINDS[kind]).acquire_async(2)
            assert available(paused.master, store, "l", KINDS[kind]) == 3
    finally:
        await client.aclose()


def test_a_reserved_batch_fails_with_a_paused_replica_and_goes_back(paused: Any) -> None:
    with paused.master.client() as client:
        store = RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT, reserve=2, on_error="deny")
        lease = store.fixed_window("l", 3, 100.0).acquire(1)
        assert not lease and "only 0 of 1 replicas acknowledged" in lease.metadata["error"]
        assert available(paused.master, store, "l", KINDS["fixed_window"]) == 3
        store.close()


def test_after_the_replica_resumes_grants_count_again(redis_replicated: Any) -> None:
    with redis_replicated.master.client() as client:
        shared = prefix()
        store = RedisStore(client, prefix=shared, wait_replicas=1, timeout=TIMEOUT, on_error="deny")
        redis_replicated.replica.pause()
        try:
            assert not store.fixed_window("l", 3, 100.0).acquire(1)
        finally:
            redis_replicated.replica.resume()
        store.close()
        # (the resumed replica catches up: a store that waits longer for it)
        store = RedisStore(client, prefix=shared, wait_replicas=1, timeout=ACKED, on_error="deny")
        limiter = store.fixed_window("l", 3, 100.0)
        assert limiter.acquire(3)
        assert not limiter.acquire(1)  # the failed grant was not counted
        store.close()


def test_a_refusal_needs_no_replica(paused: Any) -> None:
    with paused.master.client() as client:
        RedisStore(client, prefix=(shared := prefix())).fixed_window("l", 3, 100.0).acquire(3)
        store = RedisStore(client, prefix=shared, wait_replicas=1, timeout=TIMEOUT)
        refused = store.fixed_window("l", 3, 100.0).acquire(1)
        assert not refused and refused.reason == "limit_reached"
        store.close()


def test_more_replicas_than_there_are_never_grant(redis_replicated: Any) -> None:
    with redis_replicated.master.client() as client:
        store = RedisStore(client, prefix=prefix(), wait_replicas=2, timeout=TIMEOUT)
        limiter = store.fixed_window("l", 3, 100.0)
        # (the one replica acknowledges, or on a loaded machine not even it within the wait)
        with pytest.raises(BackendError, match=r"only [01] of 2 replicas acknowledged"):
            limiter.acquire(1)
        assert limiter.available_permits() == 3  # not trusted: given back
        store.close()


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), (True, TypeError), ("2", TypeError), (1.0, TypeError)])
def test_bad_wait_replicas_are_refused(redis_server: Any, value: object, error: type[Exception]) -> None:
    with redis_server.client() as client, pytest.raises(error, match="wait_replicas"):
        RedisStore(client, wait_replicas=value)  # type: ignore[arg-type]


def test_zero_or_none_waits_for_nobody(redis_server: Any) -> None:
    with redis_server.client() as client:
        for value in (None, 0):
            store = RedisStore(client, prefix=prefix(), wait_replicas=value)
            assert store.wait_replicas is None
            assert store.fixed_window("l", 3, 100.0).acquire()  # (this server has no replica)
            store.close()
        assert "wait_replicas=2" in repr(RedisStore(client, wait_replicas=2))


def test_a_cluster_waits_on_the_node_of_the_keys(redis_cluster: Any) -> None:
    """The test Cluster has no replicas: WAIT, sent to each key's node, answers 0."""
    client = redis_cluster.client()
    try:
        warm = RedisStore(client, prefix=prefix(), timeout=READER_TIMEOUT)  # each node loads the scripts
        assert all(warm.fixed_window(f"l{i}", 3, 100.0).acquire() for i in range(6))
        store = RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT, on_error="deny")
        for i in range(6):  # names on every node
            lease = store.fixed_window(f"l{i}", 3, 100.0).acquire(2)
            assert not lease and "only 0 of 1 replicas acknowledged" in lease.metadata["error"]
        reader = RedisStore(client, prefix=store.prefix, timeout=READER_TIMEOUT)
        assert [reader.fixed_window(f"l{i}", 3, 100.0).available_permits() for i in range(6)] == [3] * 6
        store.close()
    finally:
        client.close()


async def test_an_asyncio_cluster_waits_on_the_node_of_the_keys(redis_cluster: Any) -> None:
    client = redis_cluster.async_client()
    try:
        # An asyncio Cluster client learns the slots on its first command, and each node loads the
        # scripts on its first take: done first, with time to spare (the same names under another
        # prefix hash to the same nodes), so the store's 1 s covers only the take and its WAIT.
        async with RedisStore(client, prefix=prefix(), timeout=READER_TIMEOUT) as warm:
            for i in range(6):
                assert await warm.fixed_window(f"l{i}", 3, 100.0).acquire_async(1)
        async with RedisStore(client, prefix=prefix(), wait_replicas=1, timeout=TIMEOUT) as store:
            for i in range(6):
                with pytest.raises(BackendError, match="only 0 of 1 replicas acknowledged"):
                    await store.fixed_window(f"l{i}", 3, 100.0).acquire_async(2)
        with redis_cluster.client() as sync_client:
            reader = RedisStore(sync_client, prefix=store.prefix, timeout=READER_TIMEOUT)
            assert [reader.fixed_window(f"l{i}", 3, 100.0).available_permits() for i in range(6)] == [3] * 6
    finally:
        await client.aclose()
