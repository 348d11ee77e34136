"""The Redis backend's batches (take_batch) against the rules: a batch of ``n`` to ``most`` at a
moment grants, refuses and reports ``available`` and ``retry_after`` as the engine's single take of
``n`` does, takes what as many single takes of 1 would then be granted (at most ``most``), and is
valid until the end of its stamp's window, segment or period (computed here from the anchor, the
first step's time). Its permits refunded (as two leases: the n asked, the extra) undo as the
engine's leases' refunds do."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from test_redis_differential import assert_same_wait

import permits
from permits._stores.batch import Batch
from permits._stores.redis_backend import RedisBackend
from permits._stores.rules import Rule, rule_of

from _redis_support import backend, random_spec

TIMED = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter")
STEPS = 300
_LAST_CLOCK_NS = 2**63 - 2**60


async def take_batch(made: RedisBackend, name: str, rule: Rule, n: int, most: int, now: int) -> Batch:
    if made.is_async:
        return await made.take_batch_async(name, rule, n, most, now)
    return made.take_batch(name, rule, n, most, now)


async def refund(made: RedisBackend, name: str, rule: Rule, n: int, stamp: int, now: int) -> None:
    if made.is_async:
        await made.refund_async(name, rule, n, stamp, None, now)
    else:
        made.refund(name, rule, n, stamp, None, now)


async def available(made: RedisBackend, name: str, rule: Rule, now: int) -> int:
    if made.is_async:
        return await made.available_async(name, rule, now)
    return made.available(name, rule, now)


def stamp_length(rule: Rule) -> int:
    """The length of what a stamp indexes: the sliding window's segment, else the period."""
    return rule.period_ns // rule.amount if rule.kind == "sliding_window" else rule.period_ns


async def differential(made: RedisBackend, kind: str, seed: int, scale: str) -> None:
    rng = random.Random(f"batch/{kind}/{seed}/{scale}")
    clock = permits.ManualClock()
    if scale == "wide":
        clock.advance_ns(2**62)
    spec = random_spec(kind, rng, scale)
    engine: Any = spec.limiter(clock=clock)
    rule = rule_of(spec)
    length = stamp_length(rule)
    anchor = clock.now_ns()  # the first step's time: the state's anchor
    name = f"batch-{kind}"
    held: list[tuple[Any, int, int]] = []  # an engine lease, its n, the batch's stamp
    seen = {"granted": 0, "refused": 0, "extra": 0, "refunded": 0}
    for step in range(STEPS):
        now = clock.now_ns()
        action = "take" if step == 0 else rng.choices(["take", "refund", "advance"], [55, 15, 30])[0]
        context = f"{spec} step {step}: {action} at {now} ns"
        if action == "take":
            n = rng.randint(0, rule.limit) if rng.random() < 0.3 else rng.randint(0, min(rule.limit, 3))
            most = rng.randint(max(n, 1), rule.limit)
            context += f" n={n} most={most}"
            got = await take_batch(made, name, rule, n, most, now)
            # The rules: the single take of n, then single takes of 1 while they are granted.
            first = engine.acquire(n)
            assert got.granted == first.acquired, context
            if not first.acquired:
                assert_same_wait(got.retry_after_ns, first.retry_after, context)
                assert (got.taken, got.valid_ns, got.available) == (0, 0, engine.available_permits()), context
                seen["refused"] += 1
                continue
            singles = []
            while n + len(singles) < most and (single := engine.acquire(1)):
                singles.append(single)
            extra = len(singles)
            assert got.taken == n + extra, context
            assert got.retry_after_ns == -1 and got.available == engine.available_permits(), context
            index = (now - anchor) // length
            assert got.stamp == anchor + index * length, context  # the stamp: the period's start
            assert got.valid_ns == anchor + (index + 1) * length - now, context
            seen["granted"] += 1
            seen["extra"] += extra
            if n:
                held.append((first, n, got.stamp))
            if extra:
                # The extra permits as one engine lease, as a reserving limiter gives them back: the
                # singles undone at once (their own moment: all of them come back), taken together.
                for single in singles:
                    single._refund()
                together = engine.acquire(extra)
                assert together, context
                held.append((together, extra, got.stamp))
        elif action == "refund" and held:
            lease, n, stamp = held.pop(rng.randrange(len(held)))
            lease._refund()
            await refund(made, name, rule, n, stamp, now)
            seen["refunded"] += 1
        else:
            delta = rng.choice([1, rng.randint(1, rule.period_ns), rule.period_ns, rng.randint(0, 3 * rule.period_ns)])
            if now + delta < _LAST_CLOCK_NS:
                clock.advance_ns(delta)
        assert await available(made, name, rule, clock.now_ns()) == engine.available_permits(), context
    assert all(seen.values()), f"{spec}: the run should grant, refuse, take extra and refund: {seen}"


@pytest.mark.parametrize("scale", ["small", "wide"])
@pytest.mark.parametrize("kind", TIMED)
async def test_sync_batches_as_single_takes(redis_server: Any, kind: str, scale: str) -> None:
    with redis_server.client(socket_timeout=None) as client:
        made = backend(client)
        try:
            await differential(made, kind, 1, scale)
        finally:
            made.close()


@pytest.mark.parametrize("kind", TIMED)
async def test_asyncio_batches_as_single_takes(redis_server: Any, kind: str) -> None:
    client = redis_server.async_client(socket_timeout=None)
    try:
        await differential(backend(client), kind, 2, "small")
    finally:
        await client.aclose()


def test_batches_of_every_timed_kind_only_and_sound_arguments(redis_server: Any) -> None:
    with redis_server.client() as client:
        made = backend(client)
        rule = Rule("fixed_window", 5, 10**9)
        with pytest.raises(ValueError, match="time-based"):
            made.take_batch("c", Rule("concurrency", 5, lease_ttl_ns=10**9), 1, 2, 0)
        for n, most in [(2, 1), (0, 0), (1, 6), (-1, 1), (6, 6)]:
            with pytest.raises(ValueError):
                made.take_batch("w", rule, n, most, 0)
        with pytest.raises(ValueError, match="most"):
            made.take_batch("w", rule, 1, True, 0)  # type: ignore[arg-type]
        got = made.take_batch("w", rule, 0, 3, 5)  # a probe takes a batch too: at least one fits
        assert (got.granted, got.taken, got.available, got.valid_ns) == (True, 3, 2, 10**9)
        got = made.take_batch("w", rule, 1, 5, 10**9 + 4)  # the window's last ns: what fits, at most
        assert (got.granted, got.taken, got.available, got.valid_ns) == (True, 2, 0, 1)
        with pytest.raises(TypeError, match="take_batch_async"):
            asyncio_backend = backend(redis_server.async_client())
            asyncio_backend.take_batch("w", rule, 1, 1, 0)


def test_a_batch_of_another_rule_is_refused_as_a_take(redis_server: Any) -> None:
    with redis_server.client() as client:
        made = backend(client)
        made.take("shared", Rule("fixed_window", 5, 10**9), 1, None, 0)
        with pytest.raises(ValueError, match="fixed_window:5"):
            made.take_batch("shared", Rule("fixed_window", 6, 10**9), 1, 2, 0)


def test_the_servers_clock_stamps_and_bounds_a_batch(redis_server: Any) -> None:
    """now_ns None: the server's TIME; the batch is valid until its window ends, at most a window."""
    with redis_server.client() as client:
        made = backend(client)
        rule = Rule("fixed_window", 10, 10**9)
        before = time.time_ns()
        got = made.take_batch("served", rule, 1, 4, None)
        after = time.time_ns()
        assert (got.granted, got.taken, got.available) == (True, 4, 6)
        # the stamp: the start of the new state's first window, its anchor, the server's time then
        assert before - 10**6 <= got.stamp <= after + 10**6
        assert 0 < got.valid_ns <= 10**9
