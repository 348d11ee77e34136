"""permits.specs.parse: rates as users write them ("10/second", "10 per second", "5/2 seconds",
"1000/day"), whose spec never grants more than the count in any interval of that length; every
place that takes a spec takes the text too."""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import permits
from permits import Partition, PartitionedLimiter, specs
from permits.specs import parse

from _model_support import property_settings

SECOND = 1_000_000_000
UNITS = {"second": SECOND, "minute": 60 * SECOND, "hour": 3600 * SECOND, "day": 86400 * SECOND}


@pytest.mark.parametrize(
    ("text", "count", "interval_ns"),
    [
        ("10/second", 10, SECOND),
        ("10 per second", 10, SECOND),
        ("100/minute", 100, 60 * SECOND),
        ("5/2 seconds", 5, 2 * SECOND),
        ("1000/day", 1000, 86400 * SECOND),
        ("1/hour", 1, 3600 * SECOND),
        ("3 per 10 minutes", 3, 600 * SECOND),
        ("7/seconds", 7, SECOND),
        ("  2 / 3 Hours ", 2, 3 * 3600 * SECOND),
        ("2147483647/DAY", 2**31 - 1, 86400 * SECOND),
        # The short units of limits, slowapi, DRF and django-ratelimit (issue 40, item 5).
        ("100/min", 100, 60 * SECOND),
        ("10/sec", 10, SECOND),
        ("100/hr", 100, 3600 * SECOND),
        ("100/1m", 100, 60 * SECOND),
        ("5/m", 5, 60 * SECOND),
        ("100/10m", 100, 600 * SECOND),
        ("10/s", 10, SECOND),
        ("1000/d", 1000, 86400 * SECOND),
        ("3 per 2 mins", 3, 120 * SECOND),
        ("4/2 hrs", 4, 7200 * SECOND),
        # limits' month (30 days) and year (12 such months) (issue 42, item 7).
        ("10/mo", 10, 30 * 86400 * SECOND),
        ("2 per month", 2, 30 * 86400 * SECOND),
        ("2000 per year", 2000, 360 * 86400 * SECOND),
        ("5/2 years", 5, 720 * 86400 * SECOND),
        ("500/7days", 500, 7 * 86400 * SECOND),
    ],
)
def test_forms_people_write(text: str, count: int, interval_ns: int) -> None:
    spec = parse(text)
    assert spec == specs.SlidingLog(count, interval_ns / 1e9)
    assert spec.permit_limit == count
    assert spec._window_ns == interval_ns  # the interval itself: a permit comes back just after it


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10",
        "10/",
        "/second",
        "ten/second",
        "10/fortnight",
        "10/ms",
        "10/mos",
        "10/weeks",
        "10/0 seconds",
        "0/second",
        "-1/second",
        "1.5/second",
        "10/1.5 seconds",
        "10/second/extra",
        "10/second;;20/minute",
        "10/second;",
        "10 persecond",
        "99999999999/second",
        "1/99999999999 days",
        "１０/second",  # full-width digits  # noqa: RUF001
    ],
)
def test_malformed_text_is_a_value_error_quoting_it(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("bad", [10, None, b"10/second", specs.FixedWindow(10, 1.0)])
def test_not_text_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="rate"):
        parse(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the guarantee


def most_in_any_interval(grants: list[tuple[int, int]], interval_ns: int) -> int:
    """The most permits granted within any closed interval [t, t + interval] (grants: (time, n)).
    The busiest such interval starts at a grant, so checking those is checking every interval."""
    grants = sorted(grants)
    times = [t for t, _ in grants]
    prefix = [0]
    for _, n in grants:
        prefix.append(prefix[-1] + n)
    most = 0
    for i, t in enumerate(times):
        end = bisect.bisect_right(times, t + interval_ns)
        most = max(most, prefix[end] - prefix[i])
    return most


@st.composite
def rates(draw: st.DrawFn) -> tuple[str, int, int]:
    count = draw(st.integers(1, 6))
    multiplier = draw(st.sampled_from([None, 1, 2, 3, 7]))
    unit = draw(st.sampled_from(list(UNITS)))
    plural = "s" if multiplier not in (None, 1) or draw(st.booleans()) else ""
    sep = draw(st.sampled_from(["/", " per ", " / "]))
    text = f"{count}{sep}{'' if multiplier is None else f'{multiplier} '}{unit}{plural}"
    return text, count, (multiplier or 1) * UNITS[unit]


def steps(interval_ns: int) -> st.SearchStrategy[tuple[Any, ...]]:
    """What a client does: ask for n permits now, ask and on a refusal wait exactly its
    retry_after then ask again, or let time pass (anything up to over an interval, and times near
    the segment boundaries, where the edges are)."""
    segment = -(-interval_ns // 32)
    near_boundary = st.tuples(st.integers(1, 34), st.integers(-2, 2)).map(lambda p: max(0, p[0] * segment + p[1]))
    advance = st.one_of(
        st.integers(0, interval_ns + 2 * segment),
        st.integers(0, 3),
        near_boundary,
        st.sampled_from([interval_ns - 1, interval_ns, interval_ns + 1]),
    )
    return st.one_of(
        st.tuples(st.just("acquire"), st.integers(1, 3)),
        st.tuples(st.just("pace"), st.integers(1, 3)),
        st.tuples(st.just("advance"), advance),
    )


@property_settings(300)
@given(data=st.data(), rate=rates(), start=st.integers(0, 10**12))
def test_never_more_than_the_count_in_any_interval(data: st.DataObject, rate: tuple[str, int, int], start: int) -> None:
    text, count, interval_ns = rate
    clock = permits.ManualClock(start / 1e9)
    limiter = parse(text).limiter(clock=clock)
    ops = data.draw(st.lists(steps(interval_ns), min_size=5, max_size=60))
    grants: list[tuple[int, int]] = []
    for op, arg in ops:
        if op == "advance":
            clock.advance(arg / 1e9)
            continue
        n = min(arg, count)
        lease = limiter.acquire(n)
        if not lease and op == "pace":
            assert lease.retry_after is not None and lease.retry_after > 0
            clock.advance(lease.retry_after)
            lease = limiter.acquire(n)
            assert lease, "granted once its retry_after has passed"
        if lease:
            grants.append((clock.now_ns(), n))
    assert most_in_any_interval(grants, interval_ns) <= count


def test_the_check_catches_what_a_fixed_window_or_token_bucket_allows() -> None:
    """The reason parse does not return either: each passes twice the count within one second."""
    for spec in (specs.FixedWindow(10, 1.0), specs.TokenBucket(10, 10, 1.0)):
        clock = permits.ManualClock()
        limiter = spec.limiter(clock=clock)
        grants = []
        clock.advance(0.999)
        assert limiter.acquire(10)
        grants.append((clock.now_ns(), 10))
        clock.advance(0.001)
        assert limiter.acquire(10)
        grants.append((clock.now_ns(), 10))
        assert most_in_any_interval(grants, SECOND) == 20
    clock = permits.ManualClock()
    limiter = parse("10/second").limiter(clock=clock)
    clock.advance(0.999)
    assert limiter.acquire(10)
    clock.advance(0.001)
    refused = limiter.acquire(10)
    assert not refused and refused.retry_after is not None and refused.retry_after >= 0.999


def test_a_steady_stream_gets_the_whole_rate() -> None:
    """A job that takes each permit as soon as it is back: 10 a second, not 9.5 (the window of 20
    segments of 1/19 of the interval it was before)."""
    clock = permits.ManualClock()
    limiter = parse("10/second").limiter(clock=clock)
    granted = 0
    while clock.now() < 100.0:
        lease = limiter.acquire()
        if lease:
            granted += 1
            clock.advance(0.001)  # a millisecond of work
        else:
            clock.advance(lease.retry_after)
    assert 990 <= granted <= 1000


@pytest.mark.parametrize("text", ["100/minute", "10/second", "5/2 seconds", "1000/day"])
def test_what_a_server_is_told_is_the_rate_as_written(text: str) -> None:
    """RateLimit-Policy says the interval (w=60 for "100/minute"); a refusal's Retry-After is never
    more than the interval, even right after a burst of the whole count."""
    from permits._http_policy import _retry_seconds, quota_of

    clock = permits.ManualClock(1234.5)
    spec = parse(text)
    limiter = spec.limiter(clock=clock)
    interval = spec.window
    assert limiter.acquire(spec.permit_limit)
    refused = limiter.acquire()
    assert not refused and refused.retry_after is not None
    assert interval < refused.retry_after <= interval + 1e-9  # a nanosecond past the interval
    quota = quota_of(spec, "rate", limiter.available_permits(), refused)
    assert (quota.quota, quota.window, quota.reset) == (spec.permit_limit, round(interval), round(interval))
    assert _retry_seconds(refused.retry_after) == round(interval)


# --------------------------------------------------------------------------- every place a spec goes


def test_per_key_takes_a_rate() -> None:
    clock = permits.ManualClock()
    limiter = PartitionedLimiter.per_key("2/minute", clock=clock)
    assert limiter.spec == parse("2/minute")
    assert limiter.acquire("a", 2)
    assert not limiter.acquire("a")
    assert limiter.acquire("b")
    clock.advance(60.0)
    assert not limiter.acquire("a")  # never 3 within a minute, both its ends included
    clock.advance(1e-9)
    assert limiter.acquire("a")


def test_partition_of_takes_a_rate() -> None:
    clock = permits.ManualClock()
    partition = Partition.of("k", "5/second", queue_limit=0)
    assert partition.spec == parse("5/second")
    assert Partition.of("k", "5/second").spec == partition.spec
    limiter = PartitionedLimiter(lambda key: Partition.of(key, "5/second", queue_limit=0), clock=clock)
    assert limiter.acquire("x", 5)
    assert limiter.wait("x").reason == "queue_full"


def test_per_key_and_partition_of_quote_a_bad_rate() -> None:
    with pytest.raises(ValueError, match="'5/fortnight'"):
        Partition.of("k", "5/fortnight")
    with pytest.raises(ValueError, match="'often'"):
        PartitionedLimiter.per_key("often")
    with pytest.raises(TypeError, match="rate such as"):
        Partition.of("k", 5)  # type: ignore[arg-type]


def test_limit_decorator_takes_a_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = permits.ManualClock()
    # The limiter the decorator makes runs on the default clock: a ManualClock here, which the
    # decorator's waits advance instead of sleeping.
    monkeypatch.setattr(permits.clock, "_default_clock", clock)
    times: list[int] = []

    @permits.limit("2/second")
    def job() -> None:
        times.append(clock.now_ns())

    for _ in range(7):
        job()
    assert most_in_any_interval([(t, 1) for t in times], SECOND) == 2
    assert times[:2] == [0, 0] and times[2] > SECOND


async def test_limit_decorator_takes_a_rate_async(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = permits.ManualClock()
    monkeypatch.setattr(permits.clock, "_default_clock", clock)

    @permits.limit("3 per 2 seconds")
    async def job(i: int) -> int:
        return i

    assert await asyncio.gather(*(job(i) for i in range(3))) == [0, 1, 2]  # the whole count at once
    fourth = asyncio.ensure_future(job(3))
    clock.advance(2.0)  # a permit comes back only once more than the 2 seconds have passed
    await asyncio.sleep(0)
    assert not fourth.done()
    clock.advance(1e-9)
    assert await asyncio.wait_for(fourth, 5.0) == 3


def test_throttle_takes_a_spec_and_a_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = permits.ManualClock()
    monkeypatch.setattr(permits.clock, "_default_clock", clock)
    times = [clock.now_ns() for _ in permits.throttle(range(5), "2/second")]
    assert most_in_any_interval([(t, 1) for t in times], SECOND) == 2
    assert len(list(permits.throttle(range(3), specs.FixedWindow(5, 1.0)))) == 3


def test_limit_refuses_a_bad_rate() -> None:
    with pytest.raises(ValueError, match="'2/fortnight'"):
        permits.limit("2/fortnight")
