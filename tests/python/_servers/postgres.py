"""PostgreSQL servers for the tests: ``postgres_server`` (one per session) and ``own_postgres`` (one
per test, which the test may kill, restart on the same port, stop and continue).

Each is a fresh cluster (initdb) in a temporary directory, trust authentication on 127.0.0.1 and
its unix socket in that directory. PostgreSQL refuses to run as root: as root, the cluster belongs
to ``nobody``. SIGKILL / SIGSTOP go to the postmaster and each of its children (every backend is a
session of its own), so a stopped server is hung as a whole, not just its listener.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import psycopg
import pytest

__all__ = ["PostgresServer", "own_postgres", "postgres_server"]

_START_TIMEOUT = 60.0


def _bin_dir() -> str | None:
    """The newest PostgreSQL's binaries: Debian keeps them off PATH, under /usr/lib/postgresql/N/bin."""
    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(os.path.join(d, "initdb"))]
    if found:
        return max(found, key=lambda d: [int(x) for x in re.findall(r"\d+", d)])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _need_bin_dir() -> str:
    found = _bin_dir()
    if found is None:
        message = "PostgreSQL server binaries (initdb, postgres) not found: apt-get install postgresql"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A cluster of its own: ``conninfo``, ``connect()``, and for the tests that need them
    ``kill()``, ``start()`` (same port and data), ``pause()`` (SIGSTOP) and ``resume()`` (SIGCONT)."""

    def __init__(self, bin_dir: str) -> None:
        self._bin = bin_dir
        self.dir = tempfile.mkdtemp(prefix="permits-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        # As root the cluster belongs to nobody (PostgreSQL refuses root); otherwise to ourselves.
        self._user: int | None = None
        self._group: int | None = None
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._user, self._group = nobody.pw_uid, nobody.pw_gid
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
        try:
            self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
            self.start()
        except BaseException:
            self.cleanup()
            raise

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [os.path.join(self._bin, tool), *args],
            capture_output=True,
            user=self._user,
            group=self._group,
            extra_groups=[] if self._user is not None else None,
            cwd=self.dir,
            timeout=_START_TIMEOUT,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stderr.decode(errors='replace')}")

    def start(self) -> None:
        """Starts the server (again) on its port and data directory, and waits until it answers."""
        assert self._proc is None, "already running"
        log = open(os.path.join(self.dir, "server.log"), "ab")  # noqa: SIM115 (the child keeps it)
        if self._user is not None:
            os.chown(log.name, self._user, self._group or -1)
        self._proc = subprocess.Popen(
            [
                os.path.join(self._bin, "postgres"),
                "-D",
                self.data,
                "-p",
                str(self.port),
                "-k",
                self.dir,
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=log,
            user=self._user,
            group=self._group,
            extra_groups=[] if self._user is not None else None,
            cwd=self.dir,
            start_new_session=True,  # not in pytest's group: a Ctrl-C is not the server's
        )
        log.close()
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            try:
                with psycopg.connect(self.conninfo, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self._proc = None
                    raise RuntimeError(f"postgres did not start: see {self.dir}/server.log") from None
                time.sleep(0.05)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.conninfo, autocommit=True)

    def _pids(self) -> list[int]:
        """The postmaster, then its children (each backend is a session of its own: setsid)."""
        assert self._proc is not None, "not running"
        postmaster = self._proc.pid
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue  # gone meanwhile
                if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                    children.append(int(entry))
        return [postmaster, *children]

    def _signal(self, sig: int, pids: list[int] | None = None) -> None:
        for pid in self._pids() if pids is None else pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL to the postmaster and every backend; returns once the postmaster is gone."""
        pids = self._pids()  # before the kill: orphans would have another parent
        self._signal(signal.SIGKILL, pids)
        assert self._proc is not None
        self._proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        for pid in pids[1:]:  # the children too are gone (reaped by init) before the server starts again
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.01)
        self._proc = None
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP to every process of the server: connections are accepted by the kernel, never answered."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT, self._pids()[::-1])  # the children first, the postmaster last
        self._paused = False

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._paused:
            self.resume()
        self._proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait(timeout=30)
        self._proc = None

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer(_need_bin_dir())
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(_need_bin_dir())
    try:
        yield server
    finally:
        server.cleanup()
