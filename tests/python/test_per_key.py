"""PartitionedLimiter.per_key: every key's state in the engine's table (and the general path,
with the same template, for comparison: both must behave alike)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter, PerKeyLimiter

Make = Callable[..., Any]


def general(template: Partition, **kw: Any) -> PartitionedLimiter:
    return PartitionedLimiter(lambda resource: template.with_key(resource), **kw)


@pytest.fixture(params=["per_key", "general"])
def make(request: pytest.FixtureRequest) -> Make:
    return PartitionedLimiter.per_key if request.param == "per_key" else general


def test_per_key_keeps_the_engines_kinds_in_the_engine() -> None:
    assert isinstance(PartitionedLimiter.per_key(Partition.token_bucket(None, 1, 1, 1.0)), PerKeyLimiter)
    assert not isinstance(PartitionedLimiter.per_key(Partition.no_limiter(None)), PerKeyLimiter)


def test_bad_template_options_are_value_errors_at_once() -> None:
    with pytest.raises(ValueError, match="token_limit"):
        PartitionedLimiter.per_key(Partition.token_bucket(None, 0, 1, 1.0))
    with pytest.raises(ValueError, match="window"):
        PartitionedLimiter.per_key(Partition.fixed_window(None, 1, float("inf")))
    with pytest.raises(TypeError, match="queue_order"):
        PartitionedLimiter.per_key(Partition.concurrency(None, 1, queue_order="newest"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "template",
    [
        Partition.token_bucket(None, 2, 1, 1.0),
        Partition.fixed_window(None, 2, 1.0),
        Partition.sliding_window(None, 2, 1.0, 2),
        Partition.sliding_window_counter(None, 2, 1.0),
        Partition.concurrency(None, 2),
    ],
    ids=lambda p: type(p.spec).__name__,
)
def test_each_key_has_its_own_limit(make: Make, template: Partition) -> None:
    clock = permits.ManualClock()
    limiter = make(template, clock=clock)
    held = [limiter.acquire("a"), limiter.acquire("a")]
    assert all(held)
    refused = limiter.acquire("a")
    assert not refused and refused.reason == "limit_reached"
    assert limiter.acquire(("a",)) and limiter.acquire(b"a") and limiter.acquire(97)
    assert limiter.statistics("a").total_failed_leases == 1
    assert limiter.available_permits("a") == 0
    totals = limiter.statistics()
    assert totals.total_successful_leases == 5 and totals.total_failed_leases == 1


@pytest.mark.parametrize(
    ("template_name", "name", "named"),
    [("per-user", None, "per-user"), ("per-user", "api", "api"), (None, None, "default")],
)
async def test_a_per_key_limiter_is_named_by_its_name_else_by_its_templates(
    template_name: str | None, name: str | None, named: str
) -> None:
    # Issue 35, item 7: the template's name was dropped ("default").
    template = Partition.fixed_window(None, 1, 60.0, queue_limit=0, name=template_name)
    limiter = PartitionedLimiter.per_key(template, clock=permits.ManualClock(), name=name)
    assert limiter.name == named
    assert limiter.acquire("a")
    refused = limiter.acquire("a")
    assert refused.reason == "limit_reached" and refused.metadata["limiter"] == named
    assert limiter.wait("a").metadata["limiter"] == named
    assert (await limiter.wait_async("a")).metadata["limiter"] == named


def test_permit_counts_and_keyword_arguments(make: Make) -> None:
    limiter = make(Partition.token_bucket(None, 5, 1, 1.0))
    assert limiter.acquire("k", permit_count=3).permit_count == 3
    with pytest.raises(ValueError, match="permit_count"):
        limiter.acquire("k", 6)
    with pytest.raises(ValueError, match="permit_count"):
        limiter.acquire("k", -1)
    with pytest.raises(TypeError, match="permit_count"):
        limiter.acquire("k", 1.0)
    with pytest.raises(TypeError, match="partition key"):
        limiter.acquire(1.0)


def test_idle_keys_are_evicted_by_advance_and_come_back_fresh(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.token_bucket(None, 2, 1, 1.0), idle_timeout=10.0, clock=clock)
    assert limiter.acquire("k", 2)
    clock.advance(12.0)  # full at 2 s, idle for exactly 10 s: not yet
    assert limiter.partition_count == 1
    clock.advance(0.001)
    assert limiter.partition_count == 0
    assert limiter.acquire("k", 2)
    assert limiter.statistics().total_successful_leases == 2


def test_eviction_never_loosens_a_limit(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.fixed_window(None, 1, 3600.0), idle_timeout=1.0, clock=clock)
    assert limiter.acquire("k")
    clock.advance(60.0)
    assert not limiter.acquire("k")
    assert limiter.partition_count == 1


def test_the_bound_refuses_new_keys_unless_a_partition_is_idle(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.concurrency(None, 1), max_partitions=2, clock=clock)
    a, b = limiter.acquire("a"), limiter.acquire("b")
    refused = limiter.acquire("c")
    assert not refused and refused.reason == "partition_limit" and refused.retry_after is None
    b.release()
    c = limiter.acquire("c")
    assert c and limiter.partition_count == 2
    a.release()
    c.release()


def test_a_blocking_wait_in_one_key_does_not_block_another(make: Make) -> None:
    limiter = make(Partition.concurrency(None, 1, queue_limit=1))
    held = limiter.acquire("a")
    got: list[permits.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.wait("a")))
    waiter.start()
    deadline = time.monotonic() + 10
    while limiter.statistics("a").current_queued_count == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert limiter.acquire("b")
    held.release()
    waiter.join(10)
    assert got and got[0]


def test_a_keys_concurrency_lease_comes_back_on_release_and_when_forgotten(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.concurrency(None, 1), idle_timeout=1.0, clock=clock)
    key = ("tenant", 7)
    lease = limiter.acquire(key)
    assert lease and not limiter.acquire(key)
    clock.advance(5.0)
    assert limiter.partition_count == 1  # held: never idle
    lease.release()
    lease.release()  # idempotent
    assert limiter.available_permits(key) == 1
    forgotten = limiter.acquire(key)
    assert forgotten
    with pytest.warns(ResourceWarning, match="without release"):
        del forgotten
        gc.collect()
    assert limiter.available_permits(key) == 1
    clock.advance(1.0)
    assert limiter.partition_count == 1  # idle for exactly 1 s since the last release: not yet
    clock.advance(0.001)
    assert limiter.partition_count == 0
    assert limiter.statistics().total_successful_leases == 2


# Encoded keys are built on the stack up to 120 bytes and on the heap beyond ('s' and the str's
# bytes; a tuple adds a tag, a count and each item's length): keys on both sides of that edge
# are distinct, and their leases find their key again when released.
LONG_KEYS = [
    "k" * 118,
    "k" * 119,
    "k" * 120,
    "k" * 121,
    "k" * 119 + "j",
    "k" * 5000,
    ("k" * 100, "x" * 40),
    ("k" * 100, "x" * 41),
    b"k" * 300,
]


def test_keys_past_the_encoding_buffer_are_distinct_and_released_to_their_key(make: Make) -> None:
    limiter = make(Partition.concurrency(None, 1), idle_timeout=60.0, clock=permits.ManualClock())
    leases = [limiter.acquire(key) for key in LONG_KEYS]
    assert all(leases)
    assert not any(limiter.acquire(key) for key in LONG_KEYS)
    assert limiter.partition_count == len(LONG_KEYS)
    for key, lease in zip(LONG_KEYS, leases, strict=True):
        lease.release()
        assert limiter.available_permits(key) == 1


def test_wait_times_out_on_the_limiters_clock(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.token_bucket(None, 1, 1, 60.0, queue_limit=1), clock=clock)
    assert limiter.acquire("k")
    assert limiter.wait("k", timeout=0).reason == "timeout"


async def test_wait_async_queues_per_key_and_cancellation_leaves_the_queue(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.token_bucket(None, 1, 1, 1.0, queue_limit=2), clock=clock)
    assert limiter.acquire("k")
    first = asyncio.ensure_future(limiter.wait_async("k"))
    second = asyncio.ensure_future(limiter.wait_async("k"))
    await asyncio.sleep(0)
    assert limiter.statistics("k").current_queued_count == 2
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert limiter.statistics("k").current_queued_count == 1
    clock.advance(1.0)
    assert await asyncio.wait_for(first, 5)
    async with limiter.wait_async("other") as lease:
        assert lease


async def test_close_fails_every_keys_waiters(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.token_bucket(None, 1, 1, 60.0, queue_limit=1), clock=clock)
    waits = []
    for key in ("a", "b"):
        assert limiter.acquire(key)
        waits.append(asyncio.ensure_future(limiter.wait_async(key)))
    await asyncio.sleep(0)
    limiter.close()
    assert [lease.reason for lease in await asyncio.wait_for(asyncio.gather(*waits), 5)] == ["closed", "closed"]
    with pytest.raises(permits.LimiterClosedError):
        limiter.acquire("a")


def test_chains_refund_a_per_key_limiter(make: Make) -> None:
    clock = permits.ManualClock()
    per_user = make(Partition.token_bucket(None, 5, 1, 1.0), clock=clock)
    strict = permits.FixedWindowLimiter(1, 60.0, clock=clock)
    chained = permits.chain(per_user, strict)
    assert chained.acquire("alice")
    assert not chained.acquire("alice")
    assert per_user.available_permits("alice") == 4  # the refused request was given back


def test_many_threads_on_few_keys_get_exact_totals(make: Make) -> None:
    clock = permits.ManualClock()
    limiter = make(Partition.fixed_window(None, 500, 60.0), clock=clock)
    granted = [0] * 4

    def worker(i: int) -> None:
        for j in range(1000):
            if limiter.acquire(f"user-{(i + j) % 3}"):
                granted[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(granted) == 1500  # exactly 500 for each of the 3 keys


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("rate", ["10/second", "100/minute"])
def test_a_parsed_rates_keys_are_compact_records_seen_by_the_tables_accounting(rate: str) -> None:
    # A rate is a sliding log of 32 segments: a key is its 60-byte record and a block of its head
    # and 33 counts and stamps (280 bytes), plus its index slot and eviction check: under 500
    # bytes; a full limiter took over 1 KB, which the accounting did not see.
    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key(rate, idle_timeout=1.0, clock=clock)
    window = limiter.spec.window
    empty, _ = limiter._memory()
    for key in range(10_000):
        assert limiter.acquire(key)
    table, _ = limiter._memory()
    per_key = (table - empty) / 10_000
    assert 60 + 280 + 8 <= per_key <= 500, per_key
    clock.advance(window + 3.0)  # full again a window after its grant, then idle for longer than 1 s
    assert limiter.partition_count == 0
    assert limiter._memory()[0] == empty


def test_a_million_keys_come_and_go_and_memory_returns() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key(Partition.fixed_window(None, 5, 1.0), idle_timeout=1.0, clock=clock)
    gc.collect()
    baseline = _rss_kib()
    for key in range(1_000_000):
        limiter.acquire(key)
    assert limiter.partition_count == 1_000_000
    peak = _rss_kib()
    clock.advance(3.0)  # every key idle for longer than 1 s: the engine's timer drops them all
    assert limiter.partition_count == 0
    after = _rss_kib()
    grown = peak - baseline
    # Generous bounds (a key is a 64-byte record plus its slot and its eviction check):
    # what one million keys cost, and that most of it came back.
    assert grown < 300_000, f"1M keys took {grown} KiB"
    assert after - baseline < grown / 2 + 50_000, f"baseline {baseline}, peak {peak}, after {after} KiB"


def test_a_call_without_a_key_says_key() -> None:
    # (issue 40, item 5: users call what they pass first a key)
    limiter = PartitionedLimiter.per_key(permits.specs.Concurrency(1))
    with pytest.raises(TypeError, match=r"acquire\(\) takes a key .*acquire\(key, permit_count=1\)"):
        limiter.acquire()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"wait_async\(\) takes a key"):
        limiter.wait_async()  # type: ignore[call-arg]
