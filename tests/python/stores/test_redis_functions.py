"""How the Redis backend runs its steps: as Redis Functions (the library loaded once, and again
after FUNCTION FLUSH or a restart), as scripts by EVALSHA where the server has no FUNCTION or the
user may not use it (loaded again after SCRIPT FLUSH), and as scripts with a Cluster client."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from permits import specs
from permits._stores import redis_scripts
from permits._stores.rules import Rule, rule_of
from permits.errors import BackendError

from _redis_support import Steps, backend

TAKE_SHA = hashlib.sha1(redis_scripts.TAKE.encode()).hexdigest()


def rule(kind: str, limit: int = 3) -> Rule:
    made = {
        "token_bucket": specs.TokenBucket(limit, 1, 100.0),
        "sliding_window": specs.SlidingWindow(limit, 100.0, 4),
    }[kind]
    return rule_of(made, 0)


def library_loaded(client: Any) -> bool:
    return bool(client.function_list(library=redis_scripts.LIBRARY_NAME))


def calls(client: Any, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.fixture
def client(redis_server: Any) -> Iterator[Any]:
    with redis_server.client() as made:
        yield made


@pytest.fixture
def no_functions() -> Iterator[Any]:
    """A server without FUNCTION and FCALL, as Redis < 7 (the commands renamed away)."""
    from _servers.redis import _server

    renamed = ["--rename-command", "FUNCTION", "", "--rename-command", "FCALL", ""]
    with _server("permits-no-functions-", renamed) as server:
        yield server


def test_the_library_is_loaded_once_and_steps_call_it(client: Any) -> None:
    client.function_flush()
    before = calls(client, "function|load"), calls(client, "fcall"), calls(client, "evalsha")
    store = backend(client)
    the_rule = rule("sliding_window")
    for _ in range(3):
        assert store.take("once", the_rule, 1, None, 0).granted
    assert store.available("once", the_rule, 0) == 0
    assert library_loaded(client)
    assert calls(client, "function|load") == before[0] + 1
    assert calls(client, "fcall") == before[1] + 5  # the first one found no function
    assert calls(client, "evalsha") == before[2]
    store.close()


def test_steps_work_after_function_flush(client: Any) -> None:
    store = backend(client)
    the_rule = rule("sliding_window")
    assert store.take("flushed", the_rule, 1, None, 0).granted
    client.function_flush()
    assert not library_loaded(client)
    assert store.take("flushed", the_rule, 1, None, 0).granted
    assert library_loaded(client)  # loaded again
    assert store.available("flushed", the_rule, 0) == 1
    client.function_flush()
    store.refund("flushed", the_rule, 1, 0, None, 0)
    assert store.available("flushed", the_rule, 0) == 2
    store.close()


async def test_async_steps_work_after_function_flush(redis_server: Any) -> None:
    client = redis_server.async_client()
    try:
        steps = Steps(backend(client))
        the_rule = rule("token_bucket")
        assert (await steps.take("flushed", the_rule, 2, None, 0)).granted
        await client.function_flush()
        assert (await steps.take("flushed", the_rule, 1, None, 0)).granted
        assert await client.function_list(library=redis_scripts.LIBRARY_NAME)
        assert await steps.available("flushed", the_rule, 0) == 0
    finally:
        await client.aclose()


def test_a_restarted_server_gets_the_library_again(own_redis: Any) -> None:
    with own_redis.client() as client:
        store = backend(client)
        the_rule = rule("sliding_window")
        assert store.take("restarted", the_rule, 1, None, 0).granted
        own_redis.restart()  # (no persistence: the library and the state are gone)
        for _ in range(3):  # a step may meet the connection the restart reset
            try:
                assert store.take("restarted", the_rule, 1, None, 0).granted
                break
            except BackendError:  # the connection the restart reset; the next step makes a new one
                continue
        assert library_loaded(client)
        assert store.available("restarted", the_rule, 0) == 2
        store.close()


def test_a_server_without_functions_runs_the_scripts(no_functions: Any) -> None:
    with no_functions.client() as client:
        store = backend(client)
        the_rule = rule("sliding_window")
        assert store.take("scripted", the_rule, 1, None, 0).granted
        assert client.script_exists(TAKE_SHA) == [True]
        client.script_flush()
        assert client.script_exists(TAKE_SHA) == [False]
        assert store.take("scripted", the_rule, 1, None, 0).granted
        assert client.script_exists(TAKE_SHA) == [True]  # loaded again
        assert store.available("scripted", the_rule, 0) == 1
        client.script_flush()
        store.refund("scripted", the_rule, 1, 0, None, 0)
        assert store.available("scripted", the_rule, 0) == 2
        assert calls(client, "evalsha") >= 4
        store.close()


FW_TAKE_SHA = hashlib.sha1(redis_scripts.FW_TAKE.encode()).hexdigest()


@pytest.mark.parametrize("server", ["functions", "scripts"])
def test_the_fixed_windows_own_take_steps_as_take(server: str, redis_server: Any, no_functions: Any) -> None:
    """The fixed window's take (FCALL of its own function; a script where FUNCTION is missing):
    grants, refusals with their retry_after, windows that change, a mismatched rule, and times
    past what plain numbers hold, as TAKE decides them."""
    with (redis_server if server == "functions" else no_functions).client() as client:
        store = backend(client)
        fw = rule_of(specs.FixedWindow(3, 10.0), 0)
        assert store.take("fw", fw, 2, None, 5 * 10**9).granted  # the anchor: windows start at 5 s, 15 s...
        assert store.take("fw", fw, 1, None, 6 * 10**9).granted
        refused = store.take("fw", fw, 1, None, 7 * 10**9)
        assert (refused.granted, refused.available, refused.retry_after_ns) == (False, 0, 8 * 10**9)  # at 15 s
        assert store.take("fw", fw, 3, None, 15 * 10**9).granted  # the next window
        with pytest.raises(ValueError, match="fixed_window:4:"):
            store.take("fw", rule_of(specs.FixedWindow(4, 10.0), 0), 1, None, 15 * 10**9)
        # ~300 years after the anchor (past 2**53 ns): TAKE's own arithmetic, exact
        late = 15 * 10**9 + 10**19 + 3
        assert store.take("fw", fw, 3, None, late).granted
        refused = store.take("fw", fw, 1, None, late)
        assert refused.retry_after_ns == 10 * 10**9 - (10**19 + 3) % (10 * 10**9)
        assert store.available("fw", fw, late) == 0
        ran = "fcall" if server == "functions" else "evalsha"
        assert calls(client, ran) >= 6
        if server == "scripts":
            assert client.script_exists(FW_TAKE_SHA) == [True]
        store.close()


async def test_an_async_client_of_a_server_without_functions_runs_the_scripts(no_functions: Any) -> None:
    client = no_functions.async_client()
    try:
        steps = Steps(backend(client))
        the_rule = rule("token_bucket")
        assert (await steps.take("scripted", the_rule, 2, None, 0)).granted
        await client.script_flush()
        assert (await steps.take("scripted", the_rule, 1, None, 0)).granted
        assert await client.script_exists(TAKE_SHA) == [True]
        assert await steps.available("scripted", the_rule, 0) == 0
    finally:
        await client.aclose()


def test_a_user_not_allowed_functions_runs_the_scripts(redis_server: Any, client: Any) -> None:
    user = f"no-functions-{uuid.uuid4().hex[:8]}"
    client.acl_setuser(user, enabled=True, nopass=True, keys="*", commands=["+@all", "-function", "-fcall"])
    try:
        with redis_server.client(username=user, password="") as limited:
            with pytest.raises(redis.exceptions.NoPermissionError):
                limited.fcall("anything", 0)
            store = backend(limited)
            the_rule = rule("sliding_window")
            assert store.take("scripted", the_rule, 1, None, 0).granted
            assert store.take("scripted", the_rule, 2, None, 0).granted
            assert not store.take("scripted", the_rule, 1, None, 0).granted
            assert client.script_exists(TAKE_SHA) == [True]
            store.close()
    finally:
        client.acl_deluser(user)


def test_a_cluster_client_runs_the_scripts(redis_cluster: Any) -> None:
    """redis-py would ask a node for an FCALL's keys before each call: a Cluster runs scripts."""
    client = redis_cluster.client()
    try:
        store = backend(client)
        for i in range(12):  # names on every node
            assert store.take(f"clustered-{i}", rule("sliding_window"), 1, None, 0).granted
        for node in redis_cluster.nodes:
            with node.client() as direct:
                assert not direct.function_list(library=redis_scripts.LIBRARY_NAME)
                assert direct.script_exists(TAKE_SHA) == [True]
        store.close()
    finally:
        client.close()
