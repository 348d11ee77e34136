"""The head of a store limiter's wait queue asks the server when the refusal it was given says
(its retry_after), not again at once: a wait that could not be granted asks once on its way into
the queue, and a wait whose timeout ends before the retry time asks nothing more. (Asking again
at once doubled a queued wait's round trips, and met a server that failed in between.)"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import permits

from _store_fixtures import *  # noqa: F403 (the fixtures)
from _store_support import Server, fresh_name

WINDOW = 10.0


def _counted_takes(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The store's steps that take, counted as the limiters make them (sync and asyncio)."""
    backend, counted = store._backend, []
    for method in ("take", "take_async"):
        original = getattr(backend, method)

        def counting(*args: Any, _original: Any = original) -> Any:
            counted.append(1)
            return _original(*args)

        monkeypatch.setattr(backend, method, counting)
    return counted


def _until_queued(limiter: Any) -> None:
    while limiter.statistics().current_queued_count < 1:
        threading.Event().wait(0.002)


def test_a_queued_wait_asks_once_before_its_timeout(shared_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = permits.ManualClock()
    window = shared_server.store(clock=clock).fixed_window(fresh_name("asks"), 1, WINDOW)
    assert window.acquire()
    takes = _counted_takes(window.store, monkeypatch)
    answers: list[permits.Lease] = []
    waiting = threading.Thread(target=lambda: answers.append(window.wait(1, timeout=WINDOW / 2)))
    waiting.start()
    _until_queued(window)
    clock.advance(WINDOW / 2)  # its deadline, before the retry time: it ends without asking
    waiting.join(10.0)
    assert not waiting.is_alive()
    assert answers[0].reason == "timeout"
    assert len(takes) == 1, f"{len(takes)} steps for one wait refused once"


async def test_a_queued_wait_async_asks_again_at_its_retry_time(
    shared_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = permits.ManualClock()
    window = shared_server.store(clock=clock).fixed_window(fresh_name("asks"), 1, WINDOW)
    assert window.acquire()
    takes = _counted_takes(window.store, monkeypatch)
    waiting = asyncio.ensure_future(window.wait_async())
    async with asyncio.timeout(10.0):
        while window.statistics().current_queued_count < 1:
            await asyncio.sleep(0.002)
    await asyncio.sleep(0.05)  # (real time in which no step should be made)
    assert len(takes) == 1
    clock.advance(WINDOW)
    async with asyncio.timeout(10.0):
        lease = await waiting
    assert lease
    assert len(takes) == 2, f"{len(takes)} steps for a wait refused once, then granted"
