"""The peers' adapters: the PyPI rate limiters permits is compared with, as benchmark cases.

Each peer is imported only when its cases are made (a missing one raises NotInstalled), so that
importing this module starts no thread (limits and pyrate-limiter do; see bench_acquire.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from _timing import Case, NotInstalled


def _throttled_ok(t: Any) -> Callable[[], bool]:
    return lambda: not t.limit().limited


def _limits_ok(lim: Any, item: Any) -> Callable[[], bool]:
    return lambda: bool(lim.hit(item, "bench"))


def throttled_cases() -> Iterator[Case]:
    try:
        from throttled import MemoryStore, RateLimiterType, Throttled, rate_limiter
    except ImportError as exc:
        raise NotInstalled(f"throttled-py: {exc}") from exc
    huge = 10**12
    for algo in (
        RateLimiterType.TOKEN_BUCKET,
        RateLimiterType.FIXED_WINDOW,
        RateLimiterType.SLIDING_WINDOW,
        RateLimiterType.GCRA,
    ):
        t = Throttled(
            key="bench",
            using=algo.value,
            quota=rate_limiter.per_sec(huge, burst=huge),
            store=MemoryStore(),
        )
        yield Case(
            f"throttled-py {algo.value} .limit() ok",
            "peer",
            "t.limit()",
            {"t": t},
            probe=_throttled_ok(t),
            expect=True,
            note="MemoryStore",
            key=f"throttled_{algo.value}_ok",
        )
    full = Throttled(
        key="bench",
        using=RateLimiterType.TOKEN_BUCKET.value,
        quota=rate_limiter.per_hour(1),
        store=MemoryStore(),
    )
    full.limit()
    yield Case(
        "throttled-py token_bucket .limit() fail",
        "peer",
        "t.limit()",
        {"t": full},
        probe=lambda: not full.limit().limited,
        expect=False,
        note="MemoryStore",
        key="throttled_token_bucket_fail",
    )


def limits_cases() -> Iterator[Case]:
    try:
        from limits import RateLimitItemPerHour, RateLimitItemPerSecond, storage, strategies
    except ImportError as exc:
        raise NotInstalled(f"limits: {exc}") from exc
    huge = RateLimitItemPerSecond(10**12)
    kinds: list[tuple[str, Any, int | None, str]] = [
        ("FixedWindowRateLimiter", strategies.FixedWindowRateLimiter, None, "MemoryStorage"),
        (
            "MovingWindowRateLimiter",
            strategies.MovingWindowRateLimiter,
            2000,
            "MemoryStorage; one list entry per hit in the window, prepended (cost grows "
            "with hits in the window): timed with at most 2,000 entries, reset each repeat",
        ),
    ]
    if hasattr(strategies, "SlidingWindowCounterRateLimiter"):
        kinds.append(
            (
                "SlidingWindowCounterRateLimiter",
                strategies.SlidingWindowCounterRateLimiter,
                None,
                "MemoryStorage",
            )
        )
    for name, cls, max_number, note in kinds:
        store = storage.MemoryStorage()
        lim = cls(store)
        yield Case(
            f"limits {name}.hit() ok",
            "peer",
            "lim.hit(item, 'bench')",
            {"lim": lim, "item": huge, "store": store},
            setup="store.reset()",
            probe=_limits_ok(lim, huge),
            expect=True,
            max_number=max_number,
            note=note,
            key=f"limits_{name}_ok",
        )
    store = storage.MemoryStorage()
    lim = strategies.FixedWindowRateLimiter(store)
    one = RateLimitItemPerHour(1)
    lim.hit(one, "bench")
    yield Case(
        "limits FixedWindowRateLimiter.hit() fail",
        "peer",
        "lim.hit(item, 'bench')",
        {"lim": lim, "item": one},
        probe=lambda: bool(lim.hit(one, "bench")),
        expect=False,
        note="MemoryStorage",
        key="limits_FixedWindowRateLimiter_fail",
    )


def pyrate_cases() -> Iterator[Case]:
    try:
        from pyrate_limiter import Duration, Limiter, Rate
    except ImportError as exc:
        raise NotInstalled(f"pyrate-limiter: {exc}") from exc
    lim = Limiter(Rate(10**12, Duration.SECOND))
    yield Case(
        "pyrate-limiter Limiter.try_acquire() ok",
        "peer",
        "lim.try_acquire('bench', blocking=False)",
        {"lim": lim},
        probe=lambda: bool(lim.try_acquire("bench", blocking=False)),
        expect=True,
        note="InMemoryBucket (log of items, leaked by a background thread)",
        key="pyrate_inmemory_ok",
    )
    try:
        from pyrate_limiter import limiter_factory

        tb = limiter_factory.create_token_bucket_limiter(10**9, Duration.SECOND)
    except (ImportError, AttributeError):
        tb = None
    if tb is not None:
        yield Case(
            "pyrate-limiter token bucket try_acquire() ok",
            "peer",
            "lim.try_acquire('bench', blocking=False)",
            {"lim": tb},
            probe=lambda: bool(tb.try_acquire("bench", blocking=False)),
            expect=True,
            note="StateBucket + TokenBucket (GCRA)",
            key="pyrate_token_bucket_ok",
        )
    full = Limiter(Rate(1, Duration.HOUR))
    full.try_acquire("bench", blocking=False)
    yield Case(
        "pyrate-limiter Limiter.try_acquire() fail",
        "peer",
        "lim.try_acquire('bench', blocking=False)",
        {"lim": full},
        probe=lambda: bool(full.try_acquire("bench", blocking=False)),
        expect=False,
        note="InMemoryBucket",
        key="pyrate_inmemory_fail",
    )


def throttled_async_cases() -> Iterator[Case]:
    try:
        from throttled.asyncio import MemoryStore, RateLimiterType, Throttled, rate_limiter
    except ImportError as exc:
        raise NotInstalled(f"throttled-py (asyncio): {exc}") from exc

    def factory() -> Callable[[int], Awaitable[float]]:
        huge = 10**12
        t = Throttled(
            key="bench",
            using=RateLimiterType.TOKEN_BUCKET.value,
            quota=rate_limiter.per_sec(huge, burst=huge),
            store=MemoryStore(),
        )

        async def run(n: int) -> float:
            limited = False
            t0 = time.perf_counter()
            for _ in range(n):
                result = await t.limit()
                limited = limited or result.limited
            t1 = time.perf_counter()
            if limited:
                raise RuntimeError("throttled-py (asyncio) limited a call")
            return t1 - t0

        return run

    yield Case(
        "throttled-py (asyncio) token_bucket: await limit()",
        "peer-async",
        async_factory=factory,
        note="throttled.asyncio, MemoryStore",
        key="throttled_async_token_bucket",
    )


def aiolimiter_cases() -> Iterator[Case]:
    try:
        from aiolimiter import AsyncLimiter
    except ImportError as exc:
        raise NotInstalled(f"aiolimiter: {exc}") from exc

    def factory() -> Callable[[int], Awaitable[float]]:
        lim = AsyncLimiter(10**12, 1)

        async def run(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                async with lim:
                    pass
            return time.perf_counter() - t0

        return run

    yield Case(
        "aiolimiter: async with AsyncLimiter",
        "peer-async",
        async_factory=factory,
        note="leaky bucket",
        key="aiolimiter_async_with",
    )


def per_key_peers(keys: list[str]) -> dict[str, Callable[[str], Any]]:
    """bench_per_key.py's peers: their keyed in-memory checks, every key in ``keys`` made."""
    found: dict[str, Callable[[str], Any]] = {}
    try:
        from limits import RateLimitItemPerSecond, storage, strategies

        item = RateLimitItemPerSecond(10**9)
        lim = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
        found["limits FixedWindowRateLimiter.hit(item, key)"] = lambda key: lim.hit(item, key)
    except ImportError:
        pass
    try:
        from throttled import MemoryStore, RateLimiterType, Throttled, rate_limiter

        t = Throttled(
            using=RateLimiterType.TOKEN_BUCKET.value,
            quota=rate_limiter.per_sec(10**9, burst=10**9),
            store=MemoryStore(),
        )
        found["throttled-py token_bucket .limit(key)"] = lambda key: t.limit(key)
    except ImportError:
        pass
    for check in found.values():  # every key exists before timing, as for permits
        for key in keys:
            check(key)
    return found
