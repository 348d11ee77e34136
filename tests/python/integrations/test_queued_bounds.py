"""Requests queued with ``wait=True`` against a real server in a child process (uvicorn with the
ASGI middleware or the FastAPI dependency, aiohttp): large uploads do not grow the server's memory
(its resident size measured), and an outer middleware whose receive() never suspends does not make
the server spin or freeze (each test under a time limit; the child under CPU and memory limits)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

SERVER = Path(__file__).with_name("_child_server.py")
UPLOAD = 120 * 1024 * 1024
#: How much the three queued uploads may add to the server's memory: a fraction of one
#: upload (before the bound, they added all of theirs: 360 MB).
MEMORY_ALLOWED_KIB = 24 * 1024


@pytest.fixture
def child_server(request: pytest.FixtureRequest) -> Iterator[str]:
    server = subprocess.Popen([sys.executable, str(SERVER), request.param], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def probe(client: httpx.Client, what: str) -> int:
    return int(client.get(f"/_probe/{what}").text)


def until(condition: object, client: httpx.Client) -> None:
    while not condition(client):  # type: ignore[operator]
        time.sleep(0.01)  # polling a child process; the test's timeout bounds it


class Upload:
    """A raw-socket POST of UPLOAD bytes, sent from a thread as fast as the server reads it."""

    def __init__(self, url: str, *, expect: bool) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.sendall(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            + (b"Expect: 100-continue\r\n" if expect else b"")
            + b"Content-Length: %d\r\n\r\n" % UPLOAD
        )
        self.expect = expect
        self.continued = False
        self.sent = 0
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        chunk = b"x" * (1 << 20)
        try:
            if self.expect:  # as curl does for a large upload: the body only after "100 Continue"
                answer = b""
                while b"\r\n\r\n" not in answer:
                    answer += self.sock.recv(1024)
                if not answer.startswith(b"HTTP/1.1 100"):
                    return  # (the test sees `continued` False)
                self.continued = True
            while self.sent < UPLOAD:
                self.sock.sendall(chunk)
                self.sent += len(chunk)
        except OSError:
            pass  # closed by the test

    def close(self) -> None:
        self.sock.close()


def settled(uploads: list[Upload]) -> None:
    """Waits until every upload is sent in full or none has moved for a second (the server stopped
    reading): a wait for a state, never what the test asserts."""
    last = [-1] * len(uploads)
    still = 0.0
    while still < 1.0 and any(u.sent < UPLOAD for u in uploads):
        now = [u.sent for u in uploads]
        still = still + 0.1 if now == last else 0.0
        last = now
        time.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("expect", [False, True], ids=["body", "expect-100-continue"])
@pytest.mark.parametrize("child_server", ["asgi", "fastapi", "aiohttp"], indirect=True)
def test_three_queued_uploads_do_not_grow_the_servers_memory(child_server: str, expect: bool) -> None:
    with httpx.Client(base_url=child_server, timeout=30) as client:
        assert client.get("/upload").text == "0"  # takes the only permit: the uploads queue
        before = probe(client, "rss")
        uploads = [Upload(child_server, expect=expect) for _ in range(3)]
        try:
            until(lambda c: probe(c, "queued") == 3, client)
            settled(uploads)
            grown = probe(client, "rss") - before
            sent = [u.sent for u in uploads]
            assert probe(client, "queued") == 3
        finally:
            for upload in uploads:
                upload.close()
    print(f"RSS grew by {grown / 1024:.1f} MiB; sent {[s // (1 << 20) for s in sent]} MiB")
    assert all(u.continued == expect for u in uploads)  # invited to send, the clients did send
    assert all(s < UPLOAD for s in sent)  # the server stopped reading: the rest waits in the clients
    assert grown < MEMORY_ALLOWED_KIB


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "child_server",
    ["asgi-replay", "asgi-replay-yielding", "fastapi-replay", "fastapi-replay-yielding"],
    indirect=True,
)
def test_a_receive_that_never_suspends_does_not_make_the_watcher_spin(child_server: str) -> None:
    # A frozen server does not answer the probes: the client's timeout fails the test.
    with httpx.Client(base_url=child_server, timeout=10) as client:
        assert client.get("/upload").text == "0"
        with httpx.Client(base_url=child_server, timeout=None) as waiting:

            def post() -> None:
                with contextlib.suppress(httpx.HTTPError):  # the server is killed with the request queued
                    waiting.post("/upload", content=b"body")

            queued = threading.Thread(target=post, daemon=True)
            queued.start()
            until(lambda c: probe(c, "queued") == 1, client)
            first = probe(client, "receives")
            assert probe(client, "queued") == 1  # a round trip later
            assert probe(client, "receives") == first  # the watcher stopped calling receive()
            assert first <= 3  # the replay's one read, and the watcher's two (it sees the replay)
