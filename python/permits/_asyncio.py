"""The asyncio bridge: requests queued in the engine, completed from the engine's thread.

Each event loop gets one bridge (``_core.LoopBridge``): the engine pushes completed waiters to it
and writes one byte to a pipe per batch; the loop's reader callback (the bridge's ``drain``, in C++)
resolves the batch's waits and schedules one ``resume`` that wakes their tasks. ``wait_async``
(``_core.AsyncWait``) finds the bridge here; queued, it is itself the future its task waits on.
"""

from __future__ import annotations

import asyncio
import weakref

from . import _core

# No reference to the loop in the value: a value holding its key would keep every loop alive.
_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _core.LoopBridge] = weakref.WeakKeyDictionary()


def _bridge(loop: asyncio.AbstractEventLoop) -> _core.LoopBridge:
    """The loop's bridge, made and watched by the loop on first use (called from C++)."""
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _bridges[loop] = _core.LoopBridge()
        loop.add_reader(bridge.fd, bridge.drain)
    return bridge
