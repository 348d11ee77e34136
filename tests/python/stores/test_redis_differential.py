"""The Redis backend against the engine: the same spec, the same ManualClock, the same random
requests, advances and refunds; every step must grant, refuse, report ``available`` and
``retry_after`` exactly as the engine limiter does."""

from __future__ import annotations

import random
from typing import Any

import pytest

import permits
from permits._stores.rules import rule_of

from _redis_support import KINDS, NO_EXPIRY_NS, Steps, backend, random_spec

STEPS = 300
_LAST_CLOCK_NS = 2**63 - 2**60
#: Where each scale's clock starts: at 0; far past 2**53 ns, as the server's TIME gives; a little
#: below 9 * 10**15 (where the scripts' numbers stop being plain), so that a run crosses it; or at
#: a server's time, with a state that is ~3 years old after its first step (aged).
_STARTS = {"small": 0, "wide": 2**62, "edge": 9 * 10**15 - 5 * 10**11, "aged": 1_700_000_000 * 10**9}
_AGED_NS = 10**17
#: The specs each scale draws (random_spec).
_SPECS = {"small": "small", "wide": "wide", "edge": "small", "aged": "seconds"}


def assert_same_wait(ns: int, seconds: float | None, context: str) -> None:
    assert seconds is not None, context
    # The engine's float is its exact ns divided by 1e9: the same division must give the same float.
    assert ns >= 0 and ns / 1e9 == seconds, f"{context}: backend {ns} ns, engine {seconds!r} s"
    if ns < 2**50:
        assert abs(round(seconds * 1e9) - ns) <= 1, context


async def differential(steps: Steps, kind: str, seed: int, scale: str) -> None:
    rng = random.Random(f"{kind}/{seed}/{scale}")
    clock = permits.ManualClock()
    clock.advance_ns(_STARTS[scale])
    spec = random_spec(kind, rng, _SPECS[scale])
    engine: Any = spec.limiter(clock=clock)
    rule = rule_of(spec, NO_EXPIRY_NS)
    period = rule.period_ns or 10**10
    name = f"differential-{kind}"
    held: list[tuple[Any, int, int, str]] = []  # engine lease, n, stamp, lease id
    seen = {"granted": 0, "refused": 0, "refunded": 0}
    for step in range(STEPS):
        now = clock.now_ns()
        action = "take" if step == 0 else rng.choices(["take", "refund", "advance"], [55, 15, 30])[0]
        context = f"{spec} step {step}: {action} at {now} ns"
        if action == "take":
            n = rng.randint(0, rule.limit) if rng.random() < 0.3 else rng.randint(0, min(rule.limit, 3))
            lease_id = f"lease-{step}"
            lease = engine.acquire(n)
            got = await steps.take(name, rule, n, lease_id, now)
            context += f" n={n}"
            assert got.granted == lease.acquired, context
            assert got.available == engine.available_permits(), context
            if lease.acquired or kind == "concurrency":
                assert lease.retry_after is None and got.retry_after_ns == -1, context
            else:
                assert_same_wait(got.retry_after_ns, lease.retry_after, context)
            seen["granted" if lease.acquired else "refused"] += 1
            if lease.acquired and n > 0:
                held.append((lease, n, got.stamp, lease_id))
        elif action == "refund" and held:
            lease, n, stamp, lease_id = held.pop(rng.randrange(len(held)))
            if kind == "concurrency":
                lease.release()
            else:
                lease._refund()
            await steps.refund(name, rule, n, stamp, lease_id, now)
            seen["refunded"] += 1
        else:
            delta = rng.choice([1, rng.randint(1, period), period, rng.randint(0, 3 * period), period // 3])
            if now + delta < _LAST_CLOCK_NS:
                clock.advance_ns(delta)
        if scale == "aged" and step == 0:
            clock.advance_ns(_AGED_NS)
        assert await steps.available(name, rule, clock.now_ns()) == engine.available_permits(), context
    assert all(seen.values()), f"{spec}: the run should grant, refuse and refund: {seen}"


@pytest.mark.parametrize("scale", list(_STARTS))
@pytest.mark.parametrize("kind", KINDS)
async def test_sync_client_steps_as_the_engine(redis_server: Any, kind: str, scale: str) -> None:
    with redis_server.client(socket_timeout=None) as client:
        made = backend(client)
        try:
            await differential(Steps(made), kind, 1, scale)
        finally:
            made.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_asyncio_client_steps_as_the_engine(redis_server: Any, kind: str) -> None:
    client = redis_server.async_client(socket_timeout=None)
    try:
        await differential(Steps(backend(client)), kind, 2, "small")
    finally:
        await client.aclose()
