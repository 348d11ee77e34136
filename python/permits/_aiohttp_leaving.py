"""Noticing that a queued aiohttp request's client has left, by an event rather than by polling.

aiohttp tells a handler nothing of a disconnect (unless the server runs with
``handler_cancellation=True``, which cancels the handler, and so the wait, at once). The
transport does tell its protocol: while a request waits, a stand-in protocol passes every event
on to aiohttp's and completes a future when the connection is lost. A waiting request then costs
no timer and no wakeup; it is put back when the wait ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web


class _Watch(asyncio.Protocol):
    """aiohttp's protocol, seen through: the same events, and ``lost`` set when the connection is."""

    __slots__ = ("inner", "lost")

    def __init__(self, inner: Any, lost: asyncio.Future[None]) -> None:
        self.inner = inner
        self.lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        found: bool | None = self.inner.eof_received()
        return found

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            if not self.lost.done():
                self.lost.set_result(None)


async def disconnected(request: web.Request) -> None:
    """Returns when the request's client disconnects; cancelled when the wait it watches ends."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return
    inner = transport.get_protocol()
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    watch = _Watch(inner, lost)
    transport.set_protocol(watch)
    try:
        await lost
    finally:
        # (after the loss the transport has dropped its protocol: nothing to put back)
        if transport.get_protocol() is watch:
            transport.set_protocol(inner)


__all__ = ["disconnected"]
