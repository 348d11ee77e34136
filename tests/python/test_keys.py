"""per_key keys: every str and every int is a key, and distinct keys never share a partition.

The engine keeps per-key state under an encoding of the key (tagged by type); these tests pin
down that the encoding takes every str (lone surrogates included: ``os.fsdecode``,
``surrogateescape``) and every int (beyond 4,300 digits; an int subclass counts by its value, not
its ``__str__``), that it is injective, and that a lease gives its permits back to its own key.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import permits
from permits import Partition, PartitionedLimiter

from _support import SAFETY, settle

SURROGATE = os.fsdecode(b"\xff")  # "\udcff"
HUGE = 10**5000  # beyond the int -> str digit limit (4,300)


class ConstantStr(int):
    """An int whose __str__ says nothing about its value."""

    def __str__(self) -> str:
        return "same"


class RaisingStr(int):
    def __str__(self) -> str:
        raise RuntimeError("no str for this int")


def per_key(**kwargs: Any) -> permits.PerKeyLimiter:
    limiter = PartitionedLimiter.per_key(Partition.concurrency(None, 1, queue_limit=1), **kwargs)
    assert isinstance(limiter, permits.PerKeyLimiter)
    return limiter


def assert_distinct(keys: list[Any]) -> None:
    """Each key gets its own permit: no two of them share a partition."""
    limiter = per_key()
    leases = []
    for key in keys:
        lease = limiter.acquire(key)
        assert lease, f"{key!r:.60} shares a partition with an earlier key"
        leases.append(lease)
    for key in keys:
        assert not limiter.acquire(key), f"{key!r:.60} is not one partition"
    for lease in leases:
        lease.release()
    assert limiter.statistics().current_available_permits == len(keys)


def test_strs_with_lone_surrogates_are_keys_distinct_from_every_other_str_and_bytes() -> None:
    passed = SURROGATE.encode("utf-8", "surrogatepass")  # b"\xed\xb3\xbf"
    assert_distinct(
        [
            SURROGATE,
            "\udcfe",
            "a\ud800b",
            "\ud800\udc00",  # a surrogate pair written as two code points: not "\U00010000"
            "\U00010000",
            "\xff",
            b"\xff",
            passed,
            passed.decode("latin-1"),
            "",
            (SURROGATE,),
            (SURROGATE, "x"),
            (passed,),
        ]
    )


def test_ints_of_any_size_are_keys() -> None:
    assert_distinct([HUGE, HUGE + 1, -HUGE, 2**63, 2**63 - 1, -(2**63), -(2**63) - 1, 2**64, str(2**63), (HUGE,)])


def test_an_int_subclass_is_the_key_of_its_value_whatever_its_str() -> None:
    assert_distinct([ConstantStr(2**70), ConstantStr(2**71), ConstantStr(5), RaisingStr(2**80)])
    limiter = per_key()
    held = limiter.acquire(ConstantStr(2**70))
    assert held
    assert not limiter.acquire(2**70), "an int subclass and its value are one key"
    held.release()
    assert limiter.acquire(RaisingStr(2**80))


def test_leases_of_such_keys_give_their_permits_back_to_their_own_key() -> None:
    limiter = per_key()
    keys = [SURROGATE, HUGE, ConstantStr(2**70), RaisingStr(2**90), (SURROGATE, HUGE)]
    for key in keys:
        lease = limiter.acquire(key)
        assert lease
        assert limiter.available_permits(key) == 0
        lease.release()
        assert limiter.available_permits(key) == 1
        assert limiter.statistics(key).total_successful_leases == 1
        again = limiter.acquire(key)
        assert again, "the permit did not go back to its key"
        again.release()


def test_such_keys_wait_and_are_woken_by_their_own_release() -> None:
    limiter = per_key()
    for key in [SURROGATE, HUGE, ConstantStr(2**70)]:
        held = limiter.acquire(key)
        waiter = limiter.wait(key, timeout=0)
        assert not waiter  # busy: the key is the same one for the wait path

        async def main(key: Any = key, held: permits.Lease = held) -> None:
            task = asyncio.ensure_future(_wait(limiter, key))
            await settle()
            assert not task.done()
            held.release()
            lease = await asyncio.wait_for(task, SAFETY)
            assert lease
            lease.release()

        asyncio.run(main())


async def _wait(limiter: permits.PerKeyLimiter, key: Any) -> permits.Lease:
    return await limiter.wait_async(key)


scalar_keys = (
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)  # surrogates included
    | st.binary(max_size=6)
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**70).flatmap(lambda n: st.sampled_from([n, -n]))
    # beyond the digit limit (built by map: hypothesis cannot show such an int as a literal)
    | st.tuples(st.sampled_from([4999, 5000]), st.sampled_from([1, -1]), st.booleans()).map(
        lambda t: t[1] * (10 ** t[0] + t[2])
    )
)
keys = st.recursive(scalar_keys, lambda inner: st.tuples(inner) | st.tuples(inner, inner), max_leaves=4)


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_two_keys_share_a_partition_exactly_when_they_are_equal(a: Any, b: Any) -> None:
    limiter = per_key()
    first = limiter.acquire(a)
    assert first
    second = limiter.acquire(b)
    assert bool(second) == (a != b)
    first.release()
    if second:
        second.release()
