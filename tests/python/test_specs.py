"""permits.specs: one value per algorithm describes a limit; the limiter classes, the Partition
factories and per_key are built from it."""

from __future__ import annotations

import asyncio
import copy
import math
import pickle
import random
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mypy import api

import permits
from permits import Partition, PartitionedLimiter, PerKeyLimiter, QueueOrder, _core
from permits.specs import Concurrency, FixedWindow, SlidingWindow, SlidingWindowCounter, Spec, TokenBucket

from _child import run_ok

# Each algorithm, by its Partition factory's name: the spec class, valid arguments, the limiter class.
CASES: dict[str, tuple[type[Spec[Any]], dict[str, Any], type[permits.RateLimiter]]] = {
    "token_bucket": (
        TokenBucket,
        dict(token_limit=3, tokens_per_period=2, replenishment_period=1.0),
        permits.TokenBucketLimiter,
    ),
    "fixed_window": (FixedWindow, dict(permit_limit=3, window=1.0), permits.FixedWindowLimiter),
    "sliding_window": (
        SlidingWindow,
        dict(permit_limit=3, window=1.0, segments_per_window=4),
        permits.SlidingWindowLimiter,
    ),
    "sliding_window_counter": (
        SlidingWindowCounter,
        dict(permit_limit=3, window=1.0),
        permits.SlidingWindowCounterLimiter,
    ),
    "concurrency": (Concurrency, dict(permit_limit=3), permits.ConcurrencyLimiter),
}
KINDS = list(CASES)
COUNTS = [(kind, name) for kind, (_, args, _) in CASES.items() for name, v in args.items() if isinstance(v, int)]
DURATIONS = [(kind, name) for kind, (_, args, _) in CASES.items() for name, v in args.items() if isinstance(v, float)]


def spec_of(kind: str, **overrides: Any) -> Spec[Any]:
    spec_type, args, _ = CASES[kind]
    return spec_type(**{**args, **overrides})


def limiter_of(kind: str, **options: Any) -> permits.RateLimiter:
    _, args, limiter_type = CASES[kind]
    return limiter_type(**args, **options)


def partition_of(kind: str, key: object, **options: Any) -> Partition:
    return getattr(Partition, kind)(key, **CASES[kind][1], **options)  # type: ignore[no-any-return]


# ---- validation: once, when made, with the constructors' checks and messages ----


@pytest.mark.parametrize(("kind", "name"), COUNTS)
@pytest.mark.parametrize("value", [0, -1, 2**31, 2**100])
def test_a_count_out_of_range_is_a_value_error_naming_it(kind: str, name: str, value: int) -> None:
    with pytest.raises(ValueError, match=name):
        spec_of(kind, **{name: value})


@pytest.mark.parametrize(("kind", "name"), COUNTS)
@pytest.mark.parametrize("value", [True, 2.0, "2", None])
def test_a_count_that_is_no_int_is_a_type_error_naming_it(kind: str, name: str, value: object) -> None:
    with pytest.raises(TypeError, match=name):
        spec_of(kind, **{name: value})


@pytest.mark.parametrize(("kind", "name"), DURATIONS)
@pytest.mark.parametrize("value", [0, 0.0, -1.0, math.nan, math.inf, timedelta(0), 2.0**62])
def test_a_bad_duration_is_a_value_error_naming_it(kind: str, name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        spec_of(kind, **{name: value})


@pytest.mark.parametrize(("kind", "name"), DURATIONS)
@pytest.mark.parametrize("value", ["1", None, True, [1.0]])
def test_a_duration_that_is_no_number_is_a_type_error_naming_it(kind: str, name: str, value: object) -> None:
    with pytest.raises(TypeError, match=name):
        spec_of(kind, **{name: value})


def test_the_segments_must_fit_the_window() -> None:
    with pytest.raises(ValueError, match="segments_per_window must be <= 65536"):
        SlidingWindow(3, 1.0, 65537)
    with pytest.raises(ValueError, match="window must be at least segments_per_window nanoseconds"):
        SlidingWindow(3, 3e-9, 4)
    assert SlidingWindow(3, 4e-9, 4).replenishment_period == 1e-9


@pytest.mark.parametrize("kind", KINDS)
def test_the_errors_are_the_limiter_classes_own(kind: str) -> None:
    spec_type, args, limiter_type = CASES[kind]
    for name in args:
        for bad in (0, "x"):
            with pytest.raises((TypeError, ValueError)) as by_spec:
                spec_type(**{**args, name: bad})
            with pytest.raises((TypeError, ValueError)) as by_class:
                limiter_type(**{**args, name: bad})
            assert (type(by_spec.value), str(by_spec.value)) == (type(by_class.value), str(by_class.value))


# ---- values: normalized, equal by limits, hashable, immutable ----


def test_durations_are_float_seconds_and_equal_however_given() -> None:
    for period in (2, 2.0, timedelta(seconds=2)):
        spec = TokenBucket(5, 1, period)
        assert spec.replenishment_period == 2.0 and type(spec.replenishment_period) is float
        assert spec == TokenBucket(5, 1, 2.0) and hash(spec) == hash(TokenBucket(5, 1, 2.0))
    assert FixedWindow(5, timedelta(milliseconds=1500)).window == 1.5


def test_the_public_attributes_are_the_limiter_classes() -> None:
    assert TokenBucket(5, 2, 1.5).token_limit == 5
    assert TokenBucket(5, 2, 1.5).tokens_per_period == 2
    assert FixedWindow(5, 2.0).replenishment_period == 2.0
    assert SlidingWindowCounter(5, 2.0).replenishment_period == 2.0
    spec = SlidingWindow(5, 1.0, 3)
    assert (spec.permit_limit, spec.window, spec.segments_per_window) == (5, 1.0, 3)
    assert spec.replenishment_period == (10**9 // 3) / 1e9
    assert Concurrency(4).permit_limit == 4


def test_an_int_subclass_is_read_as_its_value() -> None:
    class Odd(int):
        def __eq__(self, other: object) -> bool:
            return False

        __hash__ = int.__hash__

    spec = FixedWindow(Odd(5), 1.0)
    assert type(spec.permit_limit) is int and spec == FixedWindow(5, 1.0)


def test_specs_are_equal_when_their_limits_are() -> None:
    assert TokenBucket(5, 5, 1.0) != TokenBucket(5, 5, 2.0)
    assert TokenBucket(5, 5, 1.0) != TokenBucket(5, 4, 1.0)
    assert FixedWindow(5, 1.0) != SlidingWindowCounter(5, 1.0)  # same numbers, another algorithm
    assert SlidingWindow(5, 1.0, 2) != SlidingWindow(5, 1.0, 4)
    assert Concurrency(1) != 1
    assert len({TokenBucket(5, 5, 1.0), TokenBucket(5, 5, timedelta(seconds=1)), FixedWindow(5, 1.0)}) == 2
    limits = {Concurrency(2): "two"}
    assert limits[Concurrency(2)] == "two"


@pytest.mark.parametrize("kind", KINDS)
def test_specs_are_immutable(kind: str) -> None:
    spec = spec_of(kind)
    for name in [*CASES[kind][1], "_key", "other"]:
        with pytest.raises(AttributeError, match="immutable"):
            setattr(spec, name, 1)
        with pytest.raises(AttributeError, match="immutable"):
            delattr(spec, name)
    assert spec == spec_of(kind)


def test_the_repr_says_what_the_limit_is() -> None:
    assert repr(TokenBucket(10, 5, timedelta(seconds=1))) == (
        "TokenBucket(token_limit=10, tokens_per_period=5, replenishment_period=1.0)"
    )
    assert repr(FixedWindow(10, 60)) == "FixedWindow(permit_limit=10, window=60.0)"
    assert repr(SlidingWindow(10, 1.0, 4)) == "SlidingWindow(permit_limit=10, window=1.0, segments_per_window=4)"
    assert repr(SlidingWindowCounter(10, 0.5)) == "SlidingWindowCounter(permit_limit=10, window=0.5)"
    assert repr(Concurrency(3)) == "Concurrency(permit_limit=3)"


@pytest.mark.parametrize("kind", KINDS)
def test_the_repr_makes_an_equal_spec(kind: str) -> None:
    spec = spec_of(kind)
    assert eval(repr(spec), vars(permits.specs)) == spec


@pytest.mark.parametrize("kind", KINDS)
def test_copies_and_pickles_are_equal(kind: str) -> None:
    spec = spec_of(kind)
    pickles = [pickle.loads(pickle.dumps(spec, protocol)) for protocol in range(pickle.HIGHEST_PROTOCOL + 1)]
    for other in (copy.copy(spec), copy.deepcopy(spec), *pickles):
        assert other == spec and hash(other) == hash(spec) and repr(other) == repr(spec)
        with pytest.raises(AttributeError):
            other.permit_limit = 1  # type: ignore[misc]


def test_a_pickle_keeps_every_nanosecond() -> None:
    spec = FixedWindow(1, timedelta(days=40_000, microseconds=1))  # more ns than a float holds exactly
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_specs_match_by_position() -> None:
    match TokenBucket(10, 5, 2.0):
        case TokenBucket(limit, per_period, period):
            assert (limit, per_period, period) == (10, 5, 2.0)
        case _:
            raise AssertionError("no match")


# ---- spec.limiter(): the limiter classes are built from their spec ----


def drive(limiter: permits.RateLimiter, clock: permits.ManualClock, seed: int) -> list[tuple[object, ...]]:
    """A seeded mix of acquires, releases and time; every lease's outcome."""
    rng = random.Random(seed)
    held: list[permits.Lease] = []
    seen: list[tuple[object, ...]] = []
    for _ in range(200):
        step = rng.random()
        if step < 0.6:
            lease = limiter.acquire(rng.randint(0, 3))
            seen.append((lease.acquired, lease.permit_count, lease.reason, lease.retry_after))
            if lease:
                held.append(lease)
        elif step < 0.8 and held:
            held.pop(rng.randrange(len(held))).release()
        else:
            clock.advance(rng.choice([0.1, 0.25, 0.3, 1.0]))
        seen.append((limiter.available_permits(),))
    return seen


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_spec_limiter_grants_as_the_class_does(kind: str, seed: int) -> None:
    by_spec, by_class = permits.ManualClock(), permits.ManualClock()
    assert drive(spec_of(kind).limiter(clock=by_spec), by_spec, seed) == drive(
        limiter_of(kind, clock=by_class), by_class, seed
    )


@pytest.mark.parametrize("kind", KINDS)
def test_spec_limiter_is_an_instance_of_the_class_with_the_same_attributes(kind: str) -> None:
    spec = spec_of(kind)
    built = spec.limiter(name="api")
    plain = limiter_of(kind, name="api")
    assert type(built) is type(plain) is CASES[kind][2]
    assert built.spec == plain.spec == spec  # type: ignore[attr-defined]
    assert built.spec is spec  # type: ignore[attr-defined]
    assert vars(built).keys() == vars(plain).keys()
    for name, value in vars(plain).items():
        if name != "spec" and not name.startswith("_"):
            assert getattr(built, name) == value, name
    assert built.name == "api" and repr(built) == repr(plain)


@pytest.mark.parametrize("kind", KINDS)
def test_spec_limiter_takes_the_queue_limit(kind: str) -> None:
    clock = permits.ManualClock()
    queued, unqueued = (
        spec_of(kind).limiter(queue_limit=2, clock=clock),
        spec_of(kind).limiter(queue_limit=0, clock=clock),
    )
    unbounded = spec_of(kind).limiter(clock=clock)  # the default: no bound on the queue
    held = queued.acquire(3), unqueued.acquire(3), unbounded.acquire(3)
    assert all(held)
    assert queued.wait(2, timeout=0).reason == "timeout"  # it queued, and its time ran out
    assert queued.wait(3, timeout=0).reason == "queue_full"
    assert unqueued.wait(1, timeout=0).reason == "queue_full"
    assert unbounded.wait(3, timeout=0).reason == "timeout"


@pytest.mark.parametrize("kind", KINDS)
async def test_spec_limiter_takes_the_queue_order(kind: str) -> None:
    clock = permits.ManualClock()
    for order, refused, reason in ((QueueOrder.OLDEST_FIRST, 1, "queue_full"), (QueueOrder.NEWEST_FIRST, 0, "evicted")):
        limiter = spec_of(kind).limiter(queue_limit=1, queue_order=order, clock=clock)
        held = limiter.acquire(3)
        assert held
        first = asyncio.ensure_future(limiter.wait_async(1))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(limiter.wait_async(1))
        done, _ = await asyncio.wait([first, second], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert done == {(first, second)[refused]}
        assert (first, second)[refused].result().reason == reason
        limiter.close()
        await asyncio.wait([first, second], timeout=5)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "concurrency"])
def test_auto_replenishment_is_an_option_of_the_time_based_specs(kind: str) -> None:
    clock = permits.ManualClock()
    limiter = spec_of(kind).limiter(auto_replenishment=False, clock=clock)
    assert limiter.auto_replenishment is False  # type: ignore[attr-defined]
    assert limiter.acquire(3)
    clock.advance(5.0)
    assert limiter.available_permits() == 0  # nothing moves until try_replenish()
    assert limiter.try_replenish()
    assert limiter.available_permits() == 3
    assert spec_of(kind).limiter().auto_replenishment is True  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="auto_replenishment must be a bool"):
        spec_of(kind).limiter(auto_replenishment=1)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_option_is_a_type_error_naming_it(kind: str) -> None:
    with pytest.raises(TypeError, match="'auto_replenishmen'"):
        spec_of(kind).limiter(auto_replenishmen=False)
    with pytest.raises(TypeError, match="'permit_limit'"):
        spec_of(kind).limiter(permit_limit=5)
    with pytest.raises(TypeError):
        spec_of(kind).limiter(0)  # type: ignore[misc]


def test_concurrency_takes_no_auto_replenishment() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'auto_replenishment'"):
        Concurrency(1).limiter(auto_replenishment=True)
    with pytest.raises(TypeError, match="auto_replenishment"):
        permits.ConcurrencyLimiter(1, auto_replenishment=True)  # type: ignore[call-arg]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_queue_options_are_the_constructors_errors(kind: str) -> None:
    spec = spec_of(kind)
    with pytest.raises(ValueError, match="queue_limit"):
        spec.limiter(queue_limit=-1)
    with pytest.raises(TypeError, match="queue_limit"):
        spec.limiter(queue_limit=True)
    with pytest.raises(TypeError, match="queue_order"):
        spec.limiter(queue_order="newest")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        spec.limiter(name=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="clock"):
        spec.limiter(clock=object())


def test_an_engine_class_takes_its_own_spec_only() -> None:
    clock = permits.ManualClock()
    with pytest.raises(TypeError, match=r"permits\.specs\.TokenBucket, got FixedWindow"):
        _core.TokenBucket(clock, FixedWindow(1, 1.0), 0, False, False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"spec must be a permits\.specs spec"):
        _core.PerKey(clock, "token_bucket", 0, False, 0, 0)  # type: ignore[arg-type]


# ---- Partition.of and the factories ----


@pytest.mark.parametrize("kind", KINDS)
def test_the_factories_are_partition_of_their_spec(kind: str) -> None:
    options = dict(queue_limit=2, queue_order=QueueOrder.NEWEST_FIRST, name="p")
    made = partition_of(kind, "k", **options)
    of = Partition.of("k", spec_of(kind), **options)  # type: ignore[arg-type]
    assert made.key == of.key == "k"
    assert made.spec == of.spec == spec_of(kind)
    assert repr(made) == repr(of)
    limiter = made.factory(made.key, permits.ManualClock())
    assert type(limiter) is CASES[kind][2] and limiter.name == "p"
    assert limiter.spec == spec_of(kind)  # type: ignore[attr-defined]


def test_partition_repr_says_what_it_is() -> None:
    assert repr(Partition.token_bucket("alice", 5, 5, 1.0)) == (
        "Partition.of('alice', TokenBucket(token_limit=5, tokens_per_period=5, replenishment_period=1.0))"
    )
    assert repr(Partition.of(7, Concurrency(2), queue_limit=3, queue_order=QueueOrder.NEWEST_FIRST, name="x")) == (
        "Partition.of(7, Concurrency(permit_limit=2), queue_limit=3, queue_order=QueueOrder.NEWEST_FIRST, name='x')"
    )
    assert repr(Partition.no_limiter("admins")) == "Partition.no_limiter('admins')"
    assert repr(Partition.custom("k", lambda key: permits.NoLimiter())) == "Partition.custom('k', ...)"
    assert Partition.no_limiter("admins").spec is None


def test_partition_of_checks_its_options() -> None:
    with pytest.raises(TypeError, match=r"spec must be a permits\.specs spec"):
        Partition.of("k", permits.TokenBucketLimiter(1, 1, 1.0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"spec must be a permits\.specs spec"):
        Partition.of("k", [1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue_limit"):
        Partition.of("k", Concurrency(1), queue_limit=-1)
    with pytest.raises(TypeError, match="queue_order"):
        Partition.of("k", Concurrency(1), queue_order=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        Partition.of("k", Concurrency(1), name=b"x")  # type: ignore[arg-type]


def test_options_found_good_once_are_still_checked_by_type() -> None:
    # True == 1 and hash(True) == hash(1): the options remembered as good must not let True pass.
    assert Partition.token_bucket("k", 1, 1, 1.0, queue_limit=1)
    for _ in range(2):
        with pytest.raises(TypeError, match="token_limit"):
            Partition.token_bucket("k", True, 1, 1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="queue_limit"):
            Partition.token_bucket("k", 1, 1, 1.0, queue_limit=True)
        with pytest.raises(TypeError, match="queue_limit"):
            Partition.of("k", TokenBucket(1, 1, 1.0), queue_limit=True)
    assert Partition.fixed_window("k", 1, 1).spec == Partition.fixed_window("k", 1, 1.0).spec
    with pytest.raises(TypeError, match="token_limit"):
        Partition.token_bucket("k", [1], 1, 1.0)  # type: ignore[arg-type]  (unhashable: no look-up)
    with pytest.raises(TypeError, match="name"):
        Partition.of("k", TokenBucket(1, 1, 1.0), name=["x"])  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_the_factories_still_check_every_argument(kind: str) -> None:
    _, args, limiter_type = CASES[kind]
    for name in args:
        for bad in (0, -1, "x", None, True, math.nan):
            with pytest.raises((TypeError, ValueError)) as by_factory:
                getattr(Partition, kind)("k", **{**args, name: bad})
            with pytest.raises((TypeError, ValueError)) as by_class:
                limiter_type(**{**args, name: bad})
            assert (type(by_factory.value), str(by_factory.value)) == (type(by_class.value), str(by_class.value))
            assert name in str(by_factory.value)
    with pytest.raises(ValueError, match="queue_limit"):
        partition_of(kind, "k", queue_limit=-1)
    with pytest.raises(TypeError, match="queue_order"):
        partition_of(kind, "k", queue_order="oldest")


def test_many_different_options_are_all_right() -> None:
    # More than the remembered bound: every one is still the partition asked for.
    for limit in range(1, 700):
        partition = Partition.fixed_window(limit, limit, 1.0, queue_limit=limit % 3)
        assert partition.key == limit and partition.spec == FixedWindow(limit, 1.0)
        assert partition.factory(limit, permits.ManualClock()).available_permits() == limit


def test_a_partitioner_may_return_partition_of() -> None:
    clock = permits.ManualClock()
    spec = FixedWindow(2, 10.0)
    limiter = PartitionedLimiter(lambda user: Partition.of(user, spec), clock=clock)
    assert limiter.acquire("a", 2) and not limiter.acquire("a") and limiter.acquire("b")
    clock.advance(10.0)
    assert limiter.acquire("a", 2)


# ---- per_key(spec) ----


@pytest.mark.parametrize("kind", KINDS)
def test_per_key_takes_a_spec_and_keeps_every_key_in_the_engine(kind: str) -> None:
    clock = permits.ManualClock()
    spec = spec_of(kind)
    limiter = PartitionedLimiter.per_key(spec, idle_timeout=1.0, clock=clock)
    assert isinstance(limiter, PerKeyLimiter) and limiter.spec == spec
    held = limiter.acquire("a", 3), limiter.acquire("b", 3)  # (a concurrency lease is held while referenced)
    assert all(held)
    assert not limiter.acquire("a")
    assert limiter.partition_count == 2


@pytest.mark.parametrize("kind", KINDS)
def test_per_key_of_a_spec_is_per_key_of_its_partition(kind: str) -> None:
    by_spec, by_partition = permits.ManualClock(), permits.ManualClock()
    a = PartitionedLimiter.per_key(spec_of(kind), clock=by_spec)
    b = PartitionedLimiter.per_key(partition_of(kind, None), clock=by_partition)
    held = []  # concurrency permits stay taken
    for step in range(40):
        key = "k" if step % 3 else ("k", step % 2)
        got = a.acquire(key, step % 3), b.acquire(key, step % 3)
        assert (got[0].acquired, got[0].reason, got[0].retry_after) == (
            got[1].acquired,
            got[1].reason,
            got[1].retry_after,
        )
        held.append(got)
        by_spec.advance(0.3)
        by_partition.advance(0.3)


def test_per_key_takes_the_queue_options_from_partition_of() -> None:
    clock = permits.ManualClock()
    queued = PartitionedLimiter.per_key(Partition.of(None, FixedWindow(1, 1.0), queue_limit=1), clock=clock)
    unqueued = PartitionedLimiter.per_key(Partition.of(None, FixedWindow(1, 1.0), queue_limit=0), clock=clock)
    bare = PartitionedLimiter.per_key(FixedWindow(1, 1.0), clock=clock)  # a bare spec: no bound on the queue
    assert queued.acquire("a") and unqueued.acquire("a") and bare.acquire("a")
    assert queued.wait("a", timeout=0).reason == "timeout"  # it queued, and its time ran out
    assert unqueued.wait("a", timeout=0).reason == "queue_full"
    assert bare.wait("a", 1, timeout=0).reason == "timeout"


def test_per_key_refuses_what_is_no_template() -> None:
    with pytest.raises(TypeError, match="template"):
        PartitionedLimiter.per_key(permits.FixedWindowLimiter(1, 1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key None"):
        PartitionedLimiter.per_key(Partition.of("k", FixedWindow(1, 1.0)))
    assert not isinstance(PartitionedLimiter.per_key(Partition.no_limiter(None)), PerKeyLimiter)


# ---- the module ----


def test_a_type_checker_sees_each_specs_limiter_class(tmp_path: Path) -> None:
    source = tmp_path / "snippet.py"
    source.write_text(
        textwrap.dedent(
            """
            import permits
            from permits.specs import Concurrency, TokenBucket

            bucket = TokenBucket(10, 10, 1.0).limiter(auto_replenishment=False)
            reveal_type(bucket)
            reveal_type(bucket.spec)
            reveal_type(Concurrency(2).limiter())
            per_user = permits.PartitionedLimiter.per_key(TokenBucket(5, 5, 1.0))
            partition = permits.Partition.of("k", Concurrency(2), queue_limit=3)
            """
        )
    )
    out, err, status = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(source)])
    assert status == 0, out + err
    assert 'Revealed type is "permits.engine_limiters.TokenBucketLimiter"' in out
    assert 'Revealed type is "permits.specs.TokenBucket"' in out
    assert 'Revealed type is "permits.engine_limiters.ConcurrencyLimiter"' in out


def test_specs_is_a_submodule_of_permits() -> None:
    child = run_ok(
        """
        import permits
        print(permits.specs.TokenBucket(1, 1, 1.0))
        import permits.specs
        from permits.specs import Concurrency
        print(Concurrency(2).limiter())
        """
    )
    assert child.lines() == [
        "TokenBucket(token_limit=1, tokens_per_period=1, replenishment_period=1.0)",
        "<ConcurrencyLimiter name='default'>",
    ]
    assert "specs" in permits.__all__
    assert set(permits.specs.__all__) >= {"TokenBucket", "FixedWindow", "SlidingWindow", "SlidingWindowCounter"}
