"""Hostile input at every public entry point (issue "Proven correct under races, hostile input and
faults", item 4): NaN, infinities, -0.0, huge and negative ints, bools, None, strings, floats where
ints are expected, timedelta extremes, objects whose conversions raise or lie, int/float subclasses
and NumPy scalars (when NumPy is installed). Each call either raises ValueError/TypeError naming the
argument, or works and the limit is right. Never a crash, a hang or a wrong limit.

What test_validation.py already covers (limits and durations out of range, the common wrong types
of limits and permit_count, invalid wait timeouts) is not repeated here. Time is a ManualClock's:
nothing here sleeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import permits

from _support import start_waiter

try:  # NumPy scalars are generated only when NumPy is installed
    import numpy
except ImportError:  # pragma: no cover
    numpy = None

MAX_NS = 2**62  # the longest duration the package accepts, in nanoseconds
LIMIT = 3

SETTINGS = settings(
    derandomize=True,
    deadline=None,
    max_examples=150,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --------------------------------------------------------------------------- hostile objects


class RaisingIndex:
    def __index__(self) -> int:
        raise RuntimeError("hostile __index__")

    def __int__(self) -> int:
        raise RuntimeError("hostile __int__")


class RaisingFloat:
    def __float__(self) -> float:
        raise RuntimeError("hostile __float__")


class IntSub(int):
    """An honest int subclass: must work as the int it is."""


class FloatSub(float):
    """An honest float subclass: must work as the float it is."""


class IntRaisingConversions(int):
    """An int whose every conversion hook raises: the value itself is a plain int."""

    def __index__(self) -> int:
        raise RuntimeError("hostile __index__")

    def __int__(self) -> int:
        raise RuntimeError("hostile __int__")

    def __float__(self) -> float:
        raise RuntimeError("hostile __float__")


class FloatRaisingConversion(float):
    """A float whose __float__ raises: the value itself is a plain float."""

    def __float__(self) -> float:
        raise RuntimeError("hostile __float__")


class LyingInt(int):
    """An int whose comparisons always answer False (so `x < 1` and `x > limit` both pass)."""

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False

    __hash__ = int.__hash__


NOT_NUMBERS: list[Any] = [None, "1", b"1", [1], (1,), {}, object(), RaisingIndex(), RaisingFloat(), 1j, permits]
# (None, "1", bools, 2.0 and 2.5 as limits are test_validation.py's)
WRONG_FOR_INTS: list[Any] = [
    *(v for v in NOT_NUMBERS if v is not None and v != "1"),
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    1.0,
    FloatSub(2.0),
    Fraction(2),
]
WRONG_FOR_DURATIONS: list[Any] = [*NOT_NUMBERS, True, False, Fraction(1, 2)]
if numpy is not None:
    WRONG_FOR_INTS += [numpy.int64(2), numpy.int32(2), numpy.bool_(True), numpy.array(2), numpy.float64(2.0)]
    WRONG_FOR_DURATIONS += [numpy.array(1.0), numpy.bool_(True)]

HUGE_INTS = [2**63 - 1, 2**63, 2**64, 10**100, 2**1024, 10**400]
NEGATIVE_INTS = [-1, -(2**31), -(2**63), -(2**63) - 1, -(10**100)]


def short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 24 else f"{r[:10]}...({len(r)} chars)"


def ids(values: list[Any]) -> list[str]:
    return [type(v).__name__ + ":" + short(v) for v in values]


def either(call: Callable[[], Any], name: str, check: Callable[[Any], None]) -> None:
    """The contract: ValueError/TypeError naming the argument, or it works and `check` holds."""
    try:
        result = call()
    except (ValueError, TypeError) as e:
        assert name in str(e), f"{type(e).__name__} does not name {name!r}: {e}"
        return
    check(result)


def rejects(call: Callable[[], Any], name: str) -> None:
    """ValueError or TypeError naming the argument (anything else fails the test)."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert name in str(info.value), f"{info.typename} does not name {name!r}: {info.value}"


# --------------------------------------------------------------------------- limiters

KINDS = ["concurrency", "token_bucket", "fixed_window", "sliding_window", "sliding_window_counter"]
TIMED = KINDS[1:]
PERIOD = 10.0


def make(kind: str, clock: permits.ManualClock, **over: Any) -> permits.RateLimiter:
    """A limiter of LIMIT permits; time-based ones come back after PERIOD (the token bucket refills
    completely in one period; the sliding window has one segment)."""
    args: dict[str, Any]
    if kind == "concurrency":
        args = dict(permit_limit=LIMIT)
        cls: Any = permits.ConcurrencyLimiter
    elif kind == "token_bucket":
        args = dict(token_limit=LIMIT, tokens_per_period=LIMIT, replenishment_period=PERIOD)
        cls = permits.TokenBucketLimiter
    elif kind == "fixed_window":
        args = dict(permit_limit=LIMIT, window=PERIOD)
        cls = permits.FixedWindowLimiter
    elif kind == "sliding_window":
        args = dict(permit_limit=LIMIT, window=PERIOD, segments_per_window=1)
        cls = permits.SlidingWindowLimiter
    else:
        args = dict(permit_limit=LIMIT, window=PERIOD)
        cls = permits.SlidingWindowCounterLimiter
    args.update(over)
    return cls(clock=clock, **args)


def refill_time(kind: str) -> float:
    """When every permit taken at 0 is back (a counter's window weighs on the next one)."""
    return 2 * PERIOD if kind == "sliding_window_counter" else PERIOD


def assert_limit(lim: permits.RateLimiter, limit: int) -> None:
    """Exactly `limit` single permits are granted, then a failed lease; nothing raises."""
    leases = [lim.acquire() for _ in range(limit)]
    assert all(leases), leases
    failed = lim.acquire()
    assert not failed
    assert failed.reason == "limit_reached"
    assert lim.available_permits() == 0


INT_OPTIONS = {
    "concurrency": ["permit_limit", "queue_limit"],
    "token_bucket": ["token_limit", "tokens_per_period", "queue_limit"],
    "fixed_window": ["permit_limit", "queue_limit"],
    "sliding_window": ["permit_limit", "segments_per_window", "queue_limit"],
    "sliding_window_counter": ["permit_limit", "queue_limit"],
}
INT_CASES = [(k, a) for k, names in INT_OPTIONS.items() for a in names]
DURATION_CASES = [
    ("token_bucket", "replenishment_period"),
    ("fixed_window", "window"),
    ("sliding_window", "window"),
    ("sliding_window_counter", "window"),
]


@pytest.mark.parametrize("kind, arg", INT_CASES)
@pytest.mark.parametrize("value", WRONG_FOR_INTS, ids=ids(WRONG_FOR_INTS))
def test_int_options_reject_non_ints(kind, arg, value):
    rejects(lambda: make(kind, permits.ManualClock(), **{arg: value}), arg)


@pytest.mark.parametrize("kind, arg", INT_CASES)
@pytest.mark.parametrize("value", [2**64, 10**100, 10**400, -(2**63) - 1, -(10**100)], ids=short)
def test_int_options_reject_huge_and_negative(kind, arg, value):
    with pytest.raises(ValueError, match=arg):
        make(kind, permits.ManualClock(), **{arg: value})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cls", [IntSub, IntRaisingConversions])
def test_int_subclass_limits_work_as_their_value(kind, cls):
    lim = make(kind, permits.ManualClock(), **{INT_OPTIONS[kind][0]: cls(2)}, queue_limit=cls(1))
    assert_limit(lim, 2)


@pytest.mark.parametrize("kind, arg", INT_CASES)
@pytest.mark.parametrize("value", [-1, 0, 2**31, 2**70])
def test_int_options_with_lying_comparisons_are_still_checked(kind, arg, value):
    # Python's checks are fooled (every comparison answers False); the engine's are not.
    if arg == "queue_limit" and value == 0:
        value = -5
    rejects(lambda: make(kind, permits.ManualClock(), **{arg: LyingInt(value)}), arg)


@pytest.mark.parametrize("kind, arg", DURATION_CASES)
@pytest.mark.parametrize("value", WRONG_FOR_DURATIONS, ids=ids(WRONG_FOR_DURATIONS))
def test_durations_reject_non_numbers(kind, arg, value):
    rejects(lambda: make(kind, permits.ManualClock(), **{arg: value}), arg)


@pytest.mark.parametrize("kind, arg", DURATION_CASES)
@pytest.mark.parametrize(
    "value",
    [
        10**100,
        2**1024,
        10**400,
        1e300,
        4.7e9,
        timedelta.max,
        -(10**400),
        -1e300,
        1e-10,
        4e-10,
        timedelta.resolution / 2,
    ],
    ids=short,
)
def test_durations_out_of_range_raise_value_error(kind, arg, value):
    with pytest.raises(ValueError, match=arg):
        make(kind, permits.ManualClock(), **{arg: value})


@pytest.mark.parametrize("kind, arg", DURATION_CASES)
@pytest.mark.parametrize("cls", [IntRaisingConversions, FloatRaisingConversion])
def test_durations_whose_float_hook_raises(kind, arg, cls):
    # A number whose conversion hook raises: TypeError/ValueError naming the argument, or it works
    # as the number it is; never the hook's RuntimeError.
    either(lambda: make(kind, permits.ManualClock(), **{arg: cls(10)}), arg, lambda lim: assert_limit(lim, LIMIT))


DURATION_OK: list[Any] = [
    IntSub(10),
    FloatSub(10.0),
    timedelta(seconds=10),
    timedelta(microseconds=10_000_000),
]
if numpy is not None:
    DURATION_OK += [numpy.float64(10.0)]


@pytest.mark.parametrize("kind, arg", DURATION_CASES)
@pytest.mark.parametrize("value", DURATION_OK, ids=ids(DURATION_OK))
def test_duration_subclasses_work_and_the_period_is_right(kind, arg, value):
    clock = permits.ManualClock()
    lim = make(kind, clock, **{arg: value})
    assert_limit(lim, LIMIT)
    clock.advance(9.999999999)
    assert not lim.acquire()
    clock.advance(1e-9 + refill_time(kind) - PERIOD)
    assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", TIMED)
def test_tiny_timedelta_period(kind):
    clock = permits.ManualClock()
    arg = "replenishment_period" if kind == "token_bucket" else "window"
    lim = make(kind, clock, **{arg: timedelta(microseconds=1)})
    assert_limit(lim, LIMIT)
    refill = refill_time(kind) / PERIOD * 1e-6
    assert 0 < lim.acquire().retry_after <= refill
    clock.advance(timedelta(microseconds=refill * 1e6))
    assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", TIMED)
def test_longest_period_is_accepted_and_works(kind):
    clock = permits.ManualClock()
    arg = "replenishment_period" if kind == "token_bucket" else "window"
    longest = MAX_NS / 1e9
    lim = make(kind, clock, **{arg: longest})
    assert_limit(lim, LIMIT)
    failed = lim.acquire()
    assert longest * (1 - 1e-9) <= failed.retry_after <= refill_time(kind) / PERIOD * longest
    clock.advance(longest / 2)
    assert not lim.acquire()
    clock.advance(longest / 2 + 1)
    if kind == "sliding_window_counter":
        clock.advance(longest / 2)  # half-way through the next window the last one weighs 1.5 permits
        assert lim.available_permits() == 1
        assert lim.acquire() and not lim.acquire()
    else:
        assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [1, "1", None, 0.0, "OLDEST_FIRST"])
def test_auto_replenishment_and_clock_must_have_their_types(kind, value):
    if kind != "concurrency" and value is None:
        # None: TypeError, or it works as the default (automatic replenishment).
        either(
            lambda: make(kind, permits.ManualClock(), auto_replenishment=None),
            "auto_replenishment",
            lambda lim: lim.try_replenish() is False or pytest.fail("None made replenishment manual"),
        )
    elif kind != "concurrency":
        rejects(lambda: make(kind, permits.ManualClock(), auto_replenishment=value), "auto_replenishment")
    for clock in (value, permits.ManualClock, object()) if value is not None else (permits.ManualClock, object()):
        with pytest.raises(TypeError, match="clock"):
            make(kind, clock)


# --------------------------------------------------------------------------- permit_count


def permit_count_calls(lim: permits.RateLimiter) -> list[Callable[[Any], Any]]:
    return [
        lambda n: lim.acquire(n),
        lambda n: lim.acquire(permit_count=n),
        lambda n: lim.wait(n, timeout=0),
        lambda n: lim.acquire_async(n),
        lambda n: lim.wait_async(n),
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "value",
    [*HUGE_INTS[1:], *NEGATIVE_INTS, LyingInt(-1), LyingInt(LIMIT + 1), LyingInt(2**64)],
    ids=short,
)
async def test_permit_count_out_of_range_raises_value_error(kind, value):
    lim = make(kind, permits.ManualClock(), queue_limit=LIMIT)
    for call in permit_count_calls(lim):
        with pytest.raises(ValueError, match="permit_count"):
            result = call(value)
            if hasattr(result, "__await__"):
                await result
    s = lim.statistics()
    assert (s.total_successful_leases, s.total_failed_leases, s.current_queued_count) == (0, 0, 0)
    assert_limit(lim, LIMIT)


PERMIT_COUNT_WRONG: list[Any] = [
    *NOT_NUMBERS,
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    FloatSub(1.0),
    Fraction(1),
    False,
]
if numpy is not None:
    PERMIT_COUNT_WRONG += [numpy.int64(1), numpy.bool_(True), numpy.float64(1.0), numpy.array(1)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", PERMIT_COUNT_WRONG, ids=ids(PERMIT_COUNT_WRONG))
async def test_permit_count_of_a_wrong_type_raises_type_error(kind, value):
    lim = make(kind, permits.ManualClock(), queue_limit=LIMIT)
    for call in permit_count_calls(lim):
        with pytest.raises(TypeError, match="permit_count"):
            result = call(value)
            if hasattr(result, "__await__"):
                await result
    assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cls", [IntSub, IntRaisingConversions])
async def test_int_subclass_permit_counts_count_as_their_value(kind, cls):
    lim = make(kind, permits.ManualClock(), queue_limit=LIMIT)
    held = [lim.acquire(cls(1)), lim.wait(cls(1), timeout=0), await lim.acquire_async(cls(1))]
    assert all(held) and [x.permit_count for x in held] == [1, 1, 1]
    assert not lim.acquire(cls(1))
    assert lim.acquire(cls(0)).acquired is False  # nothing left: a zero-permit probe fails
    for lease in held:
        lease.release()


@pytest.mark.parametrize("kind", KINDS)
def test_bad_call_shapes(kind):
    lim = make(kind, permits.ManualClock())
    with pytest.raises(TypeError):
        lim.acquire(1, 2)
    with pytest.raises(TypeError):
        lim.acquire(count=1)
    with pytest.raises(TypeError):
        lim.wait(1, 0, 0)
    assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", KINDS)
@given(n=st.integers(min_value=-(2**70), max_value=2**70) | st.integers(min_value=-2, max_value=LIMIT + 2))
@SETTINGS
def test_permit_count_over_the_integers(kind, n):
    clock = permits.ManualClock()
    lim = make(kind, clock)
    if 0 <= n <= LIMIT:
        lease = lim.acquire(n)
        assert lease.acquired and lease.permit_count == n
        assert lim.available_permits() == LIMIT - n
        if n > 0:
            assert not lim.acquire(LIMIT - n + 1)
        return
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(n)
    with pytest.raises(ValueError, match="permit_count"):
        lim.wait(n, timeout=0)
    assert lim.available_permits() == LIMIT


# --------------------------------------------------------------------------- wait(timeout=)

TIMEOUT_WRONG_TYPE: list[Any] = [*NOT_NUMBERS[1:], True, False, Fraction(1, 2)]
TIMEOUT_BAD_VALUE: list[Any] = [math.inf, -math.inf, 10**100, 2**1024, 10**400, 1e300, timedelta.max, timedelta.min]
if numpy is not None:
    TIMEOUT_WRONG_TYPE += [numpy.array(1.0)]
    TIMEOUT_BAD_VALUE += [numpy.float64(math.nan)]


@pytest.mark.parametrize("kind", [*KINDS, "no_limiter"])
@pytest.mark.parametrize(
    "value, error",
    [(v, TypeError) for v in TIMEOUT_WRONG_TYPE] + [(v, ValueError) for v in TIMEOUT_BAD_VALUE],
    ids=short,
)
def test_wait_timeout_hostile(kind, value, error):
    lim = permits.NoLimiter() if kind == "no_limiter" else make(kind, permits.ManualClock(), queue_limit=1)
    with pytest.raises(error, match="timeout"):
        lim.wait(1, timeout=value)
    assert lim.statistics().total_successful_leases == 0


TIMEOUT_OK: list[Any] = [-0.0, 0, IntSub(0), FloatSub(0.5), timedelta(microseconds=1), 4.6e9, MAX_NS / 1e9]
if numpy is not None:
    TIMEOUT_OK += [numpy.float64(0.25)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", TIMEOUT_OK, ids=ids(TIMEOUT_OK))
def test_wait_timeout_odd_but_valid(kind, value):
    # Permits are free, so the wait is granted at once whatever the timeout; when none are and the
    # queue is empty-limited, it fails at once (queue_full), never blocking.
    lim = make(kind, permits.ManualClock(), queue_limit=0)
    leases = [lim.wait(1, timeout=value) for _ in range(LIMIT)]
    assert all(leases)
    failed = lim.wait(1, timeout=value)
    assert not failed and failed.reason == "queue_full"


@pytest.mark.parametrize("kind", KINDS)
@given(timeout=st.floats(allow_nan=True, allow_infinity=True))
@SETTINGS
def test_wait_timeout_over_the_floats(kind, timeout):
    lim = make(kind, permits.ManualClock(), queue_limit=0)
    valid = math.isfinite(timeout * 1e9) and timeout >= 0 and round(timeout * 1e9) <= MAX_NS
    if not valid:
        with pytest.raises(ValueError, match="timeout"):
            lim.wait(1, timeout=timeout)
        return
    held = lim.wait(LIMIT, timeout=timeout)
    assert held.acquired
    assert lim.wait(1, timeout=timeout).reason == "queue_full"
    held.release()


@pytest.mark.parametrize("kind", TIMED)
def test_huge_timeout_on_a_queued_wait_is_bounded_by_the_limit_not_the_timeout(kind):
    # A waiter with the longest timeout is served when permits come back, and an advance past the
    # end of time does not overflow into a timeout or a wrong grant.
    clock = permits.ManualClock()
    lim = make(kind, clock, queue_limit=1)
    assert lim.acquire(LIMIT)
    waiter = start_waiter(lim, 1, queued_after=1, timeout=MAX_NS / 1e9)
    clock.advance(2 * PERIOD)
    lease = waiter.outcome()
    assert lease.acquired and lease.permit_count == 1


# --------------------------------------------------------------------------- ManualClock


@pytest.mark.parametrize("value", WRONG_FOR_DURATIONS, ids=ids(WRONG_FOR_DURATIONS))
def test_manual_clock_rejects_non_numbers(value):
    rejects(lambda: permits.ManualClock(value), "start")
    clock = permits.ManualClock(1.0)
    rejects(lambda: clock.advance(value), "seconds")
    assert clock.now() == 1.0


CLOCK_BAD: list[Any] = [math.nan, math.inf, -math.inf, -1, -1e-9, 10**100, 2**1024, 10**400, 1e300]
CLOCK_BAD += [timedelta.max, timedelta.min, timedelta(microseconds=-1)]


@pytest.mark.parametrize("value", CLOCK_BAD, ids=short)
def test_manual_clock_rejects_bad_values(value):
    with pytest.raises(ValueError, match="start"):
        permits.ManualClock(value)
    clock = permits.ManualClock(1.0)
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(value)
    assert clock.now() == 1.0


# MAX_NS / 2: started there and advanced by as much, the clock is at MAX_NS (2 * MAX_NS would pass
# the clock's end, 2**63 - 2**60 ns, and is refused).
@pytest.mark.parametrize("value", [-0.0, 0, IntSub(3), FloatSub(2.5), timedelta(microseconds=1), MAX_NS / 2e9])
def test_manual_clock_odd_but_valid(value):
    clock = permits.ManualClock(value)
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    assert clock.now() == pytest.approx(seconds, rel=1e-12)
    clock.advance(value)
    assert clock.now() == pytest.approx(2 * seconds, rel=1e-12)


@pytest.mark.parametrize("cls", [IntRaisingConversions, FloatRaisingConversion])
def test_manual_clock_numbers_whose_float_hook_raises(cls):
    either(lambda: permits.ManualClock(cls(3)), "start", lambda c: c.now() == 3.0)
    clock = permits.ManualClock()
    either(lambda: clock.advance(cls(3)), "seconds", lambda _: clock.now() == 3.0)


@given(start=st.floats(allow_nan=True, allow_infinity=True), step=st.floats(allow_nan=True, allow_infinity=True))
@SETTINGS
def test_manual_clock_over_the_floats(start, step):
    def ok(x: float) -> bool:
        return math.isfinite(x * 1e9) and x >= 0 and round(x * 1e9) <= MAX_NS

    if not ok(start):
        with pytest.raises(ValueError, match="start"):
            permits.ManualClock(start)
        return
    clock = permits.ManualClock(start)
    assert clock.now() == round(start * 1e9) / 1e9
    if not ok(step):
        with pytest.raises(ValueError, match="seconds"):
            clock.advance(step)
        assert clock.now() == round(start * 1e9) / 1e9
        return
    clock.advance(step)
    assert clock.now() == (round(start * 1e9) + round(step * 1e9)) / 1e9


@pytest.mark.parametrize("kind", TIMED)
def test_advance_a_billion_seconds_then_acquire(kind):
    clock = permits.ManualClock()
    lim = make(kind, clock)
    assert_limit(lim, LIMIT)
    clock.advance(1e9)
    assert_limit(lim, LIMIT)
    assert lim.acquire().retry_after == pytest.approx(PERIOD, abs=PERIOD)
    clock.advance(1e9)
    assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", TIMED)
def test_time_never_goes_backwards_however_far_it_is_advanced(kind):
    # Each advance is at most 2**62 ns (146 years); several of them must either keep moving time
    # forward or be refused with ValueError, never wrap around into negative time (after which a
    # limiter would deny forever with retry_after 0).
    clock = permits.ManualClock()
    lim = make(kind, clock)
    step = MAX_NS / 1e9
    last = clock.now()
    for _ in range(4):
        try:
            clock.advance(step)
        except ValueError as e:
            assert "seconds" in str(e)
            break
        assert clock.now() > last, f"time went from {last} to {clock.now()}"
        last = clock.now()
        assert_limit(lim, LIMIT)


@pytest.mark.parametrize("kind", TIMED)
def test_clock_started_at_the_far_end(kind):
    clock = permits.ManualClock(MAX_NS / 1e9)
    lim = make(kind, clock)
    assert_limit(lim, LIMIT)
    retry = lim.acquire().retry_after
    assert 0 < retry <= refill_time(kind) + 1e-6
    clock.advance(retry)
    assert lim.acquire()


# --------------------------------------------------------------------------- Lease.granted / Lease.denied


@pytest.mark.parametrize("value", [*PERMIT_COUNT_WRONG, True, 1.0], ids=ids([*PERMIT_COUNT_WRONG, True, 1.0]))
def test_lease_granted_rejects_non_ints(value):
    with pytest.raises(TypeError, match="permit_count"):
        permits.Lease.granted(value)


@given(n=st.integers(min_value=-(2**70), max_value=2**70))
@SETTINGS
def test_lease_granted_over_the_integers(n):
    if 0 <= n < 2**63:
        lease = permits.Lease.granted(n)
        assert lease.acquired and lease.permit_count == n
        lease.release()
        return
    with pytest.raises(ValueError, match="permit_count"):
        permits.Lease.granted(n)


@pytest.mark.parametrize("value", [IntSub(2), IntRaisingConversions(2), LyingInt(2)])
def test_lease_granted_int_subclasses(value):
    assert permits.Lease.granted(value).permit_count == 2


def test_lease_granted_other_arguments():
    for bad in (1, "f", object()):
        with pytest.raises(TypeError, match="on_release"):
            permits.Lease.granted(1, on_release=bad)
    with pytest.raises(TypeError):
        permits.Lease.granted(1, 2)  # the options are keyword-only


@given(retry=st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-(2**1100), max_value=2**1100))
@SETTINGS
def test_lease_denied_retry_after_over_the_numbers(retry):
    valid = math.isfinite(float(retry)) if isinstance(retry, float) else True
    valid = valid and retry >= 0
    if isinstance(retry, int) and abs(retry) >= 2**1024:
        valid = False  # beyond any float: a number of seconds no one can wait
    if not valid:
        with pytest.raises(ValueError, match="retry_after"):
            permits.Lease.denied(retry_after=retry)
        return
    lease = permits.Lease.denied(retry_after=retry)
    assert not lease and lease.retry_after == float(retry)
    assert lease.metadata["retry_after"] == float(retry)


RETRY_WRONG: list[Any] = [*NOT_NUMBERS[1:], True, False, Fraction(1, 2)]
if numpy is not None:
    RETRY_WRONG += [numpy.array(1.0), numpy.bool_(True)]


@pytest.mark.parametrize("value", RETRY_WRONG, ids=ids(RETRY_WRONG))
def test_lease_denied_rejects_non_numbers(value):
    with pytest.raises(TypeError, match="retry_after"):
        permits.Lease.denied(retry_after=value)


@pytest.mark.parametrize("value", [IntSub(2), FloatSub(2.0), IntRaisingConversions(2), FloatRaisingConversion(2.0)])
def test_lease_denied_number_subclasses(value):
    either(lambda: permits.Lease.denied(retry_after=value), "retry_after", lambda lease: lease.retry_after == 2.0)


@pytest.mark.parametrize("value", [1, 1.5, object(), "x", b"x", [("a", 1)], (("a", 1),)], ids=short)
def test_lease_metadata_must_be_a_mapping(value):
    with pytest.raises(TypeError, match="metadata"):
        permits.Lease.granted(1, metadata=value)
    with pytest.raises(TypeError, match="metadata"):
        permits.Lease.denied(metadata=value)


def test_lease_denied_other_arguments():
    for bad in (5, b"x", object(), ["limit"]):
        with pytest.raises(TypeError, match="reason"):
            permits.Lease.denied(bad)
    assert permits.Lease.denied(None).reason == "limit_reached"
    assert permits.Lease.denied("").reason == ""


# --------------------------------------------------------------------------- NoLimiter and custom limiters


class Denying(permits.RateLimiter):
    # A reason waiting cannot cure, so that wait() and wait_async() return at once.
    def _acquire(self, permit_count: int) -> permits.Lease:
        return permits.Lease.denied("queue_full", retry_after=1.0)


class Granting(permits.RateLimiter):
    def _acquire(self, permit_count: int) -> permits.Lease:
        return permits.Lease.granted(permit_count)


CUSTOM = {"no_limiter": permits.NoLimiter, "denying": Denying, "granting": Granting}


@pytest.mark.parametrize("kind", list(CUSTOM))
@pytest.mark.parametrize("value", [*PERMIT_COUNT_WRONG, True], ids=ids([*PERMIT_COUNT_WRONG, True]))
async def test_python_limiters_reject_wrong_permit_count_types(kind, value):
    lim = CUSTOM[kind]()
    for call in permit_count_calls(lim):
        with pytest.raises(TypeError, match="permit_count"):
            result = call(value)
            if hasattr(result, "__await__"):
                await result
    s = lim.statistics()
    assert (s.total_successful_leases, s.total_failed_leases) == (0, 0)


@pytest.mark.parametrize("kind", list(CUSTOM))
@pytest.mark.parametrize("value", HUGE_INTS + NEGATIVE_INTS + [LyingInt(-1)], ids=short)
async def test_python_limiters_huge_and_negative_permit_counts(kind, value):
    # Negative: ValueError. Huge: ValueError, or a lease that reports exactly the count asked for.
    lim = CUSTOM[kind]()

    def right(lease: permits.Lease) -> None:
        assert lease.permit_count == value
        assert lease.acquired == (kind != "denying")

    for call in permit_count_calls(lim):

        async def attempt(call: Callable[[Any], Any] = call) -> permits.Lease:
            result = call(value)
            return await result if hasattr(result, "__await__") else result

        try:
            lease = await attempt()
        except (ValueError, TypeError) as e:
            assert "permit_count" in str(e), e
            continue
        assert value >= 0, f"negative permit_count {value} accepted: {lease!r}"
        right(lease)


@pytest.mark.parametrize("kind", list(CUSTOM))
@given(n=st.integers(min_value=-(2**70), max_value=2**70))
@SETTINGS
def test_python_limiters_over_the_integers(kind, n):
    lim = CUSTOM[kind]()
    if n < 0:
        with pytest.raises(ValueError, match="permit_count"):
            lim.acquire(n)
        return
    try:
        lease = lim.acquire(n)
    except ValueError as e:
        assert "permit_count" in str(e)
        assert n >= 2**63  # only beyond what a lease can hold
        return
    assert lease.permit_count == n
    assert lease.acquired == (kind != "denying")


def test_custom_limiter_name_and_close():
    with pytest.raises(TypeError, match="name"):
        Granting(name=b"x")
    lim = Granting(name="x")
    lim.close()
    with pytest.raises(ValueError, match="permit_count"):
        lim.acquire(-1)
    with pytest.raises(permits.LimiterClosedError):
        lim.acquire(1)
