"""Fixtures for the permits test suite; helpers live in _support.py."""

from __future__ import annotations

import pytest

import permits
from _support import KINDS, TIMED_KINDS, LimiterKit


@pytest.fixture
def clock() -> permits.ManualClock:
    return permits.ManualClock()


@pytest.fixture(params=KINDS)
def kit(request: pytest.FixtureRequest, clock: permits.ManualClock) -> LimiterKit:
    return LimiterKit(request.param, clock)


@pytest.fixture(params=TIMED_KINDS)
def timed_kit(request: pytest.FixtureRequest, clock: permits.ManualClock) -> LimiterKit:
    return LimiterKit(request.param, clock)
