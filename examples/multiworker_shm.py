"""A service run as several uvicorn worker processes that share one rate limit.

Each worker is a process with its own memory: limiters made the usual way would count apart, and
two workers would let twice the limit through. Here the limiter lives in a shared-memory segment
(``permits.shm.SharedMemoryStore``, Linux) that every worker opens by its name, so ``--limit``
(default ``100/minute``) holds for the service as a whole, however the requests are spread.
Each response names the worker (its pid) that answered.

Run it (``pip install "permits[fastapi]" uvicorn``; Linux)::

    python examples/multiworker_shm.py --port 8000 --workers 2 --limit 100/minute
    curl -i http://127.0.0.1:8000/

or with uvicorn's command line: ``uvicorn multiworker_shm:create_app --factory --workers 2``.
The segment (``/dev/shm/permits.<name>``) outlives the service, with the limit's state: a restart
does not reset the limit. The settings can also come from the environment: ``HOST``, ``PORT``,
``WORKERS``, and, read by each worker, ``SHM_NAME`` (the segment's name) and ``RATE_LIMIT``.
"""

from __future__ import annotations

import argparse
import os

# FastAPI is an optional extra: --help works without it, and a run says what to install.
try:
    import uvicorn
    from fastapi import FastAPI

    from permits.asgi import RateLimitMiddleware
    from permits.shm import SharedMemoryStore
except ModuleNotFoundError as error:
    MISSING: ModuleNotFoundError | None = error
else:
    MISSING = None


def create_app() -> FastAPI:
    """The app of one worker: each worker process calls it, and opens the same segment."""
    store = SharedMemoryStore(os.environ.get("SHM_NAME", "multiworker-example"))
    limiter = store.limiter("api", os.environ.get("RATE_LIMIT", "100/minute"))

    app = FastAPI(title="permits example")
    app.add_middleware(RateLimitMiddleware, limiter=limiter, exempt=["/health"])

    @app.get("/health")
    async def health() -> dict[str, int]:
        return {"pid": os.getpid()}

    @app.get("/")
    async def hello() -> dict[str, object]:
        return {"hello": "world", "pid": os.getpid()}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "2")))
    parser.add_argument("--limit", help="for the whole service, e.g. 100/minute (default: RATE_LIMIT or 100/minute)")
    parser.add_argument("--shm-name", help="the shared-memory segment (default: SHM_NAME or multiworker-example)")
    args = parser.parse_args()
    if MISSING is not None:
        parser.exit(1, f'{parser.prog}: {MISSING.name} is not installed: pip install "permits[fastapi]" uvicorn\n')
    # The workers are new processes that import this module: they read their settings from the
    # environment they inherit.
    if args.limit:
        os.environ["RATE_LIMIT"] = args.limit
    if args.shm_name:
        os.environ["SHM_NAME"] = args.shm_name
    uvicorn.run(
        "multiworker_shm:create_app",
        factory=True,
        app_dir=os.path.dirname(os.path.abspath(__file__)),
        host=args.host,
        port=args.port,
        workers=args.workers,
    )


if __name__ == "__main__":
    main()
