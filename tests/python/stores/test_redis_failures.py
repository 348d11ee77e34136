"""A Redis server that dies, comes back, or hangs: the backend raises permits.BackendError within its
timeout, whatever the client's own timeouts (here none), and works again with the same object
once the server answers, never reading one step's reply as another's."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from permits import specs
from permits._stores.rules import rule_of
from permits.errors import BackendError

from _redis_support import Steps, backend

TIMEOUT = 0.5
S = 10**9
RULE = rule_of(specs.FixedWindow(5, 100.0))


@pytest.fixture(params=["sync", "asyncio"])
async def steps(request: pytest.FixtureRequest, own_redis: Any) -> AsyncIterator[Steps]:
    """The backend of ``own_redis`` with a sync or an asyncio client whose socket_timeout is None."""
    if request.param == "sync":
        client = own_redis.client(socket_timeout=None, socket_connect_timeout=None)
    else:
        client = own_redis.async_client(socket_timeout=None, socket_connect_timeout=None)
    made = backend(client, timeout=TIMEOUT)
    yield Steps(made)
    made.close()
    if request.param == "sync":
        client.close()
    else:
        await client.aclose()


async def assert_backend_error_in_time(step: Any) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError) as raised:
        await step
    assert time.monotonic() - started < TIMEOUT + 1.0
    assert isinstance(raised.value.__cause__, redis.exceptions.RedisError | OSError)


async def test_a_killed_server_raises_and_a_restarted_one_works(steps: Steps, own_redis: Any) -> None:
    assert (await steps.take("k", RULE, 2, None, 0)).granted
    own_redis.kill()
    for _ in range(2):
        await assert_backend_error_in_time(steps.take("k", RULE, 1, None, 0))
    await assert_backend_error_in_time(steps.available("k", RULE, 0))
    own_redis.restart()
    # The server kept nothing (no persistence): a new state, and the same backend object steps on.
    outcome = await steps.take("k", RULE, 5, None, 0)
    assert outcome.granted and outcome.available == 0
    assert await steps.available("k", RULE, 0) == 0


async def test_a_restart_between_steps_goes_unnoticed(steps: Steps, own_redis: Any) -> None:
    """The pooled connection died with the server: the next step connects again by itself."""
    assert (await steps.take("k", RULE, 2, None, 0)).granted
    own_redis.kill()
    own_redis.restart()
    outcome = await steps.take("k", RULE, 1, None, 0)
    assert outcome.granted and outcome.available == 4


async def test_a_server_down_from_the_start_raises(steps: Steps, own_redis: Any) -> None:
    own_redis.kill()
    await assert_backend_error_in_time(steps.take("k", RULE, 1, None, 0))
    own_redis.restart()
    assert (await steps.take("k", RULE, 1, None, 0)).granted


async def test_a_hung_server_raises_within_the_timeout_then_answers_each_step(steps: Steps, own_redis: Any) -> None:
    assert (await steps.take("k", RULE, 2, None, 0)).granted
    own_redis.pause()
    try:
        # Reads only, so that the requests the stopped server finds buffered change nothing.
        for _ in range(3):
            await assert_backend_error_in_time(steps.available("k", RULE, 0))
    finally:
        own_redis.resume()
    # Each reply is its own step's: a connection left with a stale reply would answer a take
    # with an old `available` reply.
    first = await steps.take("k", RULE, 1, None, 0)
    assert first.granted and first.available == 2
    assert await steps.available("k", RULE, 0) == 2
    second = await steps.take("k", RULE, 2, None, 0)
    assert second.granted and second.available == 0
    refused = await steps.take("k", RULE, 1, None, 0)
    assert not refused.granted and refused.retry_after_ns == 100 * S


def test_what_the_server_said_is_in_the_error(redis_server: Any, own_redis: Any) -> None:
    """A refusal the server answered is told as what it said, never as silence."""
    from permits.redis import RedisStore

    wrong = RedisStore(redis_server.client(username="permits-nobody", password="wrong"), timeout=TIMEOUT)
    with pytest.raises(BackendError, match="refused the client's credentials") as raised:
        wrong.fixed_window("auth", 5, 1.0).acquire()
    assert "could not be reached" not in str(raised.value)
    wrong.close()

    replica = own_redis.client()
    replica.replicaof(redis_server.host, redis_server.port)  # (as a failover leaves an old master)
    store = RedisStore(own_redis.client(), timeout=TIMEOUT)
    with pytest.raises(BackendError, match="read-only replica"):
        store.fixed_window("ro", 5, 1.0).acquire()
    replica.replicaof("NO", "ONE")
    assert store.fixed_window("ro", 5, 1.0).acquire()
    store.close()
    replica.close()


def test_each_answer_is_named() -> None:
    from permits._stores.redis_clients import unavailable_reason

    said = {
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"): "out of memory",
        redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"): "TRYAGAIN",
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"): "loading its data",
        redis.exceptions.ConnectionError("Invalid Database"): "refused the database",
        redis.exceptions.TimeoutError("Timeout reading from socket"): "did not answer within 0.5 s",
        redis.exceptions.ConnectionError("Connection refused"): "could not be reached",
    }
    for exc, words in said.items():
        assert words in unavailable_reason(exc, 0.5), exc


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru", "noeviction"])
def test_a_server_that_may_evict_the_limits_is_warned_about_once(
    own_redis: Any, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from permits.redis import RedisStore

    admin = own_redis.client()
    admin.config_set("maxmemory", 100 * 2**20)
    admin.config_set("maxmemory-policy", policy)
    with caplog.at_level(logging.WARNING, logger="permits"):
        store = RedisStore(own_redis.client(), timeout=TIMEOUT)
        window = store.fixed_window("evict", 5, 60.0)
        assert window.acquire() and window.acquire()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not caplog.records and policy != "noeviction":
            time.sleep(0.01)
        time.sleep(0.2)  # (a second warning, were there one, would be in by now)
    said = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    if policy == "noeviction":
        assert said == []
    else:
        assert len(said) == 1 and policy in said[0] and "noeviction" in said[0], said
        assert ("evicts them first" in said[0]) == policy.startswith("volatile")
    store.close()
    admin.close()
