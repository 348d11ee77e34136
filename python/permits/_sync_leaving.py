"""A sync server's queued wait that ends when its client leaves.

WSGI gives an application no signal that its client has gone; but gunicorn and werkzeug's server put
the connection's socket in the environ (``gunicorn.socket``, ``werkzeug.socket``). A request queued
with ``wait=True`` then waits on two descriptors at once: the engine's notifier (written when the
wait completes) and the socket, watched for the peer's shutdown only (``POLLRDHUP``: a body not yet
read does not wake it). A client that leaves takes its request out of the queue at once instead of
holding a worker's thread until a permit comes or the timeout ends.

Only the engine's limiters (and their per-key tables) queue this way; with another limiter, without a
socket, off Linux or under gevent's patched ``select``, the wait is the limiter's blocking ``wait``.
"""

from __future__ import annotations

import select
import socket
import sys
from typing import Any

from . import _core
from ._core import Lease
from ._durations import timeout_ns

_SOCKETS = ("gunicorn.socket", "werkzeug.socket")
_RDHUP: int | None = getattr(select, "POLLRDHUP", None)
#: The peer's shutdown, a hang-up or an error: what ends a wait (not data: a body not yet read).
_GONE = 0 if _RDHUP is None else _RDHUP | select.POLLHUP | select.POLLERR
#: Linux's poll() with POLLRDHUP: elsewhere nothing is watched.
_WATCHABLE = _RDHUP is not None and hasattr(select, "poll")


def client_socket(environ: dict[str, Any]) -> socket.socket | None:
    """The connection's socket when the server exposes it and this platform can watch it."""
    if not _WATCHABLE or _gevent_patched():
        return None
    for name in _SOCKETS:
        found = environ.get(name)
        if isinstance(found, socket.socket):
            return found
    return None


def _gevent_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("select"))


def enqueue_of(limiter: object) -> Any:
    """The engine's ``_enqueue`` behind ``limiter`` (an engine limiter or per-key table), or None.
    Looked up on its class: a wrapper that forwards attributes (an instrumented limiter) must wait
    through its own ``wait``, which it observes."""
    core_self = getattr(type(limiter), "_core_self", None)
    if core_self is None:
        return None
    return getattr(core_self(limiter), "_enqueue", None)


def wait_unless_left(
    enqueue: Any, key: object, keyed: bool, permit_count: int, timeout: float | None, sock: socket.socket
) -> Lease | None:
    """The wait's lease, or None when the client left first (the request leaves the queue; a permit
    granted in that very moment is given back, as if never taken)."""
    notifier = _core.Notifier()
    limit_ns = timeout_ns(timeout)
    queued = enqueue(key, permit_count, limit_ns, notifier) if keyed else enqueue(permit_count, limit_ns, notifier)
    if isinstance(queued, Lease):
        return queued
    try:
        poller = select.poll()
        poller.register(notifier.fd, select.POLLIN)
        poller.register(sock.fileno(), _GONE)
        while True:
            for fd, _ in poller.poll():  # (the GIL is released; the engine ends the wait at its timeout)
                if fd == notifier.fd:
                    notifier.drain()
                    if queued.done():
                        return queued.lease()  # type: ignore[no-any-return]
                elif queued.cancel():
                    return None
                else:
                    queued.lease()._refund()  # granted as the client left: nobody will use it
                    return None
    except BaseException:
        if not queued.cancel():
            queued.lease()._refund()
        raise


__all__ = ["client_socket", "enqueue_of", "wait_unless_left"]
