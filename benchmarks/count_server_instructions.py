"""Instructions a real server spends per request, bare and behind permits, counted by callgrind.

    python benchmarks/count_server_instructions.py [--seconds 5] [--server uvicorn-h11 ...]

End to end, in instructions rather than seconds: on a shared or virtual machine, requests per
second under wrk vary by 10-15 % from one run to the next, more than the middleware costs, while
the instructions a server process executes per request repeat to 0.1 %. Each configuration runs
as its own server on a free loopback port, under ``valgrind --tool=callgrind`` with instrumentation
off until it is warm; then ``wrk`` (one connection) loads it for ``--seconds`` and the instructions
the serving process executed in that time are divided by the requests wrk completed. Servers:

- ``uvicorn-h11`` / ``uvicorn-httptools``: the FastAPI app of ``bench_middleware.py`` (bare,
  ``permits.asgi.RateLimitMiddleware`` per IP with and without the ``RateLimit`` headers, keyed by
  an ``X-Api-Key`` header), under uvicorn with its pure-Python HTTP parser (h11) or with httptools
  (``uvicorn[standard]``; skipped when httptools is not installed);
- ``gunicorn``: the Flask view of ``bench_wsgi_gunicorn.py`` (bare, ``permits.flask.RateLimit``
  with and without the headers, and flask-limiter alike when installed), one sync worker.

The ratio bare / with the middleware is the throughput a CPU-bound server keeps (goal: 0.97).
Needs valgrind and wrk (Debian: apt-get install valgrind wrk).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_wsgi_gunicorn import APP, MODES  # noqa: E402

UVICORN_CASES = (
    "bare",
    "permits RateLimitMiddleware, headers",
    "permits RateLimitMiddleware, no headers",
    "permits RateLimitMiddleware, X-Api-Key key, headers",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wrk(port: int, seconds: int) -> str:
    return subprocess.run(
        ["wrk", "-t1", "-c1", f"-d{seconds}s", "-H", "X-Api-Key: key-7", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def serving_pid(server: subprocess.Popen[bytes], forks: bool, deadline: float) -> int:
    """The process that serves: the server itself, or its one worker (a fork, under gunicorn)."""
    while forks and time.monotonic() < deadline:
        children = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
        if children:
            return int(children[0])
        time.sleep(0.2)
    if forks:
        raise RuntimeError("the server started no worker")
    return server.pid


def count(command: list[str], env: dict[str, str], port: int, forks: bool, seconds: int) -> tuple[int, int]:
    """(instructions, requests) of the serving process under ``seconds`` of wrk's load."""
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes",
             f"--callgrind-out-file={folder}/cg.%p", *command],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while True:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"the server did not start: {' '.join(command)}")
                time.sleep(0.2)
            pid = serving_pid(server, forks, deadline)
            wrk(port, 2)  # warm, uninstrumented
            control = ["callgrind_control"]
            subprocess.run([*control, "-i", "on", str(pid)], check=True, capture_output=True)
            wrk(port, 2)  # warm, instrumented (what the first instrumented requests translate)
            subprocess.run([*control, "-z", str(pid)], check=True, capture_output=True)
            out = wrk(port, seconds)
            subprocess.run([*control, "-d", str(pid)], check=True, capture_output=True)
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        if "Non-2xx" in out or "Socket errors" in out:
            raise RuntimeError("wrk saw failed requests: " + out[-300:])
        found = re.search(r"(\d+) requests in", out)
        dumps = sorted(Path(folder).glob(f"cg.{pid}.*"))
        if found is None or not dumps:
            raise RuntimeError("no count: " + out[-300:])
        totals = re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.MULTILINE)
        if totals is None:
            raise RuntimeError(f"no total in {dumps[-1].name}")
        return int(totals.group(1)), int(found.group(1))


def uvicorn(http: str, seconds: int) -> list[tuple[str, float]]:
    rows = []
    for case in UVICORN_CASES:
        port = free_port()
        command = [sys.executable, str(HERE / "bench_middleware.py"), "--serve", case, "--port", str(port)]
        instructions, requests = count([*command, "--http", http], dict(os.environ), port, False, seconds)
        rows.append((case, instructions / requests))
    return rows


def gunicorn(seconds: int, app_dir: Path) -> list[tuple[str, float]]:
    try:
        import flask_limiter  # noqa: F401

        modes = MODES
    except ImportError:
        modes = MODES[:3]
    rows = []
    for mode in modes:
        port = free_port()
        command = [sys.executable, "-m", "gunicorn", "bench_app:app", "--chdir", str(app_dir), "--workers", "1",
                   "--timeout", "600", "--bind", f"127.0.0.1:{port}", "--log-level", "error"]  # fmt: skip
        instructions, requests = count(command, {**os.environ, "BENCH_MODE": mode}, port, True, seconds)
        rows.append((mode, instructions / requests))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5, help="seconds of wrk's load, counted")
    parser.add_argument("--server", action="append", choices=["uvicorn-h11", "uvicorn-httptools", "gunicorn"])
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install valgrind wrk)")
    servers = args.server or ["uvicorn-h11", "uvicorn-httptools", "gunicorn"]
    try:
        import httptools  # noqa: F401
    except ImportError:
        if "uvicorn-httptools" in servers:
            print("(uvicorn-httptools skipped: httptools is not installed)\n")
            servers.remove("uvicorn-httptools")
    print(f"python {sys.version.split()[0]}; instructions per request of the serving process\n")
    with tempfile.TemporaryDirectory() as folder:
        app_dir = Path(folder)
        (app_dir / "bench_app.py").write_text(APP)
        for server in servers:
            rows = gunicorn(args.seconds, app_dir) if server == "gunicorn" else uvicorn(server[8:], args.seconds)
            bare = rows[0][1]
            print(f"{server}\n\n| case | instructions/request | added | bare / case |\n|---|---:|---:|---:|")
            for name, per_request in rows:
                print(f"| {name} | {per_request:,.0f} | {per_request - bare:,.0f} | {bare / per_request:.3f} |")
            print()


if __name__ == "__main__":
    main()
