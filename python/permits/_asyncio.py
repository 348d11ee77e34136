"""The asyncio bridge: requests queued in the engine, completed from the engine's thread.

Each event loop gets one bridge (``_core.LoopBridge``): the engine pushes completed waiters to it
and writes one byte to a pipe per batch; the loop's reader callback (the bridge's ``drain``, in
C++) resolves the batch's waits and schedules one ``resume`` that wakes their tasks. ``wait_async``
(``_core.EngineLeaseWait``) finds the bridge here; queued, it is itself the future its task waits on.

A loop that cannot watch a descriptor (``add_reader`` raises ``NotImplementedError``: Windows'
default proactor loop) gets a bridge with a socket pair instead, and receives from it
(``_Receiver``). (On Windows every bridge has a socket pair: its loops watch only sockets.)

A bridge lives on its loop (an attribute), not in a global table: its queued waits reference the
loop, so a loop dropped with waits still queued is a cycle the GC can see and collect, giving
their permits back. A loop closed by hand drops its reader callback (the selector is closed), and
the reader's finalizer abandons the bridge at once: the waits leave their queues. (A receiving loop
closed by hand abandons it at once too: the receiver wraps the loop's ``close``, since a receive
left pending by a closed loop is only ever collected by the GC.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import weakref
from collections.abc import Coroutine
from typing import Any

from . import _core

_ATTRIBUTE = "_permits_bridge"

# Loops that take no attributes (none of asyncio's or uvloop's): their bridge lives here instead,
# and a cycle through such a loop is not collected (closing the loop still abandons its waits).
_elsewhere: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _core.LoopBridge] = weakref.WeakKeyDictionary()


class _Reader:
    """The loop's reader callback for a bridge's pipe; dropped by the loop when it closes."""

    __slots__ = ("_bridge",)

    def __init__(self, bridge: _core.LoopBridge) -> None:
        self._bridge: _core.LoopBridge | None = bridge

    def __call__(self) -> None:
        if self._bridge is not None:
            self._bridge.drain()

    def disown(self) -> None:
        """The loop refused this reader: it abandons nothing when dropped."""
        self._bridge = None

    def __del__(self) -> None:
        # The loop closed (or is being collected): nothing will drain this bridge again.
        if self._bridge is not None:
            self._bridge.abandon()


_CHUNK = 64  # bytes per receive: one per batch is ever written, a few at most wait


class _WakeSocket(socket.socket):
    """The bridge's wake-up socket once a receiver owns it. A loop closed by hand leaves it in a
    garbage cycle with its receive, where the GC may finalize it before its receiver closes it:
    it closes quietly then (no ResourceWarning: nothing leaked)."""

    __slots__ = ()

    def __del__(self) -> None:
        self.close()


class _Receiver:
    """Drains a bridge on a loop that receives from sockets but cannot watch them (Windows'
    proactor loop): one ``loop.sock_recv`` on the bridge's socket is always in flight, and each
    receive that brings bytes drains the bridge.

    The receive is stepped by hand, not run as a Task: a task would show in
    ``asyncio.all_tasks()``, where shutdown code that awaits every other task would wait for it
    forever, and ``asyncio.run`` would cancel it along with the user's tasks.
    """

    __slots__ = ("__weakref__", "_bridge", "_loop", "_receive", "_socket")

    def __init__(self, loop: asyncio.AbstractEventLoop, bridge: _core.LoopBridge, reader: int) -> None:
        self._loop = loop
        self._bridge: _core.LoopBridge | None = bridge
        # `reader`, the bridge's socket, is ours from here on: the bridge no longer reads or closes it.
        self._socket: socket.socket | None = _WakeSocket(fileno=reader)
        self._socket.setblocking(False)
        self._receive: Coroutine[Any, Any, bytes] | None = loop.sock_recv(self._socket, _CHUNK)
        try:
            self._step(first=True)
        except NotImplementedError:
            self.close()
            raise

    def _step(self, _: object = None, *, first: bool = False) -> None:
        receive = self._receive
        if receive is None:
            return
        try:
            waiting = receive.send(None)
        except StopIteration as done:
            if not done.value:  # end of stream: the engine side is gone
                self.close()
                return
            # The next receive starts in a callback of its own, so bytes arriving without a pause
            # never keep this one running; then the batch is drained.
            assert self._socket is not None
            self._receive = self._loop.sock_recv(self._socket, _CHUNK)
            try:
                self._loop.call_soon(self._step)
            except RuntimeError:  # the loop is closed
                self.close()
            self._drain()
            return
        except NotImplementedError:
            if first:  # the loop cannot receive either: the caller says so
                raise
            self.close()
            return
        except (Exception, asyncio.CancelledError):  # the socket or the loop is closing
            self.close()
            return
        if waiting is None:  # a bare yield: go on in the next iteration
            self._loop.call_soon(self._step)
        else:  # a future, as a task would wait on it
            waiting._asyncio_future_blocking = False
            waiting.add_done_callback(self._step)

    def _drain(self) -> None:
        if self._bridge is not None:
            self._bridge.drain()

    def close(self) -> None:
        """Stops receiving and abandons the bridge: nothing will drain it again."""
        receive, self._receive = self._receive, None
        if receive is not None:
            receive.close()
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            bridge.abandon()

    def __del__(self) -> None:
        # The loop closed (or is being collected) with the receive in flight.
        self.close()


class _ClosingHook:
    """Stands in for a receiving loop's ``close`` (an instance attribute): closes the loop, then
    the receiver, which abandons the bridge at once. Without it the receive a closed loop leaves
    pending keeps the receiver, and the waits queued in the engine, until the GC runs; a permit
    released meanwhile would go to a wait nobody can resume."""

    __slots__ = ("_close", "_receiver")

    def __init__(self, loop: asyncio.AbstractEventLoop, receiver: _Receiver) -> None:
        self._close = weakref.WeakMethod(loop.close)
        self._receiver = weakref.ref(receiver)

    def __call__(self) -> None:
        close = self._close()
        try:
            if close is not None:
                close()
        finally:
            receiver = self._receiver()
            if receiver is not None:
                receiver.close()


def _receiving(loop: asyncio.AbstractEventLoop, bridge: _core.LoopBridge) -> _core.LoopBridge:
    """The bridge of a loop that cannot watch a descriptor: it receives from a socket instead."""
    socket_fd = bridge.take_reader()  # on Windows the bridge has a socket pair already
    if socket_fd == -1:  # a pipe: the loop cannot receive from that either
        bridge = _core.LoopBridge(socket=True)
        socket_fd = bridge.take_reader()
    try:
        receiver = _Receiver(loop, bridge, socket_fd)  # kept alive by its receive, which the loop keeps in flight
    except NotImplementedError:
        raise RuntimeError(
            f"wait_async() cannot queue on {type(loop).__name__}: the loop can neither watch a descriptor "
            "(add_reader) nor receive from a socket (sock_recv), so the engine could never wake it; "
            "use acquire() or acquire_async() there, or an asyncio or uvloop loop"
        ) from None
    with contextlib.suppress(AttributeError):  # a loop that takes no attributes: the GC abandons the bridge
        loop.close = _ClosingHook(loop, receiver)  # type: ignore[method-assign]
    return bridge


def _watched(loop: asyncio.AbstractEventLoop) -> _core.LoopBridge:
    """A bridge the loop drains whenever the engine signals it: a pipe the loop watches, or where
    the loop cannot watch one, a socket it receives from."""
    bridge = _core.LoopBridge()
    reader = _Reader(bridge)
    try:
        loop.add_reader(bridge.fd, reader)
    except NotImplementedError:
        reader.disown()
        return _receiving(loop, bridge)
    return bridge


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
        bridge = _watched(loop)
        try:
            setattr(loop, _ATTRIBUTE, bridge)
        except AttributeError:
            _elsewhere[loop] = bridge
    return bridge


_core._set_bridge_factory(_bridge)
