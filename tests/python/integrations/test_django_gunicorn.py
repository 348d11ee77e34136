"""A Django project under gunicorn's gevent workers (``--worker-class gevent --preload``):

- two workers share one limit through a ``permits.shm.SharedMemoryStore`` opened in the master
  before the fork: 120 requests on new connections against a window of 40 get exactly 40 200s,
  from both workers;
- a view's ``wait=True`` blocks the whole worker: the engine's wait blocks the OS thread (it
  releases the GIL, but never yields to gevent's hub), so the greenlet that holds the permit cannot
  run to give it back, and the wait times out although the permit was due back after 0.5 s.

The server runs in a session of its own on a free loopback port and is killed as a whole; the
segment is unlinked."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from _integration import APP_DIR, app_env, gunicorn_quiet, new_connections, require, serve, until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="permits.shm is Linux only")


def gunicorn(workers: int, port: int) -> list[str]:
    return [
        *(sys.executable, "-m", "gunicorn", "_django_gevent_app:app", "--chdir", str(APP_DIR)),
        *("--worker-class", "gevent", "--workers", str(workers), "--preload"),
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning", *gunicorn_quiet()),
    ]


@pytest.fixture
def segment() -> Iterator[str]:
    require("gunicorn")
    require("gevent")
    require("django")
    from permits.shm import SharedMemoryStore

    name = f"test-django-gevent.{uuid.uuid4().hex[:12]}"
    yield name
    if Path(f"/dev/shm/permits.{name}").exists():
        with SharedMemoryStore(name) as store:
            store.unlink()
    assert not Path(f"/dev/shm/permits.{name}").exists()


@pytest.mark.timeout(60)
def test_gevent_workers_share_one_fixed_window(segment: str, tmp_path: Path) -> None:
    from permits.shm import SharedMemoryStore

    env = app_env(PERMITS_TEST_SHM=segment)
    with serve(lambda port: gunicorn(2, port), env, tmp_path, workers=2, label="gevent") as server:
        responses = server.get_many("/work", 120, at_once=8)
        with SharedMemoryStore(segment) as store:
            left = store.fixed_window("api", 40, 3600).available_permits()
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}
    assert left == 0
    assert all(1 <= int(r.headers["retry-after"]) <= 3600 for r in responses if r.status_code == 429)
    assert all(r.headers["ratelimit-policy"] == '"api";q=40;w=3600' for r in responses)
    granted_by = {int(r.headers["x-pid"]) for r in responses if r.status_code == 200}
    assert len(granted_by) == 2, f"the grants came from {granted_by}: the test shows no sharing"


@pytest.mark.timeout(60)
def test_a_blocking_wait_blocks_the_whole_gevent_worker(segment: str, tmp_path: Path) -> None:
    env = app_env(PERMITS_TEST_SHM=segment)
    with serve(lambda port: gunicorn(1, port), env, tmp_path, workers=1, label="gevent-wait") as server:
        with new_connections(server.url) as client, ThreadPoolExecutor(2) as pool:
            held = pool.submit(client.get, "/hold")  # holds the worker's one permit for 0.5 s of gevent.sleep
            until(lambda: client.get("/free").text == "0")
            waited = pool.submit(client.get, "/wait")  # waits up to 3 s for it
            waiting, holding = waited.result(timeout=3 + 5), held.result(timeout=3 + 5)
            assert client.get("/free").text == "1"
        assert server.process.poll() is None, server.output()  # (the worker lived through it)
    assert (holding.status_code, holding.text) == (200, "held")
    # The permit was due back after 0.5 s, but the wait blocked the worker's only thread: the
    # holder's greenlet never ran again until the wait had timed out.
    assert (waiting.status_code, waiting.text) == (429, "Too Many Requests (limiter: gate)")
