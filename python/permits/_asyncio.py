"""The asyncio bridge: requests queued in the engine, completed from the engine's thread.

Each event loop gets one notifier: the engine pushes completed waiters to it and writes one byte
to a pipe per batch; the loop's reader callback drains the batch and resolves the futures.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import _core

if TYPE_CHECKING:
    from ._core import Lease

_ids = itertools.count(1)


class _LoopBridge:
    # No reference to the loop: the bridges are a WeakKeyDictionary keyed by loop, and a value
    # holding its key would keep every loop alive forever.
    __slots__ = ("__weakref__", "futures", "notifier")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.notifier = _core.Notifier()
        self.futures: dict[int, tuple[asyncio.Future[Lease], _core.WaitHandle]] = {}
        loop.add_reader(self.notifier.fd, self._drain)

    def _drain(self) -> None:
        for wid in self.notifier.drain():
            entry = self.futures.pop(wid, None)
            if entry is None:
                continue  # cancelled: the canceller gave the permits back
            fut, handle = entry
            lease = handle.lease()
            if fut.done():
                lease._give_back()
            else:
                fut.set_result(lease)


_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBridge] = weakref.WeakKeyDictionary()


def _bridge(loop: asyncio.AbstractEventLoop) -> _LoopBridge:
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _bridges[loop] = _LoopBridge(loop)
    return bridge


async def wait_engine(limiter: _core.Limiter, permit_count: int) -> Lease:
    """Queues in the engine and waits; cancelling the task leaves the queue at once."""
    return await wait_enqueued(lambda notifier, wid: limiter._enqueue(permit_count, -1, notifier, wid))


async def wait_enqueued(enqueue: Callable[[_core.Notifier, int], Lease | _core.WaitHandle]) -> Lease:
    """Runs ``enqueue(notifier, id)`` in the engine and waits for the request it queued."""
    loop = asyncio.get_running_loop()
    bridge = _bridge(loop)
    wid = next(_ids)
    result = enqueue(bridge.notifier, wid)
    if isinstance(result, _core.Lease):
        return result
    handle = result
    fut: asyncio.Future[Lease] = loop.create_future()
    bridge.futures[wid] = (fut, handle)
    try:
        return await fut
    except asyncio.CancelledError:
        bridge.futures.pop(wid, None)
        if not handle.cancel():
            handle.lease()._give_back()  # granted as we were cancelled: nobody will use it
        raise
