"""Fixtures for the permits test suite; helpers live in _support.py."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator, Mapping

import pytest

import permits

from _support import BRIDGE_LOOPS, KINDS, TIMED_KINDS, LimiterKit

# The real servers (tests/python/_servers) as fixtures for every test: redis_server, own_redis,
# redis_cluster, redis_sentinel, postgres_server, own_postgres. Without a client library (outside
# CI) its fixtures are absent and the tests that use them are not collected (stores/conftest.py).
if importlib.util.find_spec("redis") is not None or os.environ.get("CI") == "true":
    from _servers.redis import *  # noqa: F403
if importlib.util.find_spec("psycopg") is not None or os.environ.get("CI") == "true":
    from _servers.postgres import *  # noqa: F403

# The modules that exercise the asyncio bridge run each async test on each of BRIDGE_LOOPS.
_ON_BRIDGE_LOOPS = frozenset(
    {
        "test_async",
        "test_async_wait_protocol",
        "test_awaiting_styles",
        "test_event_loops",
        "test_partition_close",
        "test_queue_semantics",
        "test_receiving_loop",
    }
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.stem in _ON_BRIDGE_LOOPS:
        return BRIDGE_LOOPS
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """The objects made before the test left out of its collections (``gc.freeze``): a test's
    ``gc.collect()`` then looks only at what it made, not at the whole run's heap (late in a run a
    second and more each). Earlier garbage is collected first: freezing it would put off its
    finalizers (a socket's close) to a later test's time."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def clock() -> permits.ManualClock:
    return permits.ManualClock()


@pytest.fixture(params=KINDS)
def kit(request: pytest.FixtureRequest, clock: permits.ManualClock) -> LimiterKit:
    return LimiterKit(request.param, clock)


@pytest.fixture(params=TIMED_KINDS)
def timed_kit(request: pytest.FixtureRequest, clock: permits.ManualClock) -> LimiterKit:
    return LimiterKit(request.param, clock)


@pytest.fixture(autouse=True)
def _quiet_dropped_leases():
    """Many tests let concurrency leases go out of scope unreleased; the ResourceWarning that
    follows is expected there. Tests about that warning use pytest.warns / catch_warnings,
    which install their own filters."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ResourceWarning)
        yield
