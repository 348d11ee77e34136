"""Small things of the Python face: the Partition factories check their options when called,
retry_after is never -0.0, ManualClock takes its whole range, NoLimiter and MonotonicClock have
a repr like the other limiters'."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import permits
from permits import Partition

OLDEST = permits.QueueOrder.OLDEST_FIRST
MAX_CLOCK_NS = 2**63 - 2**60

# (the factory call, the constructor call with the same options): both refuse, alike.
BAD_OPTIONS: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("token_limit", lambda: Partition.token_bucket(None, 0, 1, 1.0), lambda: permits.TokenBucketLimiter(0, 1, 1.0)),
    (
        "tokens_per_period",
        lambda: Partition.token_bucket(None, 1, 2**31, 1.0),
        lambda: permits.TokenBucketLimiter(1, 2**31, 1.0),
    ),
    (
        "replenishment_period",
        lambda: Partition.token_bucket(None, 1, 1, "1s"),
        lambda: permits.TokenBucketLimiter(1, 1, "1s"),  # type: ignore[arg-type]
    ),
    ("permit_limit", lambda: Partition.fixed_window(None, True, 1.0), lambda: permits.FixedWindowLimiter(True, 1.0)),
    ("window", lambda: Partition.fixed_window(None, 1, -1.0), lambda: permits.FixedWindowLimiter(1, -1.0)),
    (
        "segments_per_window",
        lambda: Partition.sliding_window(None, 1, 1.0, 70_000),
        lambda: permits.SlidingWindowLimiter(1, 1.0, 70_000),
    ),
    (
        "segments_per_window",
        lambda: Partition.sliding_window(None, 1, 2e-9, 3),
        lambda: permits.SlidingWindowLimiter(1, 2e-9, 3),
    ),
    (
        "window",
        lambda: Partition.sliding_window_counter(None, 1, float("nan")),
        lambda: permits.SlidingWindowCounterLimiter(1, float("nan")),
    ),
    ("permit_limit", lambda: Partition.concurrency(None, 0), lambda: permits.ConcurrencyLimiter(0)),
    (
        "queue_limit",
        lambda: Partition.concurrency(None, 1, queue_limit=-1),
        lambda: permits.ConcurrencyLimiter(1, queue_limit=-1),
    ),
    (
        "queue_order",
        lambda: Partition.fixed_window(None, 1, 1.0, queue_order="oldest"),  # type: ignore[arg-type]
        lambda: permits.FixedWindowLimiter(1, 1.0, queue_order="oldest"),  # type: ignore[arg-type]
    ),
    (
        "name",
        lambda: Partition.sliding_window_counter(None, 1, 1.0, name=7),  # type: ignore[arg-type]
        lambda: permits.SlidingWindowCounterLimiter(1, 1.0, name=7),  # type: ignore[arg-type]
    ),
]


@pytest.mark.parametrize(
    ("argument", "factory", "constructor"), BAD_OPTIONS, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(BAD_OPTIONS)]
)
def test_partition_factories_check_their_options_when_called(
    argument: str, factory: Callable[[], Any], constructor: Callable[[], Any]
) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        constructor()
    with pytest.raises(type(expected.value)) as caught:
        factory()
    assert str(caught.value) == str(expected.value)
    assert argument in str(caught.value)


def test_retry_after_is_never_negative_zero() -> None:
    lease = permits.Lease.denied(retry_after=-0.0)
    assert lease.retry_after == 0.0
    assert str(lease.retry_after) == "0.0"
    assert str(lease.metadata["retry_after"]) == "0.0"
    assert "-0.0" not in repr(lease)


def test_manual_clock_starts_anywhere_in_its_range() -> None:
    last_second = MAX_CLOCK_NS // 10**9
    assert permits.ManualClock(start=last_second).now_ns() == last_second * 10**9
    exact = timedelta(microseconds=MAX_CLOCK_NS // 1000)
    assert permits.ManualClock(start=exact).now_ns() == MAX_CLOCK_NS // 1000 * 1000
    with pytest.raises(ValueError, match="start is too large"):
        permits.ManualClock(start=last_second + 1)


def test_manual_clock_advances_to_the_end_of_its_range_at_once() -> None:
    clock = permits.ManualClock()
    clock.advance(MAX_CLOCK_NS // 10**9)
    assert clock.now_ns() == MAX_CLOCK_NS // 10**9 * 10**9
    with pytest.raises(ValueError, match="past 2\\*\\*63 - 2\\*\\*60 ns"):
        clock.advance(1)


def test_no_limiter_and_monotonic_clock_have_a_repr() -> None:
    assert repr(permits.NoLimiter(name="free")) == "<NoLimiter name='free'>"
    clock = permits.MonotonicClock()
    assert repr(clock) == f"MonotonicClock(source={clock.source!r})"
