"""Celery tasks limited by ``permits.celery.rate_limited`` (issue 43, item 5), run by a real worker
(Celery's solo pool, its in-memory broker) in this process: a task over its limit is retried with the
refusal's ``retry_after`` as its countdown, so the worker never waits for a permit."""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import permits

from _integration import require

celery = require("celery")
from celery.contrib.testing.worker import start_worker  # noqa: E402

from permits.celery import rate_limited  # noqa: E402

SECOND = 1_000_000_000

app = celery.Celery("permits-tests", broker="memory://", backend="cache+memory://")
app.conf.update(
    task_default_retry_delay=0,
    broker_connection_retry_on_startup=False,
    broker_transport_options={"polling_interval": 0.05},
    worker_hijack_root_logger=False,
)
ran: list[tuple[str, int]] = []
pool = permits.ConcurrencyLimiter(1, name="db")
seen: list[int] = []
SEGMENT = f"test-celery-{os.getpid()}"
ON_LINUX = sys.platform == "linux"  # (permits.shm is Linux only)


# (the tasks are the worker's from its start: every test's are here)
@app.task(bind=True)
@rate_limited("2/second")
def job(self: Any, name: str) -> str:
    ran.append((name, time.monotonic_ns()))
    return name


@app.task
def other() -> int:
    ran.append(("other", time.monotonic_ns()))
    return 1


@app.task
@rate_limited("1/minute", key=lambda host, path: host)
def fetch(host: str, path: str) -> str:
    ran.append((f"{host}{path}", time.monotonic_ns()))
    return path


@app.task
@rate_limited(pool)
def query() -> int:
    seen.append(pool.available_permits())
    return 1


if ON_LINUX:
    from permits.shm import SharedMemoryStore

    shared = SharedMemoryStore(SEGMENT)  # another process's handle: a second SharedMemoryStore(SEGMENT)
    atexit.register(shared.unlink)  # (whichever of xdist's workers imported this module: its own segment)

    @app.task
    @rate_limited(shared.limiter("exports", permits.specs.FixedWindow(1, 3600.0)))
    def export() -> str:
        ran.append(("export", time.monotonic_ns()))
        return "exported"


@pytest.fixture(scope="module")
def worker() -> Iterator[None]:
    # The worker sets up logging (the root logger's level and a handler): the later tests' logging,
    # and pytest's capture of it, get theirs back.
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


def most_in_any_interval(times: list[int], interval_ns: int) -> int:
    times = sorted(times)
    return max((bisect.bisect_right(times, t + interval_ns - 1) - i for i, t in enumerate(times)), default=0)


def test_a_limited_task_is_retried_not_waited_for(worker: None) -> None:
    ran.clear()
    results = [job.delay(f"j{i}") for i in range(5)]
    side = other.delay()
    assert side.get(timeout=10) == 1
    assert sorted(r.get(timeout=20) for r in results) == [f"j{i}" for i in range(5)]
    job_times = [t for name, t in ran if name.startswith("j")]
    assert len(job_times) == 5  # each ran once, when its turn came
    assert most_in_any_interval(job_times, SECOND) <= 2
    # The worker ran the other task while the limited ones waited (retried, not held): it ran
    # before the last of them, though sent after every one.
    other_at = next(t for name, t in ran if name == "other")
    assert other_at < max(job_times)


def test_a_limit_per_key(worker: None) -> None:
    ran.clear()
    first = [fetch.delay(host, "/a") for host in ("x", "y", "z")]
    assert [r.get(timeout=10) for r in first] == ["/a"] * 3  # a host each: none refused
    again = fetch.delay("x", "/b")
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and again.state != "RETRY":
        time.sleep(0.02)
    assert again.state == "RETRY"  # refused: retried in about a minute, never run meanwhile
    assert sorted(name for name, _ in ran) == ["x/a", "y/a", "z/a"]
    again.revoke()


def test_a_concurrency_permit_is_held_while_the_task_runs(worker: None) -> None:
    assert query.delay().get(timeout=10) == 1
    assert seen == [0] and pool.available_permits() == 1  # held while it ran, given back after


@pytest.mark.skipif(not ON_LINUX, reason="permits.shm is Linux only")
def test_a_limit_shared_with_other_processes(worker: None) -> None:
    """A shared-memory limiter: what another process took counts here (a second handle on the
    segment stands for that process)."""
    ran.clear()
    other = SharedMemoryStore(SEGMENT).limiter("exports", permits.specs.FixedWindow(1, 3600.0))
    assert other.acquire()  # the other process took the hour's one export
    refused = export.delay()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and refused.state != "RETRY":
        time.sleep(0.02)
    assert refused.state == "RETRY" and ran == []  # refused here too: retried in about an hour
    refused.revoke()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="keyed limiter needs key="):
        rate_limited(permits.PartitionedLimiter.per_key("1/second"))
    with pytest.raises(ValueError, match="permit_count"):
        rate_limited("1/second", permit_count=0)
    with pytest.raises(TypeError, match="key must be callable"):
        rate_limited("1/second", key="host")  # type: ignore[arg-type]
    refused = rate_limited(permits.FixedWindowLimiter(1, 60.0))(lambda: 1)
    assert refused() == 1
    with pytest.raises(RuntimeError, match="not run by a Celery worker"):
        refused()  # called directly, over its limit
