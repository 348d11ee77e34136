"""RedisStore over each Redis topology: a Cluster (sync and asyncio clients; a per-key limiter's keys
spread over the masters, each key's state in one slot) and a Sentinel's master client."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import permits
from permits.redis import RedisStore


def _slots_of(client: Any, prefix: str) -> set[int]:
    """The slots the keys under ``prefix`` live in, on every master."""
    slots = set()
    for key in client.scan_iter(match=f"{prefix}*", target_nodes=client.ALL_NODES):
        slots.add(client.keyslot(key))
    return slots


def test_a_cluster_store_keeps_each_limit_exactly_and_spreads_the_keys(redis_cluster: Any) -> None:
    client = redis_cluster.client()
    prefix = f"topo-{uuid.uuid4().hex[:8]}:"
    with RedisStore(client, prefix=prefix) as store:
        api = store.fixed_window("api", 5, 3600.0)
        assert sum(1 for _ in range(8) if api.acquire()) == 5
        per_user = store.partitioned(permits.specs.TokenBucket(3, 1, 3600.0), name="per-user")
        users = [f"user-{i}" for i in range(40)]
        for user in users:
            assert sum(1 for _ in range(4) if per_user.acquire(user)) == 3, user
        jobs = store.concurrency("jobs", 2, lease_ttl=30.0)
        held = [jobs.acquire(), jobs.acquire()]
        assert all(held) and not jobs.acquire()
        for lease in held:
            lease.release()
        assert jobs.available_permits() == 2
    # 40 keys and 3 named limiters, each one's keys in one slot: spread over many slots (and so
    # over the three masters), never split.
    assert len(_slots_of(client, prefix)) > 20
    client.close()


def test_a_cluster_store_with_an_asyncio_client(redis_cluster: Any) -> None:
    async def main() -> list[bool]:
        client = redis_cluster.async_client()
        async with RedisStore(client, prefix=f"topo-async-{uuid.uuid4().hex[:8]}:") as store:
            per_key = store.partitioned("2/hour", name="k")
            granted = [bool(await per_key.acquire_async(key)) for key in ("a", "b", "a", "b", "a", "b")]
        await client.aclose()
        return granted

    # "2/hour": each key passes 2, then refuses.
    assert asyncio.run(main()) == [True, True, True, True, False, False]


def test_a_sentinel_master_client_store(redis_sentinel: Any) -> None:
    sentinel = redis_sentinel.sentinel(socket_timeout=2.0)
    master = sentinel.master_for(redis_sentinel.service_name)
    with RedisStore(master, prefix=f"topo-sentinel-{uuid.uuid4().hex[:8]}:") as store:
        window = store.sliding_window_counter("api", 4, 3600.0)
        assert [bool(window.acquire()) for _ in range(5)] == [True] * 4 + [False]
        refused = window.acquire()
        assert refused.reason == "limit_reached" and refused.retry_after is not None and refused.retry_after > 0


def test_a_cluster_store_changes_a_keyed_limit_for_every_process(redis_cluster: Any) -> None:
    """The changes' records are one key (one slot); the keys' states are spread over the masters."""
    prefix = f"topo-reconf-{uuid.uuid4().hex[:8]}:"
    clients = [redis_cluster.client(), redis_cluster.client()]
    with RedisStore(clients[0], prefix=prefix) as mine, RedisStore(clients[1], prefix=prefix) as theirs:
        ours = [store.partitioned(permits.specs.FixedWindow(2, 3600.0), name="per-user") for store in (mine, theirs)]
        users = [f"user-{i}" for i in range(20)]
        for user in users:
            assert ours[0].acquire(user) and ours[1].acquire(user) and not ours[0].acquire(user)
        ours[1].reconfigure(permits.specs.FixedWindow(3, 3600.0))
        mine._rules.follow_now()
        for user in users:  # one more each, whichever process asks
            assert ours[0].acquire(user) and not ours[1].acquire(user), user
    for client in clients:
        client.close()
