"""Helpers of the integration tests: waiting in the event loop, WSGI servers (werkzeug's, waitress)
in a thread of the test's process, and servers with several worker processes (uvicorn, gunicorn)
run as a process group of their own, serving an app module of this directory on a free loopback
port, then killed as a whole."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

APP_DIR = Path(__file__).parent
#: How long a server may take to have every worker answering (4 workers importing the app on a
#: busy 2-core machine take a few seconds).
STARTUP = 30.0


async def eventually(condition: Callable[[], bool]) -> None:
    """Yields to the event loop until ``condition()`` holds (the test's timeout bounds it)."""
    while not condition():
        await asyncio.sleep(0.005)


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Waits (in this thread) until ``condition()`` holds; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {condition}")
        time.sleep(0.002)


def require(module: str, install: str | None = None) -> ModuleType:
    """``module``, imported; a test dependency (scripts/test installs it): missing, the test is
    skipped, or fails under CI (CI=true), unless it has no build for this interpreter."""
    from _support import no_build  # (here: the test servers' apps import this module without tests/python)

    if (reason := no_build(module)) is not None:
        pytest.skip(reason)
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (pip install {install or module})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@contextlib.contextmanager
def serve_wsgi(app: Any, server: str = "werkzeug") -> Iterator[str]:
    """A WSGI app served on a free loopback port from threads of this process, by werkzeug's
    threaded server or by waitress (8 threads); yields the base URL, then stops the server."""
    if server == "werkzeug":
        serving = require("werkzeug.serving", "werkzeug")
        httpd = serving.make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_port}"
        finally:
            # werkzeug's serve_forever closes the server itself as it ends: closing it here before
            # the thread has ended would close one socket from two threads at once, which on a
            # free-threaded CPython may close its descriptor twice (EBADF, or another's descriptor).
            httpd.shutdown()
            thread.join(10)
            httpd.server_close()
        return
    waitress = require("waitress")
    tcp = waitress.create_server(app, host="127.0.0.1", port=0, threads=8, clear_untrusted_proxy_headers=False)
    stopping = threading.Event()

    def loop() -> None:  # waitress's own run() loops until every connection has gone
        while not stopping.is_set():
            tcp.asyncore.loop(timeout=0.05, map=tcp._map, count=1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{tcp.effective_port}"
    finally:
        stopping.set()
        thread.join(10)
        for channel in list(tcp._map.values()):
            channel.close()
        tcp.task_dispatcher.shutdown(timeout=10)


def raw_request(url: str, path: str = "/", body: bytes = b"") -> socket.socket:
    """A raw connection to ``url`` that sent one request (a GET, or a POST of ``body`` sent in full)
    and has read nothing yet: the test reads the answer, or closes it to leave."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    if body:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
    else:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
    return sock


def raw_status(url: str, path: str) -> int:
    """The status of a GET of ``path`` sent byte for byte as given (an HTTP client would resolve
    or re-encode dot segments and backslashes before sending)."""
    with raw_request(url, path) as sock:
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise AssertionError(f"GET {path}: connection closed before a status line")
            head += chunk
    return int(head.split(b" ", 2)[1])


#: Paths below an exempt ``/health`` with a dot segment in some spelling that a server, a proxy or
#: the app behind them may resolve out of the prefix: never exempt.
DOT_SEGMENT_PATHS = [
    "/health/../hello",
    "/health/./../hello",
    "/health/..;/hello",  # Tomcat, Spring: a segment's ;parameters dropped, then resolved
    "/health/..;jsessionid=x/hello",
    "/health/%2e%2e/hello",
    "/health/%2E%2E/hello",
    "/health/%2e./hello",
    "/health/.%2E/hello",
    "/health/%2e%2e;/hello",
    "/health/..%3b/hello",
    "/health/%252e%252e/hello",  # double-encoded: decoded once by the server, once more behind it
    "/health/%252E%252e/hello",
    "/health/%25252e%25252e/hello",  # triple
    "/health/..\\hello",  # IIS and others read a backslash as a slash
    "/health/..%5chello",
    "/health/..%5Chello",
    "/health/%2e%2e%5chello",
    "/health/%255c..%255chello",
    "/health/..%2fhello",
    "/health/%2e%2e%252fhello",
    "/health/%u002e%u002e/hello",  # IIS's %u encoding
    "/health/%c0%ae%c0%ae/hello",  # overlong UTF-8
    "/health/%ef%bc%8e%ef%bc%8e/hello",  # full-width dots (U+FF0E), NFKC-normalized to '..'
    "/health/..%20/hello",  # Windows trims trailing blanks and dots
    "/health/...;/hello",
    "/health/%2e",
]


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


def with_pid(app: Any) -> Any:
    """The ASGI app ``app`` with the answering process's pid in ``x-pid`` on every response (a
    rejection too). The pid is read per request: gunicorn's ``--preload`` imports the app in the
    master, before the fork."""

    async def pid_app(scope: Any, receive: Any, send: Any) -> None:
        pid_header = (b"x-pid", str(os.getpid()).encode())

        async def send_with_pid(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), pid_header]}
            await send(message)

        await app(scope, receive, send_with_pid)

    return pid_app


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

        def get(_: int) -> httpx.Response:
            # A client per request, not one shared by the threads: with one shared client (and no
            # connection kept alive) a read once failed with EBADF, its socket closed under it.
            with new_connections(self.url) as client:
                response = self.get(client, path, retry=retry)
            time.sleep(pause)
            return response

        with ThreadPoolExecutor(at_once) as pool:
            return list(pool.map(get, range(count)))

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


def command(server: str, app: str, port: int, workers: int, options: Sequence[str] = ()) -> list[str]:
    """The command line of ``server`` ("uvicorn", or gunicorn with uvicorn's worker) serving
    ``app`` ("module:attribute", a module of this directory)."""
    if server == "uvicorn":
        return [
            *(sys.executable, "-m", "uvicorn", app, "--app-dir", str(APP_DIR)),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)),
            *("--log-level", "warning", "--no-access-log", *options),
        ]
    return [
        *(sys.executable, "-m", "gunicorn", app, "--chdir", str(APP_DIR)),
        *("--worker-class", "uvicorn.workers.UvicornWorker", "--workers", str(workers)),
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning", *gunicorn_quiet(), *options),
    ]


def gunicorn_quiet() -> list[str]:
    """gunicorn 25 and later open a control socket in ~/.gunicorn (one path for every server of
    the user): the tests' servers do without it."""
    settings = importlib.import_module("gunicorn.config").Config().settings
    return ["--no-control-socket"] if "control_socket_disable" in settings else []


def app_env(**settings: str) -> dict[str, str]:
    """The environment of a server of an app module of this directory, with the app's settings."""
    return {
        **os.environ,
        **settings,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(APP_DIR), os.environ.get("PYTHONPATH")])),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@contextlib.contextmanager
def serve(
    command_of: Callable[[int], list[str]], env: dict[str, str], tmp_path: Path, *, workers: int, label: str
) -> Iterator[Server]:
    """Runs ``command_of(port)`` on a free port in a session of its own and yields it once
    ``workers`` workers answer ``/pid``; then kills its process group and checks that none of its
    processes is left. Its output goes to ``tmp_path/<label>-<attempt>.log``."""
    started: list[Server] = []
    left: list[int] = []
    try:
        for attempt in range(3):  # a free port, unless another process takes it before the server
            port = free_port()
            log = tmp_path / f"{label}-{attempt}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command_of(port), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            started.append(Server(process, f"http://127.0.0.1:{port}", log))
            if started[-1].wait_for_workers(workers):
                break
        else:
            raise AssertionError(f"no free port in 3 attempts:\n{started[-1].output()}")
        yield started[-1]
    finally:
        for each in started:
            left += stop(each)
    assert not left, f"processes of the server still running: {left}"
