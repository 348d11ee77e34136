"""An async scraper that stays inside a site's rate limit.

It fetches ``--pages`` pages, ``<base-url>/page/1`` to ``<base-url>/page/N``, all at once with
httpx; a client-side limiter lets at most ``--rate`` requests (default ``5/second``) go to each
host, in *any* window of that length (the site counts them as they arrive, a little later: to be
sure of its count, pace with a margin, docs/clients.md, "What a server sees"). When the site
still answers ``429 Too Many Requests`` (or ``503``) with ``Retry-After``, every request to that
host pauses for that long and the refused request is sent again (up to ``--max-retries`` times).

Run it (``pip install "permits[httpx]"``) against a site that allows you 5 requests a second:
``sample_site.py`` is one, on your own machine (start it first, in another shell)::

    python examples/sample_site.py --port 8001 --limit 5/second
    python examples/async_scraper.py --base-url http://127.0.0.1:8001 --pages 20 --rate 5/second

The settings can also come from the environment: ``BASE_URL``, ``PAGES``, ``RATE``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

# httpx is an optional extra: --help works without it, and a run says what to install.
try:
    import httpx

    import permits
    from permits.httpx import AsyncRateLimitedTransport
except ModuleNotFoundError as error:
    MISSING: ModuleNotFoundError | None = error
else:
    MISSING = None


async def fetch(client: httpx.AsyncClient, url: str) -> tuple[str, int, int]:
    response = await client.get(url)
    return url, response.status_code, len(response.content)


async def scrape(base_url: str, pages: int, rate: str, max_retries: int) -> int:
    # One limit per host (the transport's default key): "5/second" never takes a 6th permit within
    # one second, however the second is counted; a request is counted once it has its connection.
    per_host = permits.PartitionedLimiter.per_key(rate)
    transport = AsyncRateLimitedTransport(per_host, max_retries=max_retries)
    started = time.monotonic()
    async with httpx.AsyncClient(transport=transport, timeout=30.0) as client:
        urls = [f"{base_url.rstrip('/')}/page/{n}" for n in range(1, pages + 1)]
        results = await asyncio.gather(*(fetch(client, url) for url in urls))
    for url, status, size in results:
        print(f"{url}: {status} ({size} bytes)")
    failed = sum(1 for _, status, _ in results if status != 200)
    print(f"fetched {pages - failed} of {pages} pages in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=os.environ.get("BASE_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--pages", type=int, default=int(os.environ.get("PAGES", "20")))
    parser.add_argument("--rate", default=os.environ.get("RATE", "5/second"), help="requests per host, e.g. 5/second")
    parser.add_argument("--max-retries", type=int, default=3, help="retries of a page answered 429 or 503")
    args = parser.parse_args()
    if MISSING is not None:
        parser.exit(1, f'{parser.prog}: {MISSING.name} is not installed: pip install "permits[httpx]"\n')
    raise SystemExit(asyncio.run(scrape(args.base_url, args.pages, args.rate, args.max_retries)))


if __name__ == "__main__":
    main()
