"""Sliding window: segments of ``window // segments_per_window`` ns from the anchor (construction);
a permit taken in segment s counts until the start of segment s + segments_per_window."""

from __future__ import annotations

from collections import Counter


class SlidingWindowModel:
    timed = True

    def __init__(self, permit_limit: int, window_ns: int, segments_per_window: int, anchor_ns: int) -> None:
        self.limit = permit_limit
        self.segments = segments_per_window
        self.segment = window_ns // segments_per_window
        assert self.segment >= 1
        self.anchor = anchor_ns
        self.taken: Counter[int] = Counter()  # segment index -> permits granted in it

    def _segment(self, t: int) -> int:
        return (t - self.anchor) // self.segment

    def available(self, t: int) -> int:
        s = self._segment(t)
        in_window = sum(count for j, count in self.taken.items() if s - self.segments < j <= s)
        return self.limit - in_window

    def take(self, n: int, t: int) -> None:
        assert 0 <= n <= self.available(t)
        self.taken[self._segment(t)] += n

    def refund(self, n: int, taken_at: int, t: int) -> None:
        """The count goes down only while the segment of the grant is the current one."""
        if self._segment(taken_at) == self._segment(t):
            self.taken[self._segment(t)] -= n
            assert self.taken[self._segment(t)] >= 0
