"""The sync connections' watchdog: an alarm whose deadline passed ends its socket's stream (the
peer reads the end), one disarmed or not yet due never does, and an alarm due before the one the
watchdog sleeps for wakes it. Sockets are socket pairs; deadlines are either long past or far
ahead, so nothing depends on how fast the machine is."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from permits._stores.postgres_watchdog import WATCHDOG

#: A net for a watchdog that never fires, never the thing measured.
SAFETY = 10.0
#: A deadline no test reaches.
FAR = 3600.0


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for ours, theirs in made:
        ours.close()
        theirs.close()


def pair(pairs: list[tuple[socket.socket, socket.socket]]) -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    pairs.append((ours, theirs))
    return ours, theirs


def ended(theirs: socket.socket, timeout: float = SAFETY) -> bool:
    """Whether the peer reads the end of the stream within ``timeout``."""
    theirs.settimeout(timeout)
    try:
        return theirs.recv(1) == b""
    except TimeoutError:
        return False


def still_open(theirs: socket.socket) -> bool:
    theirs.setblocking(False)
    try:
        theirs.recv(1)
    except BlockingIOError:
        return True
    return False


def test_a_passed_deadline_ends_the_stream_and_the_alarm_says_so(pairs: list) -> None:
    ours, theirs = pair(pairs)
    alarm = WATCHDOG.arm(time.monotonic() - 1.0, ours.fileno())
    assert ended(theirs)
    assert WATCHDOG.disarm(alarm) is True
    assert ours.fileno() != -1  # shut down, not closed: its owner closes it


def test_only_passed_deadlines_fire(pairs: list) -> None:
    due = [pair(pairs) for _ in range(20)]
    ahead = [pair(pairs) for _ in range(20)]
    disarmed = [pair(pairs) for _ in range(20)]
    alarms_ahead = [WATCHDOG.arm(time.monotonic() + FAR, ours.fileno()) for ours, _ in ahead]
    for ours, _ in disarmed:
        assert WATCHDOG.disarm(WATCHDOG.arm(time.monotonic() - 1.0, ours.fileno())) is False
    alarms_due = [WATCHDOG.arm(time.monotonic() - 1.0, ours.fileno()) for ours, _ in due]
    assert all(ended(theirs) for _, theirs in due)
    # The watchdog went through every alarm armed when it fired those: the others are untouched.
    assert all(still_open(theirs) for _, theirs in ahead + disarmed)
    assert [WATCHDOG.disarm(a) for a in alarms_due] == [True] * 20
    assert [WATCHDOG.disarm(a) for a in alarms_ahead] == [False] * 20


def test_an_earlier_deadline_wakes_a_watchdog_asleep_for_a_later_one(pairs: list) -> None:
    late, _ = pair(pairs)
    late_alarm = WATCHDOG.arm(time.monotonic() + FAR, late.fileno())
    ours, theirs = pair(pairs)
    WATCHDOG.arm(time.monotonic() + 0.05, ours.fileno())
    assert ended(theirs)  # long before the late one's hour
    assert WATCHDOG.disarm(late_alarm) is False
