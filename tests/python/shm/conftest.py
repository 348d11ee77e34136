"""Shared-memory store tests: each gets a segment name of its own, unlinked when it ends."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator

import pytest

if sys.platform != "linux":  # permits.shm is Linux only: its tests say so where they would run
    collect_ignore_glob = ["test_*.py"]

_NAMES = itertools.count()


@pytest.fixture
def segment_name() -> Iterator[str]:
    """A segment name no other test uses; the segment is removed after the test."""
    name = f"test-{os.getpid()}-{next(_NAMES)}"
    yield name
    path = f"/dev/shm/permits.{name}"
    if os.path.exists(path):
        os.unlink(path)
