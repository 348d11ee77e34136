"""The asyncio bridge: requests queued in the engine, completed from the engine's thread.

Each event loop gets one bridge (``_core.LoopBridge``): the engine pushes completed waiters to it
and writes one byte to a pipe per batch; the loop's reader callback (the bridge's ``drain``, in C++)
resolves the batch's waits and schedules one ``resume`` that wakes their tasks. ``wait_async``
(``_core.EngineLeaseWait``) finds the bridge here; queued, it is itself the future its task waits on.

A bridge lives on its loop (an attribute), not in a global table: its queued waits reference the
loop, so a loop dropped with waits still queued is a cycle the GC can see and collect, giving
their permits back. A loop closed by hand drops its reader callback (the selector is closed), and
the reader's finalizer abandons the bridge at once: the waits leave their queues.
"""

from __future__ import annotations

import asyncio
import weakref

from . import _core

_ATTRIBUTE = "_permits_bridge"

# Loops that take no attributes (none of asyncio's or uvloop's): their bridge lives here instead,
# and a cycle through such a loop is not collected (closing the loop still abandons its waits).
_elsewhere: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _core.LoopBridge] = weakref.WeakKeyDictionary()


class _Reader:
    """The loop's reader callback for a bridge's pipe; dropped by the loop when it closes."""

    __slots__ = ("_bridge",)

    def __init__(self, bridge: _core.LoopBridge) -> None:
        self._bridge = bridge

    def __call__(self) -> None:
        self._bridge.drain()

    def __del__(self) -> None:
        # The loop closed (or is being collected): nothing will drain this bridge again.
        self._bridge.abandon()


def bridge_of(loop: asyncio.AbstractEventLoop) -> _core.LoopBridge | None:
    """The loop's bridge, if it has one."""
    bridge = getattr(loop, _ATTRIBUTE, None)
    if isinstance(bridge, _core.LoopBridge):
        return bridge
    return _elsewhere.get(loop)


def _bridge(loop: asyncio.AbstractEventLoop) -> _core.LoopBridge:
    """The loop's bridge, made and watched by the loop on first use (called from C++)."""
    bridge = bridge_of(loop)
    if bridge is None:
        bridge = _core.LoopBridge()
        loop.add_reader(bridge.fd, _Reader(bridge))
        try:
            setattr(loop, _ATTRIBUTE, bridge)
        except AttributeError:
            _elsewhere[loop] = bridge
    return bridge


_core._set_bridge_factory(_bridge)
