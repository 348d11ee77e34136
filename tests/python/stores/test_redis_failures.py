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
