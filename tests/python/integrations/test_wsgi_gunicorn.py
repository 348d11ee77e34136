"""One limit across gunicorn's WSGI workers (``-w 2 --preload``, sync and gthread workers) through a
``permits.shm.SharedMemoryStore`` opened in the master before the fork: 120 requests on new
connections against a window of 40 get exactly 40 200s, from both workers; a worker killed while it
holds a concurrency permit does not keep it. The server runs in a session of its own on a free
loopback port and is killed as a whole; the segment is unlinked."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from _integration import APP_DIR, app_env, gunicorn_quiet, new_connections, require, serve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="permits.shm is Linux only")


def gunicorn(worker: str, port: int) -> list[str]:
    threads = ["--threads", "4"] if worker == "gthread" else []
    return [
        *(sys.executable, "-m", "gunicorn", "_wsgi_shm_app:app", "--chdir", str(APP_DIR)),
        *("--worker-class", worker, *threads, "--workers", "2", "--preload"),
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning", *gunicorn_quiet()),
    ]


@contextlib.contextmanager
def segment() -> Iterator[str]:
    """A new segment's name; the segment is unlinked after."""
    from permits.shm import SharedMemoryStore

    name = f"test-wsgi-gunicorn.{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        if Path(f"/dev/shm/permits.{name}").exists():
            with SharedMemoryStore(name) as store:
                store.unlink()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker", ["sync", "gthread"])
def test_gunicorn_wsgi_workers_share_one_fixed_window(worker: str, tmp_path: Path) -> None:
    require("gunicorn")
    from permits.shm import SharedMemoryStore

    with segment() as name:
        env = app_env(PERMITS_TEST_SHM=name)
        with serve(lambda port: gunicorn(worker, port), env, tmp_path, workers=2, label=worker) as server:
            responses = server.get_many("/work", 120, at_once=8)
            with SharedMemoryStore(name) as store:
                left = store.fixed_window("api", 40, 3600).available_permits()
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}
    assert left == 0
    assert all(1 <= int(r.headers["retry-after"]) <= 3600 for r in responses if r.status_code == 429)
    granted_by = {int(r.headers["x-pid"]) for r in responses if r.status_code == 200}
    assert len(granted_by) == 2, f"the grants came from {granted_by}: the test shows no sharing"
    assert not Path(f"/dev/shm/permits.{name}").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker", ["sync", "gthread"])
def test_the_permit_of_a_killed_wsgi_worker_is_reclaimed(worker: str, tmp_path: Path) -> None:
    require("gunicorn")
    with segment() as name:
        env = app_env(PERMITS_TEST_SHM=name)
        with serve(lambda port: gunicorn(worker, port), env, tmp_path, workers=2, label=worker) as server:
            with new_connections(server.url) as holding, new_connections(server.url) as client:
                with holding.stream("GET", "/hold") as held:
                    assert held.status_code == 200
                    holder = int(held.headers["x-pid"])
                    body = held.iter_raw()  # kept open: the worker holds the permit while it streams
                    assert next(body) == b"held\n"
                    refused = [server.get(client, "/hold").status_code for _ in range(4)]
                    os.kill(holder, signal.SIGKILL)
                    killed = time.monotonic()
                    while True:
                        with client.stream("GET", "/hold") as again:  # (a 200 holds on: closed unread)
                            status, by = again.status_code, int(again.headers["x-pid"])
                        waited = time.monotonic() - killed
                        if status != 429 or waited > 10:
                            break
                        time.sleep(0.05)
    assert refused == [429] * 4
    assert status == 200, f"still {status} {waited:.1f} s after the holder was killed"
    assert by != holder
    print(f"the permit came back {waited:.2f} s after the holder was killed")
