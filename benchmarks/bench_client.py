"""An httpx AsyncClient paced by ``permits.httpx.AsyncRateLimitedTransport`` against a local server.

    python benchmarks/bench_client.py [--rate 1000] [--duration 3] [--workers 50] [--json FILE]

The server (aiohttp.web, answering ``GET /`` with "ok") runs in a child process on a free
loopback port, so the CPU time measured is the client's alone. Three cases, each for
``--duration`` seconds with ``--workers`` tasks sending requests one after another on one
``httpx.AsyncClient``:

- bare: the plain ``httpx.AsyncHTTPTransport``, unpaced (as fast as the client and server go);
- no limit: the same inside ``AsyncRateLimitedTransport(permits.NoLimiter())``: what the
  transport itself costs per request;
- paced: ``AsyncRateLimitedTransport`` over ``TokenBucketLimiter`` at ``--rate`` requests a
  second (a bucket of 1/100 s worth of requests, refilled every 10 ms; the workers queue in it).

Then the transport's own cost without any network: ``--overhead`` requests (default 5,000) one
after another through ``httpx.MockTransport`` bare and inside ``AsyncRateLimitedTransport`` over
a ``NoLimiter`` and over a never-binding ``TokenBucketLimiter``; CPU time per request (best of 3).

For each: requests completed, the achieved rate (requests / wall time) and, for the paced case,
its ratio to the target; process CPU time (``time.process_time()``: every thread of the client
process, the engine's included) per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx

import permits
from permits.httpx import AsyncRateLimitedTransport


def serve() -> None:
    """The child process: prints its port, serves until stdin closes."""
    from aiohttp import web

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", ok)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(main())


async def run_case(transport: httpx.AsyncBaseTransport, url: str, workers: int, duration: float) -> dict[str, float]:
    done = 0
    stop = False

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done
        while not stop:
            response = await client.get(url)
            assert response.status_code == 200
            done += 1

    async with httpx.AsyncClient(transport=transport, limits=httpx.Limits(max_connections=workers)) as client:
        await client.get(url)  # a connection made before the clock starts
        cpu0, wall0 = time.process_time(), time.perf_counter()
        tasks = [asyncio.create_task(worker(client)) for _ in range(workers)]
        await asyncio.sleep(duration)
        stop = True
        await asyncio.gather(*tasks)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"requests": done, "seconds": wall, "rate": done / wall, "cpu_us_per_request": cpu / done * 1e6}


async def measure(url: str, rate: int, workers: int, duration: float) -> dict[str, dict[str, float]]:
    per_period = max(1, rate // 100)
    paced = permits.TokenBucketLimiter(per_period, per_period, per_period / rate, queue_limit=workers)
    cases = {
        "bare": httpx.AsyncHTTPTransport(),
        "no limit": AsyncRateLimitedTransport(permits.NoLimiter()),
        f"paced at {rate}/s": AsyncRateLimitedTransport(paced),
    }
    return {name: await run_case(transport, url, workers, duration) for name, transport in cases.items()}


async def overhead(n: int) -> dict[str, float]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="ok")

    def cases() -> dict[str, httpx.AsyncBaseTransport]:
        big = permits.TokenBucketLimiter(2**31 - 1, 2**31 - 1, 1.0)
        return {
            "mock, bare": httpx.MockTransport(answer),
            "mock, no limit": AsyncRateLimitedTransport(permits.NoLimiter(), transport=httpx.MockTransport(answer)),
            "mock, token bucket": AsyncRateLimitedTransport(big, transport=httpx.MockTransport(answer)),
        }

    best: dict[str, float] = {}
    for _ in range(3):
        for name, transport in cases().items():
            async with httpx.AsyncClient(transport=transport) as client:
                cpu0 = time.process_time()
                for _ in range(n):
                    await client.get("http://example.com/")
                per = (time.process_time() - cpu0) / n * 1e6
            best[name] = min(best.get(name, per), per)
    return best


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="the paced case's target, requests a second")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per case (default 3)")
    parser.add_argument("--workers", type=int, default=50, help="tasks sending requests (default 50)")
    parser.add_argument("--overhead", type=int, default=5000, help="requests per mock case (default 5,000)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return {}
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        results = asyncio.run(measure(f"http://127.0.0.1:{port}/", args.rate, args.workers, args.duration))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(10)
    bare = results["bare"]["cpu_us_per_request"]
    print(f"{'case':<18} {'requests':>9} {'rate/s':>9} {'vs target':>9} {'CPU µs/req':>11} {'vs bare':>8}")
    for name, r in results.items():
        target = f"{r['rate'] / args.rate:.3f}" if name.startswith("paced") else ""
        print(
            f"{name:<18} {r['requests']:>9,.0f} {r['rate']:>9,.1f} {target:>9}"
            f" {r['cpu_us_per_request']:>11,.1f} {r['cpu_us_per_request'] / bare:>8.2f}"
        )
    costs = asyncio.run(overhead(args.overhead))
    print(f"\n{'no network':<22} {'CPU µs/req':>11}")
    for name, per in costs.items():
        print(f"{name:<22} {per:>11,.1f}")
    report = {"rate": args.rate, "duration": args.duration, "workers": args.workers, "cases": results}
    report["overhead"] = costs
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return report


if __name__ == "__main__":
    main()
