"""Concurrency: ``permit_limit`` permits; only a lease's release brings them back (time never does)."""

from __future__ import annotations


class ConcurrencyModel:
    timed = False

    def __init__(self, permit_limit: int) -> None:
        self.limit = permit_limit
        self.free = permit_limit

    def available(self, t: int) -> int:
        return self.free

    def take(self, n: int, t: int) -> None:
        assert 0 <= n <= self.free
        self.free -= n

    def give_back(self, n: int) -> None:
        self.free += n
        assert self.free <= self.limit
