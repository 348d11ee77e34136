"""Requests per second of a trivial Flask view under gunicorn, bare and with permits.flask's global
limit (a per-IP token bucket that never rejects, with and without the RateLimit headers), and with
flask-limiter configured alike when it is installed.

    python benchmarks/bench_wsgi_gunicorn.py [--duration 5] [--rounds 3] [--workers 2]

Each configuration runs as its own gunicorn (sync workers, ``--workers``) on a free loopback port;
``wrk`` (Debian: apt-get install wrk) drives it with 2 threads and 16 connections for ``--duration``
seconds; the configurations alternate for ``--rounds`` rounds and the best round of each is shown,
with its ratio to the bare app's. The load generator shares the machine's CPUs with the server:
compare the ratios, not the figures.
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

APP = """
import os
from flask import Flask

app = Flask(__name__)


@app.get("/")
def index():
    return "ok"


MODE = os.environ["BENCH_MODE"]
if MODE.startswith("permits"):
    import permits
    from permits.flask import RateLimit

    per_ip = permits.PartitionedLimiter.per_key(permits.specs.TokenBucket(10**9, 10**9, 1.0))
    RateLimit(per_ip, headers=MODE == "permits-headers").init_app(app)
elif MODE.startswith("flask-limiter"):
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    Limiter(get_remote_address, app=app, default_limits=["1000000000/second"], storage_uri="memory://",
            headers_enabled=MODE == "flask-limiter-headers")
"""

MODES = ("bare", "permits-headers", "permits-no-headers", "flask-limiter-headers", "flask-limiter-no-headers")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ready(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def run(mode: str, app_dir: Path, args: argparse.Namespace) -> float | str:
    port = free_port()
    env = {**os.environ, "BENCH_MODE": mode}
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "bench_app:app", "--chdir", str(app_dir), "--workers", str(args.workers),
         "--bind", f"127.0.0.1:{port}", "--log-level", "error"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        if not ready(port, time.monotonic() + 20):
            return "did not start: " + (server.stderr.read(300).decode(errors="replace") if server.stderr else "")
        time.sleep(0.5)  # every worker up
        out = subprocess.run(
            ["wrk", "-t2", "-c16", f"-d{args.duration}s", f"http://127.0.0.1:{port}/"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        if "Non-2xx" in out:
            return "rejected requests: " + out.split("Non-2xx")[1].split("\n")[0]
        found = re.search(r"Requests/sec:\s+([0-9.]+)", out)
        return float(found.group(1)) if found else "no result: " + out[-200:]
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    try:
        import flask_limiter  # noqa: F401

        modes = MODES
    except ImportError:
        modes = MODES[:3]
    best: dict[str, float] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        app_dir = Path(folder)
        (app_dir / "bench_app.py").write_text(APP)
        for _ in range(args.rounds):
            for mode in modes:
                if mode in errors:
                    continue
                result = run(mode, app_dir, args)
                if isinstance(result, str):
                    errors[mode] = result
                else:
                    best[mode] = max(best.get(mode, 0.0), result)
    print(f"gunicorn, {args.workers} sync workers, wrk -t2 -c16 -d{args.duration}s, best of {args.rounds} rounds")
    print(f"| {'configuration':<26} | {'requests/s':>11} | {'/ bare':>7} |")
    print(f"|{'-' * 28}|{'-' * 13}:|{'-' * 8}:|")
    for mode in modes:
        if mode in errors:
            print(f"| {mode:<26} | {errors[mode]} |")
        else:
            print(f"| {mode:<26} | {best[mode]:>11,.0f} | {best[mode] / best['bare']:>7.3f} |")


if __name__ == "__main__":
    main()
