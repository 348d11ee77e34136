"""Helpers of the integration tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(condition: Callable[[], bool]) -> None:
    """Yields to the event loop until ``condition()`` holds (the test's timeout bounds it)."""
    while not condition():
        await asyncio.sleep(0.005)
