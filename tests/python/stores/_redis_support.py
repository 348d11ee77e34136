"""Helpers of the Redis backend tests: backends under a prefix of their own, the steps as
awaitables whichever kind of client a backend has, and specs drawn at random."""

from __future__ import annotations

import random
import uuid
from typing import Any

from permits import specs
from permits._stores.backend import Outcome
from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import Rule

KINDS = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "sliding_log", "concurrency")

#: The leases of the differential tests never expire on their own.
NO_EXPIRY_NS = 10**18


def fresh_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}:"


def backend(client: Any, **kwargs: Any) -> RedisBackend:
    """A backend under a prefix no other test uses. Its keys outlive their rules' lifetimes by a
    minute: the tests' ManualClock says nothing about the real time between their steps."""
    kwargs.setdefault("prefix", fresh_prefix())
    made = RedisBackend(client, **kwargs)
    made.key_margin_ms = 60_000
    return made


def _never_cancelled(out: Outcome, n: int, lease_id: str | None) -> None:
    raise AssertionError("a take of these tests was cancelled")


class Steps:
    """A backend's steps as coroutines, sync or asyncio alike."""

    def __init__(self, backend: RedisBackend) -> None:
        self.backend = backend

    async def take(self, name: Any, rule: Rule, n: int, lease_id: str | None, now: int | None) -> Outcome:
        if self.backend.is_async:  # (as a limiter takes: down the loop's pipeline, once the first step is made)
            return await self.backend.take_soon(name, rule, n, lease_id, now, _never_cancelled)
        return self.backend.take(name, rule, n, lease_id, now)

    async def refund(self, name: Any, rule: Rule, n: int, stamp: int, lease_id: str | None, now: int | None) -> None:
        if self.backend.is_async:
            await self.backend.refund_async(name, rule, n, stamp, lease_id, now)
        else:
            self.backend.refund(name, rule, n, stamp, lease_id, now)

    async def renew(self, name: Any, rule: Rule, lease_ids: list[str], now: int | None) -> None:
        if self.backend.is_async:
            await self.backend.renew_async(name, rule, lease_ids, now)
        else:
            self.backend.renew(name, rule, lease_ids, now)

    async def available(self, name: Any, rule: Rule, now: int | None) -> int:
        if self.backend.is_async:
            return await self.backend.available_async(name, rule, now)
        return self.backend.available(name, rule, now)


def random_spec(kind: str, rng: random.Random, scale: str) -> specs.Spec[Any]:
    """``small``: limits up to 12, periods of 10 to 40 s. ``wide``: limits up to 2**31 - 1 and
    periods from 7 ns to 2**61 ns, where times and products leave the doubles' exact range.
    ``seconds``: as small, in whole seconds (the scripts divide a long time by those apart)."""
    if scale == "small":
        limit = rng.randint(1, 12)
        period = rng.randint(10 * 10**9, 40 * 10**9) / 1e9
    elif scale == "seconds":
        limit = rng.randint(1, 12)
        period = rng.randint(10, 40)
    else:
        limit = rng.choice([1, 3, 1000, 2**31 - 1])
        period = rng.choice([7, 13, 10**9 + 7, 3 * 10**13 + 1, 2**61]) / 1e9
    if kind == "token_bucket":
        return specs.TokenBucket(limit, rng.randint(1, limit), period)
    if kind == "fixed_window":
        return specs.FixedWindow(limit, period)
    if kind == "sliding_window":
        return specs.SlidingWindow(limit, period, rng.randint(1, 6))
    if kind == "sliding_window_counter":
        return specs.SlidingWindowCounter(limit, period)
    if kind == "sliding_log":
        return specs.SlidingLog(limit, max(period, 2e-6))  # (a window of at least 32 * 32 ns)
    return specs.Concurrency(limit)
