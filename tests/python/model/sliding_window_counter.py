"""Sliding window counter: fixed windows of W ns back to back from the anchor (construction); at
elapsed time e into window w, n permits are granted iff

    previous * (W - e) + (current + n) * W <= permit_limit * W      (integers, no rounding)

with previous and current the permits granted in windows w - 1 and w. ``available`` is the largest
such n (floor), and 0 when none."""

from __future__ import annotations

from collections import Counter


class SlidingWindowCounterModel:
    timed = True

    def __init__(self, permit_limit: int, window_ns: int, anchor_ns: int) -> None:
        self.limit = permit_limit
        self.window = window_ns
        self.anchor = anchor_ns
        self.taken: Counter[int] = Counter()  # window index -> permits granted in it

    def available(self, t: int) -> int:
        w, e = divmod(t - self.anchor, self.window)
        previous, current = self.taken[w - 1], self.taken[w]
        room = self.limit * self.window - previous * (self.window - e) - current * self.window
        return max(0, room // self.window)

    def take(self, n: int, t: int) -> None:
        assert 0 <= n <= self.available(t)
        self.taken[(t - self.anchor) // self.window] += n

    def refund(self, n: int, taken_at: int, t: int) -> None:
        """The count goes down only while the window of the grant is the current one."""
        w = (t - self.anchor) // self.window
        if (taken_at - self.anchor) // self.window == w:
            self.taken[w] -= n
            assert self.taken[w] >= 0
