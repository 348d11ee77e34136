"""Argument validation (docs/design.md, Errors).

Limits and counts must be ints (bool and float are TypeErrors); values above 2**31 - 1 and
non-positive limits are ValueErrors naming the argument; durations are float seconds or
timedelta, and NaN, infinity or non-positive durations are ValueErrors naming the argument.

This file holds the rules, each with its plain cases. test_hostile_input.py holds the adversarial
inputs against the same rules (objects whose conversions raise or lie, int and float subclasses,
NumPy scalars, extremes found by hypothesis) and does not repeat what is here.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

import permits

from _support import KINDS, MAX_INT32, start_waiter

# Each factory takes keyword overrides of the constructor's arguments.
VALID = {
    "concurrency": (permits.ConcurrencyLimiter, dict(permit_limit=2)),
    "token_bucket": (
        permits.TokenBucketLimiter,
        dict(token_limit=2, tokens_per_period=1, replenishment_period=1.0),
    ),
    "fixed_window": (permits.FixedWindowLimiter, dict(permit_limit=2, window=1.0)),
    "sliding_window": (
        permits.SlidingWindowLimiter,
        dict(permit_limit=2, window=1.0, segments_per_window=2),
    ),
    "sliding_window_counter": (
        permits.SlidingWindowCounterLimiter,
        dict(permit_limit=2, window=1.0),
    ),
}

POSITIONAL = {
    "concurrency": ["permit_limit"],
    "token_bucket": ["token_limit", "tokens_per_period", "replenishment_period"],
    "fixed_window": ["permit_limit", "window"],
    "sliding_window": ["permit_limit", "window", "segments_per_window"],
    "sliding_window_counter": ["permit_limit", "window"],
}

INT_ARGS = [
    ("concurrency", "permit_limit"),
    ("concurrency", "queue_limit"),
    ("token_bucket", "token_limit"),
    ("token_bucket", "tokens_per_period"),
    ("token_bucket", "queue_limit"),
    ("fixed_window", "permit_limit"),
    ("fixed_window", "queue_limit"),
    ("sliding_window", "permit_limit"),
    ("sliding_window", "segments_per_window"),
    ("sliding_window", "queue_limit"),
    ("sliding_window_counter", "permit_limit"),
    ("sliding_window_counter", "queue_limit"),
]
POSITIVE_INT_ARGS = [(k, a) for k, a in INT_ARGS if a != "queue_limit"]
DURATION_ARGS = [
    ("token_bucket", "replenishment_period"),
    ("fixed_window", "window"),
    ("sliding_window", "window"),
    ("sliding_window_counter", "window"),
]


def build(kind, by_keyword=False, **overrides):
    cls, args = VALID[kind]
    args = {**args, **overrides}
    names = POSITIONAL[kind]
    if by_keyword:
        return cls(**args)
    positional = [args.pop(name) for name in names]
    return cls(*positional, **args)


@pytest.mark.parametrize("kind", KINDS)
def test_valid_construction(kind):
    lim = build(kind)
    assert isinstance(lim, permits.RateLimiter)
    assert lim.available_permits() == 2


@pytest.mark.parametrize("kind", KINDS)
def test_positional_arguments_are_also_accepted_by_keyword(kind):
    lim = build(kind, by_keyword=True, queue_limit=3, queue_order=permits.QueueOrder.NEWEST_FIRST)
    assert lim.available_permits() == 2


@pytest.mark.parametrize("kind", KINDS)
def test_options_after_the_limits_are_keyword_only(kind):
    cls, args = VALID[kind]
    positional = [args[name] for name in POSITIONAL[kind]]
    with pytest.raises(TypeError):
        cls(*positional, 5)  # queue_limit is keyword-only


@pytest.mark.parametrize("kind, arg", POSITIVE_INT_ARGS)
@pytest.mark.parametrize("value", [0, -1, -(2**31), -(2**63)])
def test_non_positive_limits_raise_value_error_naming_the_argument(kind, arg, value):
    with pytest.raises(ValueError, match=arg):
        build(kind, **{arg: value})


@pytest.mark.parametrize("kind, arg", INT_ARGS)
@pytest.mark.parametrize("value", [2**31, 2**32, 2**63, 2**100])
def test_limits_above_int32_raise_value_error_naming_the_argument(kind, arg, value):
    with pytest.raises(ValueError, match=arg):
        build(kind, **{arg: value})


# (segments_per_window is left out: 2**31 - 1 segments of a 1 s window would be shorter than 1 ns.)
@pytest.mark.parametrize("kind, arg", [a for a in INT_ARGS if a[1] != "segments_per_window"])
def test_limits_at_int32_max_are_accepted(kind, arg):
    lim = build(kind, **{arg: MAX_INT32})
    assert isinstance(lim, permits.RateLimiter)


@pytest.mark.parametrize("kind, arg", INT_ARGS)
@pytest.mark.parametrize("value", [True, False, 2.0, 2.5, "2", None])
def test_non_int_limits_raise_type_error(kind, arg, value):
    if value is None and arg == "queue_limit":
        assert build(kind, queue_limit=None).available_permits() == 2  # None: no bound on the queue
        return
    with pytest.raises(TypeError):
        build(kind, **{arg: value})


@pytest.mark.parametrize("kind", KINDS)
def test_queue_limit_may_be_zero_but_not_negative(kind):
    assert build(kind, queue_limit=0).available_permits() == 2
    with pytest.raises(ValueError, match="queue_limit"):
        build(kind, queue_limit=-1)


@pytest.mark.parametrize("kind, arg", DURATION_ARGS)
@pytest.mark.parametrize(
    "value",
    [0, 0.0, -0.0, -1.0, -1e-9, math.nan, math.inf, -math.inf, timedelta(0), timedelta(seconds=-1), timedelta.min],
)
def test_invalid_durations_raise_value_error_naming_the_argument(kind, arg, value):
    with pytest.raises(ValueError, match=arg):
        build(kind, **{arg: value})


@pytest.mark.parametrize("kind, arg", DURATION_ARGS)
@pytest.mark.parametrize("value", ["1", None, [1.0]])
def test_non_numeric_durations_raise_type_error(kind, arg, value):
    with pytest.raises(TypeError):
        build(kind, **{arg: value})


@pytest.mark.parametrize("kind, arg", DURATION_ARGS)
@pytest.mark.parametrize("value", [1.0, 1, timedelta(seconds=1), 1e-6, 86400.0 * 365])
def test_valid_durations(kind, arg, value):
    assert build(kind, **{arg: value}).available_permits() == 2


@pytest.mark.parametrize("value", [0, -1])
def test_segments_per_window_must_be_at_least_one(value):
    with pytest.raises(ValueError, match="segments_per_window"):
        build("sliding_window", segments_per_window=value)
    assert build("sliding_window", segments_per_window=1).available_permits() == 2


def test_timedelta_and_float_durations_are_equivalent():
    for period in (1.5, timedelta(seconds=1.5)):
        clock = permits.ManualClock()
        lim = permits.FixedWindowLimiter(1, period, clock=clock)
        assert lim.acquire().acquired
        clock.advance(1.499)
        assert not lim.acquire().acquired
        clock.advance(0.001)
        assert lim.acquire().acquired


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", ["oldest", object()])
def test_queue_order_must_be_a_queue_order(kind, value):
    with pytest.raises((TypeError, ValueError)):
        build(kind, queue_order=value)


# --------------------------------------------------------------------------- permit_count


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [True, 1.0, 1.5, "1", None])
async def test_permit_count_must_be_an_int(kind, value):
    lim = build(kind, queue_limit=2)
    with pytest.raises(TypeError):
        lim.acquire(value)
    with pytest.raises(TypeError):
        lim.wait(value, timeout=0)
    with pytest.raises(TypeError):
        await lim.wait_async(value)
    with pytest.raises(TypeError):
        await lim.acquire_async(value)
    assert lim.statistics().total_successful_leases == 0
    assert lim.statistics().total_failed_leases == 0


@pytest.mark.parametrize("kind", KINDS)
def test_permit_count_above_the_limit_names_permit_count(kind):
    lim = build(kind)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(3)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(2**31)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(2**64)


@pytest.mark.parametrize("kind", KINDS)
async def test_permit_count_above_the_limit_raises_value_error_even_after_close(kind):
    lim = build(kind, queue_limit=5)
    lim.close()
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(3)
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait(3, timeout=0)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.wait_async(3)
    with pytest.raises(ValueError, match="permit_count"):
        await lim.acquire_async(3)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(-1)
    # Valid counts raise LimiterClosedError.
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire(1)
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire(0)
    with pytest.raises(permits.LimiterClosedError):
        await lim.wait_async(0)


@pytest.mark.parametrize("kind", KINDS)
def test_negative_permit_count_names_permit_count(kind):
    lim = build(kind)
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(-1)


def test_queue_limit_below_permit_count_is_allowed_and_rejects_large_waits():
    # A request may ask for more than the queue could ever hold: it is rejected, not an error.
    clock = permits.ManualClock()
    lim = permits.TokenBucketLimiter(5, 1, 1.0, queue_limit=1, clock=clock)
    assert lim.acquire(5).acquired
    lease = start_waiter(lim, 3).outcome()
    assert not lease.acquired
    assert lease.reason == "queue_full"


def test_closed_error_is_a_runtime_error():
    assert issubclass(permits.LimiterClosedError, RuntimeError)
    lim = permits.ConcurrencyLimiter(1)
    lim.close()
    with pytest.raises(RuntimeError):
        lim.acquire()


def test_manual_clock_start_and_now():
    assert permits.ManualClock().now() == 0.0
    clock = permits.ManualClock(start=12.5)
    assert clock.now() == pytest.approx(12.5)
    clock.advance(0.5)
    assert clock.now() == pytest.approx(13.0)
    clock.advance(timedelta(seconds=2))  # a timedelta is accepted wherever a duration is
    assert clock.now() == pytest.approx(15.0)


def test_manual_clock_rounds_each_advance_to_the_nanosecond():
    clock = permits.ManualClock()
    for _ in range(10):
        clock.advance(0.4e-9)  # rounds to 0 ns each time
    assert clock.now() == 0.0
    clock.advance(1e-9)
    assert clock.now() == pytest.approx(1e-9, abs=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [-1.0, -1e-9, math.nan])
def test_invalid_wait_timeout_raises_value_error_naming_timeout(kind, value):
    lim = build(kind, queue_limit=1)
    with pytest.raises(ValueError, match="timeout"):
        lim.wait(1, timeout=value)


@pytest.mark.parametrize("kind", KINDS)
def test_name_keyword(kind):
    assert build(kind).name == "default"
    assert build(kind, name="api").name == "api"
    with pytest.raises(TypeError):
        build(kind, name=5)


def test_manual_clock_does_not_go_backwards():
    clock = permits.ManualClock(start=5.0)
    with pytest.raises(ValueError):
        clock.advance(-1.0)
    assert clock.now() == pytest.approx(5.0)


@pytest.mark.parametrize("kind", KINDS)
async def test_permit_count_may_be_passed_by_keyword(kind):
    lim = build(kind, queue_limit=2)
    a = lim.acquire(permit_count=1)
    assert a.acquired and a.permit_count == 1
    b = lim.wait(permit_count=1, timeout=0)
    assert b.acquired
    c = await lim.acquire_async(permit_count=0)
    assert not c.acquired and c.permit_count == 0
    assert lim.statistics().current_queued_count == 0
    held = (a, b)
    assert held


def test_default_clock_is_real_monotonic_time():
    lim = permits.TokenBucketLimiter(1, 1, 3600.0)
    assert lim.acquire().acquired
    failed = lim.acquire()
    assert not failed.acquired
    assert 3500.0 < failed.retry_after <= 3600.0
    assert isinstance(permits.MonotonicClock(), object)
    lim2 = permits.FixedWindowLimiter(1, 3600.0, clock=permits.MonotonicClock())
    assert lim2.acquire().acquired
    assert 3500.0 < lim2.acquire().retry_after <= 3600.0
