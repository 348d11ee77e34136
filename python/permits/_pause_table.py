"""The ``Retry-After`` pauses of a client's keys: when each key's pause ends, on a limiter's clock.

A dict holds the truth (key -> the end of its pause, in the clock's nanoseconds); a heap of
(end, sequence, key) entries finds the pauses that have ended. A pause that ends is dropped when
it is read, or when a later ``pause`` finds it at the top of the heap; a pause made longer leaves
its older entry in the heap, skipped when it comes out (lazy deletion). So setting a pause costs
O(log n) amortised, however many keys are paused: a crawler pausing thousands of hosts never
rebuilds the table. The heap is rebuilt from the dict only when stale entries outnumber the live
ones, which keeps it at most about twice the table and costs O(1) per pause amortised.
"""

from __future__ import annotations

import heapq
import itertools
import threading

#: The heap is rebuilt when it holds more than twice the live pauses plus this many entries.
_SLACK = 64


class PauseTable:
    """Per key, the clock time (ns) its pause ends; thread-safe (the blocking clients share one
    between threads)."""

    __slots__ = ("_ends", "_heap", "_lock", "_order")

    def __init__(self) -> None:
        self._ends: dict[object, int] = {}
        # (end, sequence, key): the sequence breaks ties, so keys (of any type) are never compared
        self._heap: list[tuple[int, int, object]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Keys with a pause not yet dropped (an ended pause may still count until it is dropped)."""
        return len(self._ends)

    def extend(self, key: object, until_ns: int, now_ns: int) -> None:
        """``key`` is paused until ``until_ns`` (a longer pause already set stays)."""
        with self._lock:
            self._drop_ended(now_ns)
            if until_ns <= max(self._ends.get(key, now_ns), now_ns):
                return
            self._ends[key] = until_ns
            heapq.heappush(self._heap, (until_ns, next(self._order), key))
            if len(self._heap) > 2 * len(self._ends) + _SLACK:
                self._heap = [(end, next(self._order), k) for k, end in self._ends.items()]
                heapq.heapify(self._heap)

    def until_ns(self, key: object, now_ns: int) -> int | None:
        """When ``key``'s pause ends, or None when it is not paused (an ended pause is dropped)."""
        with self._lock:
            end = self._ends.get(key)
            if end is None:
                return None
            if end <= now_ns:
                del self._ends[key]  # its heap entry goes when it reaches the top
                return None
            return end

    def _drop_ended(self, now_ns: int) -> None:
        heap, ends = self._heap, self._ends
        while heap and heap[0][0] <= now_ns:
            end, _, key = heapq.heappop(heap)
            if ends.get(key) == end:  # not made longer since (then a later entry stands for it)
                del ends[key]
