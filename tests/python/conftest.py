"""Fixtures for the permits test suite; helpers live in _support.py."""

from __future__ import annotations

import warnings

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


@pytest.fixture(autouse=True)
def _quiet_dropped_leases():
    """Many tests let concurrency leases go out of scope unreleased; the ResourceWarning that
    follows is expected there. Tests about that warning use pytest.warns / catch_warnings,
    which install their own filters."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ResourceWarning)
        yield
