"""One rate limit shared by several processes (or hosts) through Redis.

``--processes`` worker processes (default 3) each try to run ``--jobs`` jobs (default 10). Every
job first takes a permit from a limiter whose state is in Redis (``permits.redis.RedisStore``),
so all of them together run at most ``--limit`` jobs (default ``12/minute``); the jobs refused are
deferred, with the time the limiter says a permit comes back. Other programs (on other hosts)
that make a limiter of the same name, on the same server and prefix, share the same limit: run it
twice within the minute and the second run finds the limit spent.

Run it (``pip install "permits[redis]"``; a Redis server at ``REDIS_URL``)::

    REDIS_URL=redis://localhost:6379/0 python examples/redis_across_processes.py --processes 3 --limit 12/minute

The settings can also come from the environment: ``REDIS_URL``, ``REDIS_PREFIX``, ``JOB_LIMIT``.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor

# redis-py is an optional extra: --help works without it, and a run says what to install.
try:
    import redis

    from permits.redis import RedisStore
except ModuleNotFoundError as error:
    MISSING: ModuleNotFoundError | None = error
else:
    MISSING = None


def worker(url: str, prefix: str, limit: str, jobs: int) -> tuple[int, int, int, float | None]:
    """Runs in a process of its own, with its own connection: (pid, jobs run, jobs deferred,
    seconds until the next permit when some were deferred)."""
    with RedisStore(redis.Redis.from_url(url), prefix=prefix) as store:
        limiter = store.limiter("jobs", limit)  # the same name everywhere: one limit
        ran, retry_after = 0, None
        for _ in range(jobs):
            lease = limiter.acquire()
            if lease:
                ran += 1  # the job itself would run here
            else:
                retry_after = lease.retry_after
        return os.getpid(), ran, jobs - ran, retry_after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--prefix", default=os.environ.get("REDIS_PREFIX", "permits-example:"))
    parser.add_argument("--limit", default=os.environ.get("JOB_LIMIT", "12/minute"), help="e.g. 12/minute")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10, help="jobs per process")
    args = parser.parse_args()
    if MISSING is not None:
        parser.exit(1, f'{parser.prog}: {MISSING.name} is not installed: pip install "permits[redis]"\n')

    with ProcessPoolExecutor(args.processes) as pool:
        futures = [
            pool.submit(worker, args.redis_url, args.prefix, args.limit, args.jobs) for _ in range(args.processes)
        ]
        results = [future.result() for future in futures]
    for pid, ran, deferred, retry_after in results:
        later = f", next permit in {retry_after:.1f} s" if retry_after is not None else ""
        print(f"process {pid}: ran {ran}, deferred {deferred}{later}")
    total = sum(ran for _, ran, _, _ in results)
    print(f"ran {total} of {args.processes * args.jobs} jobs (limit {args.limit})")


if __name__ == "__main__":
    main()
