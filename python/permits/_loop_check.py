"""A blocking ``wait()`` called on a running event loop's thread stops every task of that loop until
it returns: it warns, pointing to ``wait_async()``."""

from __future__ import annotations

import asyncio
import sys
import warnings


def blocks_the_loop(timeout: object = None, called: str = "wait()", instead: str = "await wait_async()") -> None:
    """Called first by each public ``wait()`` (and ``with limiter:``): warns (``RuntimeWarning``, at
    its caller) when an asyncio event loop runs in this thread, unless ``timeout`` is 0 (such a wait
    never blocks: an attempt, as ``acquire()``)."""
    if timeout is not None and not timeout:
        return
    if asyncio._get_running_loop() is None:
        return
    if sys._getframe(2).f_globals.get("__name__", "").partition(".")[0] == "permits":
        return  # a wrapper's wait (a chain, a partition, metrics) warned its own caller already
    warnings.warn(
        f"{called} blocks the running event loop's thread (no task of the loop runs until it returns): "
        f"use {instead} instead",
        RuntimeWarning,
        stacklevel=3,
    )
