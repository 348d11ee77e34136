"""Limiters of a ``permits.shm.SharedMemoryStore`` shared by the worker processes of real servers:
``uvicorn --workers 4`` and gunicorn with uvicorn's worker (``--preload``: the store opened in the
master before the fork; ``--max-requests``: workers replaced mid-run), serving ``_shm_app.py`` on a
free loopback port. Each request is a new connection, so the kernel spreads them over the workers;
one limit holds across all of them.

Every test starts the server in a new session and ends it by killing the whole process group,
then checks that no process of it is left and that the segment was unlinked."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from _integration import Server, app_env, command, new_connections, serve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="permits.shm is Linux only")


def require_gunicorn() -> None:
    """gunicorn is a test dependency (scripts/test installs it): missing in CI, the test fails
    (called in the test, so that it is a failure and not an error in a fixture)."""
    if importlib.util.find_spec("gunicorn") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gunicorn is not installed (scripts/test installs it: pip install gunicorn)")
        pytest.skip("gunicorn is not installed: pip install gunicorn")


def unlink_segment(name: str) -> None:
    from permits.shm import SharedMemoryStore

    if Path(f"/dev/shm/permits.{name}").exists():
        with SharedMemoryStore(name) as store:
            store.unlink()


@contextlib.contextmanager
def serving(
    server: str, kind: str, tmp_path: Path, *, workers: int, options: Sequence[str] = (), sleep: float = 0.0
) -> Iterator[tuple[Server, str]]:
    """``_shm_app`` with limiter ``kind`` under ``server`` (uvicorn or gunicorn) with ``workers``
    workers, on a new segment: yields the server once every worker answers, and the segment's
    name. Then kills the server's process group, unlinks the segment and checks both are gone."""
    name = f"test-shm-servers.{uuid.uuid4().hex[:12]}"
    env = app_env(PERMITS_TEST_SHM=name, PERMITS_TEST_LIMITER=kind, PERMITS_TEST_SLEEP=str(sleep))
    try:
        with serve(
            lambda port: command(server, "_shm_app:app", port, workers, options),
            env,
            tmp_path,
            workers=workers,
            label=server,
        ) as running:
            yield running, name
    finally:
        unlink_segment(name)
    assert not Path(f"/dev/shm/permits.{name}").exists()


def spend_the_window(
    server: Server, name: str, *, pause: float = 0.0, retry: bool = False
) -> tuple[list[httpx.Response], int]:
    """120 requests against the window of 40, and the permits left in it then, as this process
    (a third party opening the segment by name) reads them."""
    from permits.shm import SharedMemoryStore

    responses = server.get_many("/work", 120, at_once=4 if pause else 8, pause=pause, retry=retry)
    with SharedMemoryStore(name) as store:
        return responses, store.fixed_window("api", 40, 3600).available_permits()


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans in progress at one time (a span ending as another starts is not overlap)."""
    at_once = most = 0
    for _, step in sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans]):
        at_once += step
        most = max(most, at_once)
    return most


@pytest.mark.timeout(60)
def test_uvicorn_workers_share_one_fixed_window(tmp_path: Path) -> None:
    with serving("uvicorn", "window", tmp_path, workers=4) as (server, name):
        responses, left = spend_the_window(server, name)
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}
    assert left == 0
    granted_by = {r.json()["pid"] for r in responses if r.status_code == 200}
    assert len(granted_by) > 1, "every grant came from one worker: the test shows no sharing"


@pytest.mark.timeout(60)
def test_gunicorn_preload_workers_share_the_store_opened_before_the_fork(tmp_path: Path) -> None:
    require_gunicorn()
    with serving("gunicorn", "window", tmp_path, workers=4, options=["--preload"]) as (server, name):
        responses, left = spend_the_window(server, name)
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}
    assert left == 0
    granted_by = {r.json()["pid"] for r in responses if r.status_code == 200}
    assert len(granted_by) > 1, "every grant came from one worker: the test shows no sharing"


@pytest.mark.timeout(60)
def test_gunicorn_workers_replaced_mid_run_do_not_reset_the_window(tmp_path: Path) -> None:
    require_gunicorn()
    options = ["--max-requests", "5", "--max-requests-jitter", "0"]
    with serving("gunicorn", "window", tmp_path, workers=4, options=options) as (server, name):
        server.pids.clear()  # from here on: the workers that answer the 120 requests
        # Paced (about 2 s in all): uvicorn's worker checks its count of requests every 0.1 s, so
        # it would serve many more than 5 of a burst before it stops.
        responses, left = spend_the_window(server, name, pause=0.05, retry=True)
        answered_by = set(server.pids)
    assert Counter(r.status_code for r in responses) == {200: 40, 429: 80}
    assert left == 0
    assert len(answered_by) > 4, f"workers were not replaced: {sorted(answered_by)}"
    # Workers that first answered once the window was spent: they opened the segment anew and
    # found it spent (a reset would have granted them more than the 40 counted above).
    pids = [int(r.headers["x-pid"]) for r in responses]
    last_grant = max(i for i, r in enumerate(responses) if r.status_code == 200)
    assert set(pids[last_grant + 1 :]) - set(pids[: last_grant + 1]), "no worker was started after the window was spent"
    print(f"{len(answered_by)} workers answered the 120 requests ({server.retried} sent again)")


@pytest.mark.timeout(60)
def test_waiting_requests_share_a_concurrency_limit_across_uvicorn_workers(tmp_path: Path) -> None:
    with serving("uvicorn", "queue", tmp_path, workers=4, sleep=0.2) as (server, _):
        responses = server.get_many("/work", 16, at_once=16)
    assert [r.status_code for r in responses] == [200] * 16  # each waited for a permit
    bodies = [r.json() for r in responses]
    assert most_at_once([(b["start"], b["end"]) for b in bodies]) == 2
    assert len({b["pid"] for b in bodies}) > 1, "one worker served every request: the test shows no sharing"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server_name", ["uvicorn", "gunicorn-preload"])
def test_the_permit_of_a_killed_worker_is_reclaimed(server_name: str, tmp_path: Path) -> None:
    options = []
    if server_name == "gunicorn-preload":
        require_gunicorn()
        options = ["--preload"]  # the store is opened in the master: the holder is the worker all the same
    with serving(server_name.split("-")[0], "hold", tmp_path, workers=2, options=options) as (server, _):
        with new_connections(server.url) as holding, new_connections(server.url) as client:
            with holding.stream("GET", "/hold") as held:
                assert held.status_code == 200
                holder = int(held.headers["x-pid"])
                body = held.iter_raw()  # kept: closing it would close the connection and end the hold
                assert next(body) == b"held\n"  # the handler runs: the permit is taken
                refused = [server.get(client, "/work").status_code for _ in range(4)]
                os.kill(holder, signal.SIGKILL)
                killed = time.monotonic()
                while True:
                    response = server.get(client, "/work", retry=True)
                    waited = time.monotonic() - killed
                    if response.status_code != 429 or waited > 10:
                        break
                    time.sleep(0.05)
    assert refused == [429] * 4
    assert response.status_code == 200, f"still {response.status_code} {waited:.1f} s after the holder was killed"
    assert response.json()["pid"] != holder
    print(f"the permit came back {waited:.2f} s after the holder was killed")
