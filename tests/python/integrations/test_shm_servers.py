"""Limiters of a ``permits.shm.SharedMemoryStore`` shared by the worker processes of real servers:
``uvicorn --workers 4`` and gunicorn with uvicorn's worker (``--preload``: the store opened in the
master before the fork; ``--max-requests``: workers replaced mid-run), serving ``_shm_app.py`` on a
free loopback port. Each request is a new connection, so the kernel spreads them over the workers;
one limit holds across all of them.

Every test starts the server in a new session and ends it by killing the whole process group,
then checks that no process of it is left and that the segment was unlinked."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="permits.shm is Linux only")

APP_DIR = Path(__file__).parent
#: How long a server may take to have every worker answering (4 workers importing the app on a
#: busy 2-core machine take a few seconds).
STARTUP = 30.0


def require_gunicorn() -> None:
    """gunicorn is a test dependency (scripts/test installs it): missing in CI, the test fails
    (called in the test, so that it is a failure and not an error in a fixture)."""
    if importlib.util.find_spec("gunicorn") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gunicorn is not installed (scripts/test installs it: pip install gunicorn)")
        pytest.skip("gunicorn is not installed: pip install gunicorn")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def new_connections(url: str) -> httpx.Client:
    """A client that opens a new connection for every request (none is kept alive)."""
    return httpx.Client(base_url=url, timeout=20, limits=httpx.Limits(max_keepalive_connections=0))


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (state, ppid, pgrp, ...); None
    for a process that is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie is dead, waiting for its reaper


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def unlink_segment(name: str) -> None:
    from permits.shm import SharedMemoryStore

    if Path(f"/dev/shm/permits.{name}").exists():
        with SharedMemoryStore(name) as store:
            store.unlink()


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    #: Every pid that answered a request (the workers; the test's own requests add theirs).
    pids: set[int] = field(default_factory=set)
    #: Requests sent again after their connection closed before any response (``retry``).
    retried: int = 0

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def get(self, client: httpx.Client, path: str, *, retry: bool = False) -> httpx.Response:
        """A GET; ``retry``: again after a connection closed before any response (a worker
        replaced under --max-requests closes the connections it accepted but did not read)."""
        for _ in range(20):
            try:
                response = client.get(path)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                if not retry:
                    raise
                self.retried += 1
                time.sleep(0.05)
                continue
            if "x-pid" in response.headers:
                self.pids.add(int(response.headers["x-pid"]))
            return response
        raise AssertionError(f"GET {path}: no response in 20 attempts\n{self.output()}")

    def get_many(
        self, path: str, count: int, *, at_once: int, pause: float = 0.0, retry: bool = False
    ) -> list[httpx.Response]:
        """``count`` GETs of ``path``, ``at_once`` of them in flight at a time, each on a new
        connection; each sender pauses ``pause`` seconds after each of its requests."""

        def get(client: httpx.Client) -> httpx.Response:
            response = self.get(client, path, retry=retry)
            time.sleep(pause)
            return response

        with new_connections(self.url) as client, ThreadPoolExecutor(at_once) as pool:
            return list(pool.map(lambda _: get(client), range(count)))

    def wait_for_workers(self, workers: int) -> bool:
        """Until ``workers`` distinct pids have answered ``/pid`` (not limited); False when the
        server exited because another process took its port meanwhile."""
        deadline = time.monotonic() + STARTUP
        answered: set[int] = set()

        def ask(client: httpx.Client) -> int | None:
            try:
                return int(client.get("/pid").text)
            except (httpx.TransportError, ValueError):
                return None  # not listening yet

        with new_connections(self.url) as client, ThreadPoolExecutor(2 * workers) as pool:
            while len(answered) < workers:
                if self.process.poll() is not None:
                    if "in use" in self.output():
                        return False
                    raise AssertionError(f"the server exited ({self.process.returncode}):\n{self.output()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{len(answered)} of {workers} workers answered:\n{self.output()}")
                answered.update(p for p in pool.map(lambda _: ask(client), range(2 * workers)) if p is not None)
                time.sleep(0.02)
        self.pids |= answered
        return True


def stop(server: Server) -> list[int]:
    """Kills the server's process group and waits for it: the processes still alive after 5 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    deadline = time.monotonic() + 5
    while True:
        left = sorted(set(group_members(server.process.pid)) | {pid for pid in server.pids if alive(pid)})
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def command(server: str, port: int, workers: int, options: Sequence[str]) -> list[str]:
    if server == "uvicorn":
        return [
            *(sys.executable, "-m", "uvicorn", "_shm_app:app", "--app-dir", str(APP_DIR)),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
            *("--log-level", "warning", "--no-access-log", *options),
        ]
    return [
        *(sys.executable, "-m", "gunicorn", "_shm_app:app", "--chdir", str(APP_DIR)),
        *("--worker-class", "uvicorn.workers.UvicornWorker", "--workers", str(workers)),
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning", *gunicorn_quiet(), *options),
    ]


def gunicorn_quiet() -> list[str]:
    """gunicorn 25 and later open a control socket in ~/.gunicorn (one path for every server of
    the user): the tests' servers do without it."""
    settings = importlib.import_module("gunicorn.config").Config().settings
    return ["--no-control-socket"] if "control_socket_disable" in settings else []


@contextlib.contextmanager
def serving(
    server: str, kind: str, tmp_path: Path, *, workers: int, options: Sequence[str] = (), sleep: float = 0.0
) -> Iterator[tuple[Server, str]]:
    """``_shm_app`` with limiter ``kind`` under ``server`` (uvicorn or gunicorn) with ``workers``
    workers, on a new segment: yields the server once every worker answers, and the segment's
    name. Then kills the server's process group, unlinks the segment and checks both are gone."""
    name = f"test-shm-servers.{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "PERMITS_TEST_SHM": name,
        "PERMITS_TEST_LIMITER": kind,
        "PERMITS_TEST_SLEEP": str(sleep),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(APP_DIR), os.environ.get("PYTHONPATH")])),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    started: list[Server] = []
    left: list[int] = []
    try:
        for attempt in range(3):  # a free port, unless another process takes it before the server
            port = free_port()
            log = tmp_path / f"{server}-{attempt}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command(server, port, workers, options),
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append(Server(process, f"http://127.0.0.1:{port}", log))
            if started[-1].wait_for_workers(workers):
                break
        else:
            raise AssertionError(f"no free port in 3 attempts:\n{started[-1].output()}")
        yield started[-1], name
    finally:
        for each in started:
            left += stop(each)
        unlink_segment(name)
    assert not left, f"processes of the server still running: {left}"
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
