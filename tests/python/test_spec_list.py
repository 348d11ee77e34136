"""Several rates in one string ("10/second;1000/day"), as limits, Django REST framework and
django-ratelimit users write them: a ``SpecList`` that works wherever a spec does, and makes a
chain there: every rate holds (issue 42, item 7). Exact counts on a ManualClock."""

from __future__ import annotations

import bisect
import copy
import pickle
import random

import pytest

import permits
from permits import ManualClock, Partition, PartitionedLimiter, specs
from permits.chain import ChainedLimiter, ChainedPartitionedLimiter
from permits.specs import SlidingLog, SpecList, parse

SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10/second;1000/day", [SlidingLog(10, 1.0), SlidingLog(1000, 86400.0)]),
        ("10/s, 1000/d", [SlidingLog(10, 1.0), SlidingLog(1000, 86400.0)]),
        (
            "10/hour;100/day;2000 per year",
            [SlidingLog(10, 3600.0), SlidingLog(100, 86400.0), SlidingLog(2000, 360 * 86400.0)],
        ),
        ("100/day, 500/7days", [SlidingLog(100, 86400.0), SlidingLog(500, 7 * 86400.0)]),
        ("5/m|100/h", [SlidingLog(5, 60.0), SlidingLog(100, 3600.0)]),
        (" 5/m ; 100/10m ", [SlidingLog(5, 60.0), SlidingLog(100, 600.0)]),
    ],
)
def test_rates_joined_make_a_spec_list(text: str, expected: list[specs.Spec[permits.RateLimiter]]) -> None:
    found = parse(text)
    assert isinstance(found, SpecList)
    assert list(found) == expected
    assert found == SpecList(*expected)
    assert len(found) == len(expected) and found[0] == expected[0]


@pytest.mark.parametrize(("text", "piece"), [("10/second;often", "often"), ("10/s,,1/d", ""), ("1/d;", "")])
def test_a_bad_rate_in_a_list_is_quoted_with_its_list(text: str, piece: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)
    assert f"{piece!r} in {text!r}" in str(info.value)


def test_a_spec_list_is_a_value() -> None:
    one = SpecList(SlidingLog(10, 1.0), specs.TokenBucket(100, 10, 1.0))
    assert one == SpecList(SlidingLog(10, 1.0), specs.TokenBucket(100, 10, 1.0))
    assert one != SpecList(specs.TokenBucket(100, 10, 1.0), SlidingLog(10, 1.0))  # the order is asked in
    assert hash(one) == hash(SpecList(SlidingLog(10, 1.0), specs.TokenBucket(100, 10, 1.0)))
    assert SpecList(one, specs.Concurrency(2)).specs == (*one.specs, specs.Concurrency(2))  # flattened
    assert pickle.loads(pickle.dumps(one)) == one
    assert copy.deepcopy(one) == one
    assert eval(repr(one), {**vars(specs)}) == one
    with pytest.raises(AttributeError, match="immutable"):
        one.specs = ()  # type: ignore[misc]


def test_a_spec_list_checks_what_it_is_given() -> None:
    with pytest.raises(ValueError, match="at least one spec"):
        SpecList()
    with pytest.raises(TypeError, match=r"argument 1 must be a permits\.specs spec, got str"):
        SpecList(SlidingLog(1, 1.0), "1/second")  # type: ignore[arg-type]


def most_in_any_interval(times: list[int], interval_ns: int) -> int:
    times = sorted(times)
    return max((bisect.bisect_right(times, t + interval_ns) - i for i, t in enumerate(times)), default=0)


def test_its_limiter_is_a_chain_where_every_rate_holds() -> None:
    clock = ManualClock()
    limiter = parse("3/second;5/minute").limiter(clock=clock, name="api")
    assert isinstance(limiter, ChainedLimiter)
    assert limiter.name == "api"
    assert [bool(limiter.acquire()) for _ in range(4)] == [True, True, True, False]
    clock.advance(1.0 + 1e-9)
    granted = [bool(limiter.acquire()) for _ in range(3)]
    assert granted == [True, True, False]  # the minute's 5 are used up
    refused = limiter.acquire()
    # the minute's 5 come back together, a minute and a ns after the last of them (its log's 32nd)
    assert refused.metadata["limiter"] == "api" and refused.retry_after == pytest.approx(60.0, abs=1e-6)
    clock.advance(refused.retry_after - 1e-6)
    assert not limiter.acquire()
    clock.advance(1e-6)
    assert [bool(limiter.acquire()) for _ in range(4)] == [True, True, True, False]


def test_random_traffic_never_breaks_any_rate() -> None:
    clock = ManualClock()
    limiter = parse("4/second;10/10 seconds;25/minute").limiter(clock=clock)
    rng = random.Random(42)
    granted: list[int] = []
    for _ in range(3000):
        n = rng.randint(1, 2)
        if limiter.acquire(n):
            granted += [clock.now_ns()] * n
        clock.advance(rng.choice([0.0, 0.01, 0.1, 0.3, 1.0, 5.0]))
    assert len(granted) > 200
    assert most_in_any_interval(granted, SECOND) <= 4
    assert most_in_any_interval(granted, 10 * SECOND) <= 10
    assert most_in_any_interval(granted, 60 * SECOND) <= 25


def test_a_refusal_by_a_later_rate_gives_back_what_the_earlier_took() -> None:
    clock = ManualClock()
    limiter = SpecList(specs.FixedWindow(10, 60.0), specs.FixedWindow(2, 60.0)).limiter(clock=clock)
    assert limiter.acquire(2)
    for _ in range(5):
        assert not limiter.acquire()  # refused by the second: the first keeps its permits
    first, _ = limiter.limiters  # type: ignore[attr-defined]
    assert first.available_permits() == 8


def test_per_key_makes_a_chain_of_per_key_limiters() -> None:
    clock = ManualClock()
    limiter = PartitionedLimiter.per_key("2/second;3/minute", clock=clock, name="users")
    assert isinstance(limiter, ChainedPartitionedLimiter)
    assert all(isinstance(member, permits.PerKeyLimiter) for member in limiter.limiters)
    assert [bool(limiter.acquire("a")) for _ in range(3)] == [True, True, False]
    assert limiter.acquire("b", 2)  # a key of its own
    clock.advance(1.0 + 1e-9)
    assert [bool(limiter.acquire("a")) for _ in range(2)] == [True, False]  # the minute's 3
    assert limiter.acquire("a").metadata["limiter"] == "users"


def test_a_partition_of_a_spec_list() -> None:
    clock = ManualClock()
    partition = Partition.of("k", "2/second;3/minute", queue_limit=0)
    assert partition.spec == parse("2/second;3/minute")
    assert repr(partition).startswith("Partition.of('k', SpecList(SlidingLog(")
    limiter = PartitionedLimiter(lambda key: Partition.of(key, "2/second;3/minute", queue_limit=0), clock=clock)
    assert limiter.acquire("x", 2)
    assert limiter.wait("x").reason == "queue_full"  # the queue options are every member's
    per_key = PartitionedLimiter.per_key(Partition.of(None, "2/second;3/minute", name="each"), clock=clock)
    assert isinstance(per_key, ChainedPartitionedLimiter) and per_key.name == "each"


def test_the_engine_table_alone_refuses_a_spec_list() -> None:
    with pytest.raises(TypeError, match=r"PartitionedLimiter\.per_key"):
        permits.PerKeyLimiter("2/second;3/minute")


def test_a_decorator_waits_for_every_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    monkeypatch.setattr(permits.clock, "_default_clock", clock)  # the decorator's waits advance it
    times: list[int] = []

    @permits.limit("2/second;3/10 seconds")
    def job() -> None:
        times.append(clock.now_ns())

    for _ in range(7):
        job()
    assert most_in_any_interval(times, SECOND) <= 2
    assert most_in_any_interval(times, 10 * SECOND) <= 3
    assert times[:2] == [0, 0] and 10 * SECOND < times[3] <= 11 * SECOND


def test_throttle_takes_several_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    monkeypatch.setattr(permits.clock, "_default_clock", clock)
    times = [clock.now_ns() for _ in permits.throttle(range(6), "2/second;4/minute")]
    assert most_in_any_interval(times, SECOND) <= 2 and most_in_any_interval(times, 60 * SECOND) <= 4
    assert len(times) == 6
