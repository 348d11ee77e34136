"""Running the programs of examples/ as a user would: each a child process under a time limit,
the services on a free loopback port in a session of their own, killed as a whole afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: Wall-clock safety nets against hangs, never the thing under test.
LIMIT = 90.0
STARTUP = 30.0
#: What the interpreter prints for a leak in development mode (-X dev): a lease or socket collected
#: unreleased, a task destroyed while pending, a coroutine never awaited.
LEAKS = ("ResourceWarning", "Task was destroyed", "was never awaited", "Exception ignored")


def command(example: str, *args: str) -> list[str]:
    """The command line running ``examples/<example>`` in development mode, where a
    ResourceWarning is an error."""
    return [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", str(EXAMPLES / example), *args]


def check_clean(returncode: int, stdout: str, stderr: str) -> None:
    assert returncode == 0, f"exit status {returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    leaks = [line for line in stderr.splitlines() if any(marker in line for marker in LEAKS)]
    assert not leaks, stderr


def run(example: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Runs a program to its end (it must exit 0 and leak nothing); its output."""
    done = subprocess.run(
        command(example, *args), capture_output=True, text=True, timeout=LIMIT, env={**os.environ, **(env or {})}
    )
    check_clean(done.returncode, done.stdout, done.stderr)
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Service:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    #: The pids that answered the readiness probe (a service's /health names its pid).
    pids: set[int] = field(default_factory=set)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def new_connections(url: str) -> httpx.Client:
    """A client that opens a new connection for every request, so that the kernel spreads them
    over a service's worker processes."""
    return httpx.Client(base_url=url, timeout=20, limits=httpx.Limits(max_keepalive_connections=0))


def _ready(service: Service, workers: int) -> bool:
    """Polls ``/health`` until ``workers`` pids answered (1: until it answers); False when the
    service exited because another process took its port meanwhile."""
    deadline = time.monotonic() + STARTUP
    with new_connections(service.url) as client:
        while True:
            if service.process.poll() is not None:
                if "in use" in service.output():
                    return False
                raise AssertionError(f"the service exited ({service.process.returncode}):\n{service.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready within {STARTUP} s:\n{service.output()}")
            try:
                answer = client.get("/health")
            except httpx.TransportError:
                answer = None  # not listening yet
            if answer is not None and answer.status_code == 200:
                pid = answer.json().get("pid")
                service.pids.add(pid if isinstance(pid, int) else service.process.pid)
                if len(service.pids) >= workers:
                    return True
            time.sleep(0.02)


def _stop(service: Service) -> None:
    """SIGTERM to the service's process group (a supervisor and its workers), SIGKILL to what is
    left after 10 s; fails if any of its processes outlives that."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.process.pid, signal.SIGTERM)
    try:
        service.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.process.pid, signal.SIGKILL)
        service.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in service.pids - {service.process.pid}):
        assert time.monotonic() < deadline, f"workers still running: {service.pids}"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextlib.contextmanager
def serving(
    example: str, *args: str, tmp_path: Path, env: dict[str, str] | None = None, workers: int = 1
) -> Iterator[Service]:
    """``examples/<example> --port <free port> *args`` in a session of its own; yields it once
    ``workers`` processes answer ``/health``, then stops it."""
    started: list[Service] = []
    try:
        for attempt in range(3):  # a free port, unless another process takes it first
            port = free_port()
            log = tmp_path / f"{Path(example).stem}-{attempt}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command(example, "--port", str(port), *args),
                    env={**os.environ, **(env or {})},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append(Service(process, f"http://127.0.0.1:{port}", log))
            if _ready(started[-1], workers):
                break
        else:
            raise AssertionError(f"no free port in 3 attempts:\n{started[-1].output()}")
        yield started[-1]
    finally:
        for service in started:
            _stop(service)
