"""Limiters are shared, never copied: a copy of a PartitionedLimiter would share its partitions
(closing the copy would loosen the original's limits), a chain its members. copy.copy,
copy.deepcopy and pickling are refused with a TypeError, as the engine's limiters refuse them."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import permits
from permits import Partition, PartitionedLimiter


def _partitioned() -> Any:
    return PartitionedLimiter(lambda r: Partition.concurrency(r, 1))


def _chain() -> Any:
    return permits.chain(permits.NoLimiter(), permits.NoLimiter())


def _chain_partitioned() -> Any:
    return permits.chain(_partitioned(), permits.NoLimiter())


def _no_limiter() -> Any:
    return permits.NoLimiter()


MAKERS: dict[str, Callable[[], Any]] = {
    "partitioned": _partitioned,
    "chain": _chain,
    "chain_partitioned": _chain_partitioned,
    "no_limiter": _no_limiter,
}
COPIES: dict[str, Callable[[Any], object]] = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("kind", list(MAKERS))
def test_copies_are_refused(kind: str, how: str) -> None:
    limiter = MAKERS[kind]()
    with pytest.raises(TypeError, match=f"cannot copy or pickle '{type(limiter).__name__}' object"):
        COPIES[how](limiter)


def test_a_partitioned_limiter_stays_whole() -> None:
    limiter = _partitioned()
    held = limiter.acquire("a")
    with pytest.raises(TypeError):
        copy.copy(limiter)
    assert not limiter.acquire("a")  # the original's limit holds
    held.release()
