"""Real Redis servers for the store tests: redis-server processes on free loopback ports, each in a
temporary directory removed when it stops.

* ``redis_server`` (session): one server.
* ``redis_cluster`` (session): three masters, no replicas, all slots assigned.
* ``redis_sentinel`` (session): a master and one sentinel watching it (service ``mymaster``).
* ``own_redis`` (function): a server of the test's own, which it may kill (SIGKILL), restart on the
  same port, or stop and continue (SIGSTOP/SIGCONT).
* ``redis_replicated`` (function): a master and one replica of it (``--replicaof``), linked; the test
  may pause and resume the replica.

Without redis-server (or redis-cli), the fixtures skip, saying how to install them; with the
environment variable CI=true they fail instead (CI must run every test).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.sentinel

__all__ = [
    "RedisCluster",
    "RedisProcess",
    "RedisReplicated",
    "RedisSentinel",
    "own_redis",
    "redis_cluster",
    "redis_replicated",
    "redis_sentinel",
    "redis_server",
]

HOST = "127.0.0.1"
_READY_S = 15.0  # how long a server may take to answer its first PING


def require_redis() -> None:
    """Skips (fails under CI=true) unless redis-server and redis-cli are installed."""
    missing = [tool for tool in ("redis-server", "redis-cli") if shutil.which(tool) is None]
    if missing:
        message = f"{' and '.join(missing)} not found: install Redis (Debian/Ubuntu: apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A loopback port nobody listens on now; ``with_bus``: port + 10000 too (a Cluster node's bus)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if not with_bus or (port + 10000 <= 65535 and _bindable(port + 10000)):
            return port
    raise RuntimeError("no free loopback port found")


class RedisProcess:
    """One redis-server in a directory of its own, on a port it keeps across restarts."""

    def __init__(self, directory: Path, args: list[str], *, with_bus: bool = False, config: str | None = None) -> None:
        self.host = HOST
        self.port = 0
        self.directory = directory
        self._args = args
        self._with_bus = with_bus
        self._config = config  # a config file's text ({port} filled in): sentinels rewrite theirs
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = directory / "server.log"
        self.paused = False

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        """Starts on a free port (a few tries: another process may take the port first)."""
        for _ in range(5):
            self.port = free_port(with_bus=self._with_bus)
            if self._launch():
                return
        raise RuntimeError(f"redis-server did not start: {self._log_tail()}")

    def restart(self) -> None:
        """Starts again on the same port (after kill() or stop())."""
        if self._proc is not None and self._proc.poll() is None:
            self.kill()
        if not self._launch():
            raise RuntimeError(f"redis-server did not restart on port {self.port}: {self._log_tail()}")

    def _command(self) -> list[str]:
        common = ["--port", str(self.port), "--bind", self.host, "--dir", str(self.directory)]
        if self._config is not None:
            path = self.directory / "redis.conf"
            path.write_text(self._config.format(port=self.port, dir=self.directory))
            return ["redis-server", str(path), *common, *self._args]
        return ["redis-server", *common, "--save", "", "--appendonly", "no", *self._args]

    def _launch(self) -> bool:
        log = self._log.open("ab")
        try:
            self._proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.paused = False
        deadline = time.monotonic() + _READY_S
        probe = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    return False  # exited: most likely the port was taken meanwhile
                try:
                    if probe.ping():
                        return True
                except redis.exceptions.RedisError:
                    time.sleep(0.05)
        finally:
            probe.close()
        self.kill()
        return False

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing saved, connections reset."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the server hangs; the kernel still accepts connections and buffers requests."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        if self.paused:
            self.resume()
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.Redis:
        return redis.asyncio.Redis(host=self.host, port=self.port, **kwargs)


@contextlib.contextmanager
def _directory(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _server(prefix: str, args: list[str] | None = None) -> Iterator[RedisProcess]:
    require_redis()
    with _directory(prefix) as directory:
        server = RedisProcess(directory, args or [])
        server.start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    """One redis-server for the session: tests share it, each under a key prefix of its own."""
    with _server("permits-redis-") as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisProcess]:
    """A redis-server for this test alone: it may kill, restart, pause and resume it."""
    with _server("permits-own-redis-") as server:
        yield server


class RedisReplicated:
    """A master and one replica of it."""

    def __init__(self, master: RedisProcess, replica: RedisProcess) -> None:
        self.master = master
        self.replica = replica


def _linked(master: RedisProcess) -> bool:
    with master.client(socket_timeout=1.0) as client:
        info = client.info("replication")
    return int(info.get("connected_slaves", 0)) == 1 and info.get("slave0", {}).get("state") == "online"


@pytest.fixture
def redis_replicated() -> Iterator[RedisReplicated]:
    require_redis()
    with _directory("permits-redis-replicated-") as directory:
        (directory / "master").mkdir()
        (directory / "replica").mkdir()
        # (no wait for more replicas before the first sync: Redis 7's master waits 5 s by default)
        master = RedisProcess(directory / "master", ["--repl-diskless-sync-delay", "0"])
        replica: RedisProcess | None = None
        try:
            master.start()
            replica = RedisProcess(directory / "replica", ["--replicaof", master.host, str(master.port)])
            replica.start()
            deadline = time.monotonic() + 30
            while not _linked(master):
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not come online within 30 s")
                time.sleep(0.05)
            yield RedisReplicated(master, replica)
        finally:
            if replica is not None:
                replica.stop()  # (resumed first if paused)
            master.stop()


class RedisCluster:
    """Three Cluster masters on loopback (all 16384 slots), no replicas."""

    def __init__(self, nodes: list[RedisProcess]) -> None:
        self.nodes = nodes
        self.host = nodes[0].host
        self.port = nodes[0].port

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host=self.host, port=self.port, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.cluster.RedisCluster:
        return redis.asyncio.cluster.RedisCluster(host=self.host, port=self.port, **kwargs)


def _cluster_ok(nodes: list[RedisProcess]) -> bool:
    for node in nodes:
        with node.client(socket_timeout=1.0) as client:
            if client.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
                return False
    return True


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    require_redis()
    with _directory("permits-redis-cluster-") as directory:
        nodes: list[RedisProcess] = []
        try:
            for i in range(3):
                node_dir = directory / f"node{i}"
                node_dir.mkdir()
                args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
                args += ["--cluster-node-timeout", "5000"]
                node = RedisProcess(node_dir, args, with_bus=True)
                node.start()
                nodes.append(node)
            addresses = [f"{node.host}:{node.port}" for node in nodes]
            subprocess.run(
                ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            deadline = time.monotonic() + 30
            while not _cluster_ok(nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok within 30 s")
                time.sleep(0.1)
            yield RedisCluster(nodes)
        finally:
            for node in nodes:
                node.stop()


class RedisSentinel:
    """A master and one sentinel watching it as ``service_name``."""

    service_name = "mymaster"

    def __init__(self, master: RedisProcess, sentinel: RedisProcess) -> None:
        self.master = master
        self.sentinel_process = sentinel
        self.host = sentinel.host
        self.port = sentinel.port

    def sentinel(self, **kwargs: Any) -> redis.sentinel.Sentinel:
        return redis.sentinel.Sentinel([(self.host, self.port)], **kwargs)


_SENTINEL_CONF = """port {{port}}
bind 127.0.0.1
dir {{dir}}
sentinel monitor mymaster 127.0.0.1 {master_port} 1
sentinel down-after-milliseconds mymaster 5000
"""


def _watching(watched: RedisSentinel) -> bool:
    try:
        address = watched.sentinel(socket_timeout=1.0).discover_master(watched.service_name)
    except redis.exceptions.RedisError:
        return False
    return tuple(address) == (watched.master.host, watched.master.port)


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    require_redis()
    with _directory("permits-redis-sentinel-") as directory:
        (directory / "master").mkdir()
        (directory / "sentinel").mkdir()
        # (no wait for more replicas before the first sync: Redis 7's master waits 5 s by default)
        master = RedisProcess(directory / "master", ["--repl-diskless-sync-delay", "0"])
        sentinel: RedisProcess | None = None
        try:
            master.start()
            conf = _SENTINEL_CONF.format(master_port=master.port)
            sentinel = RedisProcess(directory / "sentinel", ["--sentinel"], config=conf)
            sentinel.start()
            watched = RedisSentinel(master, sentinel)
            deadline = time.monotonic() + 30
            while not _watching(watched):
                if time.monotonic() > deadline:
                    raise RuntimeError("the sentinel did not report its master within 30 s")
                time.sleep(0.1)
            yield watched
        finally:
            if sentinel is not None:
                sentinel.stop()
            master.stop()
