"""The Redis backend on a Cluster (three masters) and on a master found through a Sentinel."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
import redis
import redis.asyncio.sentinel

from permits import specs
from permits._stores import redis_scripts
from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import Rule, rule_of
from permits.errors import BackendError

from _redis_support import KINDS, Steps, backend

S = 10**9


def rule(kind: str, limit: int = 2) -> Rule:
    made = {
        "token_bucket": specs.TokenBucket(limit, 1, 100.0),
        "fixed_window": specs.FixedWindow(limit, 100.0),
        "sliding_window": specs.SlidingWindow(limit, 100.0, 4),
        "sliding_window_counter": specs.SlidingWindowCounter(limit, 100.0),
        "sliding_log": specs.SlidingLog(limit, 100.0),
        "concurrency": specs.Concurrency(limit),
    }[kind]
    return rule_of(made, 60 * S)


def node_of(cluster_client: Any, key: bytes) -> str:
    return str(cluster_client.get_node_from_key(key).name)


async def fill_and_check(steps: Steps, names: list[Any]) -> None:
    """Every name for every kind (the kind's prefix before it): its limit granted, then refused,
    on its own state."""
    for kind in KINDS:
        the_rule = rule(kind)
        kind_names = [kind.encode() + (name if isinstance(name, bytes) else name.encode()) for name in names]
        for index, name in enumerate(kind_names):
            assert (await steps.take(name, the_rule, 2, f"lease-{index}", 0)).granted, (kind, name)
        for index, name in enumerate(kind_names):
            assert not (await steps.take(name, the_rule, 1, f"more-{index}", 0)).granted, (kind, name)
            assert await steps.available(name, the_rule, 0) == 0


# ---- Cluster ----


@pytest.fixture
def cluster_client(redis_cluster: Any) -> Any:
    made = redis_cluster.client(socket_timeout=None)
    yield made
    made.close()


def test_a_names_keys_are_in_one_slot_and_names_spread_over_nodes(cluster_client: Any) -> None:
    store = backend(cluster_client)
    slots, nodes = set(), set()
    for i in range(50):
        state_key, second_key = store.keys_of(f"name {i} {{braces}}")
        assert cluster_client.keyslot(state_key) == cluster_client.keyslot(second_key)
        slots.add(cluster_client.keyslot(state_key))
        nodes.add(node_of(cluster_client, state_key))
    assert len(slots) > 40 and len(nodes) == 3


async def test_fifty_names_of_each_kind_work_on_a_cluster(cluster_client: Any) -> None:
    store = backend(cluster_client)
    names: list[Any] = [f"name {i} {{braces}}" for i in range(48)] + [b"\x00{bytes}\xff", "x" * 10_000]
    await fill_and_check(Steps(store), names)
    # The keys really are spread: each master holds some of them.
    holders = {node_of(cluster_client, store.keys_of(name)[0]) for name in names}
    assert len(holders) == 3
    store.close()


def flush_scripts(redis_cluster: Any) -> None:
    for node in redis_cluster.nodes:
        with node.client() as direct:
            direct.script_flush()


def scripts_loaded(redis_cluster: Any) -> list[bool]:
    take_sha = hashlib.sha1(redis_scripts.TAKE.encode()).hexdigest()
    loaded = []
    for node in redis_cluster.nodes:
        with node.client() as direct:
            loaded += direct.script_exists(take_sha)
    return loaded


def test_a_cluster_loads_the_scripts_again_on_each_node(redis_cluster: Any, cluster_client: Any) -> None:
    store = backend(cluster_client)
    names = [f"flushed-{i}" for i in range(30)]  # on every node
    the_rule = rule("sliding_window", limit=3)
    for name in names:
        assert store.take(name, the_rule, 1, None, 0).granted
    flush_scripts(redis_cluster)
    assert scripts_loaded(redis_cluster) == [False] * 3
    for name in names:
        assert store.take(name, the_rule, 1, None, 0).granted
        assert store.available(name, the_rule, 0) == 1
    assert scripts_loaded(redis_cluster) == [True] * 3
    store.close()


async def test_an_asyncio_cluster_client(redis_cluster: Any) -> None:
    client = redis_cluster.async_client()
    try:
        store = backend(client)
        assert store.is_async
        await fill_and_check(Steps(store), [f"async {i}" for i in range(10)])
        flush_scripts(redis_cluster)
        for i in range(10):
            assert await store.available_async(f"fixed_windowasync {i}".encode(), rule("fixed_window"), 0) == 0
    finally:
        await client.aclose()


# ---- Sentinel ----


async def test_a_client_from_a_sentinel(redis_sentinel: Any) -> None:
    sentinel = redis_sentinel.sentinel(socket_timeout=None)
    client = sentinel.master_for(redis_sentinel.service_name, socket_timeout=None)
    store = backend(client)
    await fill_and_check(Steps(store), ["sentinel-a", "{sentinel-b}"])
    # The steps went to the master the sentinel names.
    with redis_sentinel.master.client() as direct:
        assert direct.exists(store.keys_of(b"fixed_windowsentinel-a")[0]) == 1
    store.close()
    client.close()


async def test_an_asyncio_client_from_a_sentinel(redis_sentinel: Any) -> None:
    sentinel = redis.asyncio.sentinel.Sentinel([(redis_sentinel.host, redis_sentinel.port)])
    client = sentinel.master_for(redis_sentinel.service_name)
    try:
        await fill_and_check(Steps(backend(client)), ["async-sentinel"])
    finally:
        await client.aclose()


def test_a_sentinel_itself_is_not_a_client(redis_sentinel: Any) -> None:
    with pytest.raises(TypeError, match="client"):
        RedisBackend(redis_sentinel.sentinel())


# ---- hung servers ----

TIMEOUT = 0.5


async def assert_backend_error_in_time(step: Any) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError):
        await step
    assert time.monotonic() - started < TIMEOUT + 1.0


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
async def test_a_hung_cluster_master_fails_its_names_only(redis_cluster: Any, mode: str) -> None:
    """A master stopped (SIGSTOP, for less than the cluster's node timeout: no failover): its
    names raise within the timeout, the other masters' names step on, and all do once it goes on."""
    client = redis_cluster.client(socket_timeout=None) if mode == "sync" else redis_cluster.async_client()
    try:
        store = backend(client, timeout=TIMEOUT)
        steps = Steps(store)
        the_rule = rule("fixed_window", limit=5)
        names = [f"hung-{i}" for i in range(30)]
        for name in names:
            assert (await steps.take(name, the_rule, 1, None, 0)).granted
        victim = redis_cluster.nodes[1]
        on_victim = [n for n in names if client.get_node_from_key(store.keys_of(n)[0]).port == victim.port]
        assert on_victim and len(on_victim) < len(names)
        victim.pause()
        try:
            for name in on_victim[:2]:
                await assert_backend_error_in_time(steps.available(name, the_rule, 0))
            for name in names:
                if name not in on_victim:
                    assert (await steps.take(name, the_rule, 1, None, 0)).available == 3
        finally:
            victim.resume()
        for name in names:
            assert await steps.available(name, the_rule, 0) == (4 if name in on_victim else 3)
    finally:
        if mode == "sync":
            client.close()
        else:
            await client.aclose()


def test_a_hung_sentinel_bounds_the_masters_discovery(redis_sentinel: Any) -> None:
    """A new backend must ask the sentinel for the master: a stopped sentinel makes that a
    BackendError within the timeout (the given Sentinel has no socket timeout at all)."""
    sentinel = redis_sentinel.sentinel(socket_timeout=None)
    client = sentinel.master_for(redis_sentinel.service_name, socket_timeout=None)
    store = backend(client, timeout=TIMEOUT)
    redis_sentinel.sentinel_process.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BackendError):
            store.available("discovered", rule("fixed_window"), 0)
        assert time.monotonic() - started < TIMEOUT + 1.0
    finally:
        redis_sentinel.sentinel_process.resume()
    assert store.take("discovered", rule("fixed_window"), 2, None, 0).granted
    store.close()
    client.close()


def test_a_step_whose_slot_is_moving_is_asked_again_until_the_move_is_done(redis_cluster: Any) -> None:
    """While a limiter's slot migrates between two masters, the source answers TRYAGAIN (one of
    the step's keys has moved, the other not): the step is asked again, within the store's
    timeout, and is decided once the move is done (it failed after redis-py's own 0.4 s of retries)."""
    import threading
    import uuid

    from permits.redis import RedisStore

    client = redis_cluster.client()
    store = RedisStore(redis_cluster.client(), prefix=f"moving-{uuid.uuid4().hex[:8]}:", timeout=5.0)
    window = store.fixed_window("w", 100, 3600.0)
    assert window.acquire()  # its state key exists on the slot's master; its second key does not
    state, other = store._backend.keys_of(window._state)
    slot = client.keyslot(state)
    nodes = {node.port: node for node in redis_cluster.nodes}
    ids = {}
    for port, node in nodes.items():
        with node.client() as c:
            ids[port] = c.execute_command("CLUSTER", "MYID").decode()
    source_port = client.get_node_from_key(state).port
    target_port = next(port for port in nodes if port != source_port)
    errors: list[BaseException] = []
    with nodes[source_port].client() as source, nodes[target_port].client() as target:
        source.set(other, b"moved-first", px=60_000)
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source_port])
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target_port])
        source.execute_command("MIGRATE", "127.0.0.1", target_port, other, 0, 5000)  # one moved: TRYAGAIN

        def finish() -> None:
            try:
                time.sleep(0.8)  # longer than redis-py's own retries
                with nodes[source_port].client() as s:
                    s.execute_command("MIGRATE", "127.0.0.1", target_port, state, 0, 5000)
                for port in (target_port, source_port, *[p for p in nodes if p not in (source_port, target_port)]):
                    with nodes[port].client() as c:
                        c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target_port])
            except BaseException as exc:
                errors.append(exc)

        mover = threading.Thread(target=finish)
        mover.start()
        try:
            lease = window.acquire()
        finally:
            mover.join()
    assert errors == []
    assert lease, lease.reason
    assert window.available_permits() == 98
    store.close()
    client.close()
