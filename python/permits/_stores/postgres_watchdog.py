"""A client-side bound on how long a PostgreSQL connection may take to answer.

``statement_timeout`` cannot help when the server is stopped (SIGSTOP) or unreachable: nothing
on the server runs. So each use of a connection is armed with a deadline; when it passes, the
connection's socket is shut down, which wakes the waiting client at once with a connection error
(libpq sees the stream end), and the connection is discarded by its user. Sync connections share
one watchdog thread per process; asyncio ones use their loop's timer.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import time

from .._forking import in_child


def shut_down(fd: int) -> None:
    """Ends the stream of socket ``fd`` both ways (its file descriptor stays open for its owner)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return  # already closed: nothing waits on it
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: the wait ends anyway
    finally:
        sock.close()  # the duplicate only


class Alarm:
    __slots__ = ("_handle", "deadline", "done", "fd", "fired")

    def __init__(self, deadline: float, fd: int) -> None:
        self.deadline = deadline
        self.fd = fd
        self.fired = False
        self.done = False
        self._handle: asyncio.TimerHandle | None = None


class _Watchdog:
    """One thread that shuts down the sockets whose deadline (time.monotonic()) has passed.

    Armed alarms are a set of the calls in flight (a few: one per connection in use), not a heap
    of every call of the last timeout: arming and disarming are a set's add and remove under a
    lock, and the thread wakes at the earliest deadline it knows of, which is rarely earlier than
    one it saw before (deadlines are mostly now + the same timeout), so it is seldom woken early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._armed: set[Alarm] = set()
        self._wake = math.inf  # when the thread wakes next (inf: when told)
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, fd: int) -> Alarm:
        alarm = Alarm(deadline, fd)
        with self._lock:
            self._armed.add(alarm)
            if deadline < self._wake:
                self._wake = deadline
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="permits-postgres-watchdog", daemon=True)
                    self._thread.start()
                else:
                    self._cond.notify()
        return alarm

    def disarm(self, alarm: Alarm) -> bool:
        """Whether the alarm went off (the connection must be discarded). Under the lock: once this
        returns, the watchdog never touches the socket again."""
        with self._lock:
            self._armed.discard(alarm)
            alarm.done = True
            return alarm.fired

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                wake = math.inf
                for alarm in [a for a in self._armed if a.deadline <= now]:
                    self._armed.discard(alarm)
                    alarm.fired = True
                    alarm.done = True
                    shut_down(alarm.fd)
                for alarm in self._armed:
                    wake = min(wake, alarm.deadline)
                self._wake = wake
                self._cond.wait(None if wake == math.inf else wake - now)

    def _after_fork(self) -> None:
        # The thread does not exist in a forked child (and the lock may have been held).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._armed = set()
        self._wake = math.inf
        self._thread = None


WATCHDOG = _Watchdog()
in_child(WATCHDOG._after_fork)


def arm_async(loop: asyncio.AbstractEventLoop, deadline: float, fd: int) -> Alarm:
    """The same on an event loop (``deadline`` in time.monotonic(), as the loop's clock)."""
    alarm = Alarm(deadline, fd)

    def fire() -> None:
        if not alarm.done:
            alarm.fired = True
            alarm.done = True
            shut_down(fd)

    alarm._handle = loop.call_later(max(0.0, deadline - time.monotonic()), fire)
    return alarm


def disarm_async(alarm: Alarm) -> bool:
    alarm.done = True
    if alarm._handle is not None:
        alarm._handle.cancel()
    return alarm.fired
