"""Fixtures for the permits test suite; helpers live in _support.py."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping

import pytest

import permits

from _support import BRIDGE_LOOPS, KINDS, TIMED_KINDS, LimiterKit

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
