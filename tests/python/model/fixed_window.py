"""Fixed window: windows of ``window`` ns back to back from the anchor (construction); each grants
at most ``permit_limit`` permits."""

from __future__ import annotations

from collections import Counter


class FixedWindowModel:
    timed = True

    def __init__(self, permit_limit: int, window_ns: int, anchor_ns: int) -> None:
        self.limit = permit_limit
        self.window = window_ns
        self.anchor = anchor_ns
        self.taken: Counter[int] = Counter()  # window index -> permits granted in it

    def _index(self, t: int) -> int:
        return (t - self.anchor) // self.window

    def available(self, t: int) -> int:
        return self.limit - self.taken[self._index(t)]

    def take(self, n: int, t: int) -> None:
        assert 0 <= n <= self.available(t)
        self.taken[self._index(t)] += n

    def refund(self, n: int, taken_at: int, t: int) -> None:
        """The count goes down only while the window of the grant is the current one."""
        if self._index(taken_at) == self._index(t):
            self.taken[self._index(t)] -= n
            assert self.taken[self._index(t)] >= 0
