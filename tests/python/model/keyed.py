"""A partitioned limiter (docs/design.md, Partitions): a LimiterModel per key,
created on first use (anchored at that time), dropped when fully idle for longer than the idle
timeout, and at most ``max_partitions`` of them.

Rules:

* Any use of a key (acquire, wait, statistics or available_permits of that key) creates its
  partition when absent. At the bound, a new key takes the place of a fully idle partition (however
  briefly idle) if there is one; otherwise the request fails with reason ``partition_limit``, no
  partition is created and nothing is counted.
* Which idle partition gives its place is not specified: ``place_candidates`` lists them and the
  driver follows every choice (``victim``), keeping the choices the real limiter agrees with.
* A partition whose idle duration (LimiterModel.idle_duration) is longer than the idle timeout is
  evicted; ManualClock.advance performs the evictions that have come due. Eviction keeps the
  partition's successful and failed counts in the totals. A key used again gets a new partition.
* close() closes every partition (their queued requests fail with ``closed``, in serving order);
  later calls raise.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from .queue import Closed, LimiterModel, Outcome


@dataclass
class Part:
    model: LimiterModel
    touched: int


@dataclass
class KeyedModel:
    make: Callable[[int], LimiterModel]  # a partition's model, created at the given time
    idle_timeout: int
    max_partitions: int | None
    now: int
    parts: dict[Hashable, Part] = field(default_factory=dict)
    evicted_successful: int = 0
    evicted_failed: int = 0
    closed: bool = False
    #: Per key, (waiter id, outcome) of every wait in the order they completed (all partitions).
    completions: dict[Hashable, list[tuple[int, Outcome]]] = field(default_factory=dict)
    #: The idle partition that gives its place at the bound, when there is a choice.
    victim: Hashable | None = None

    # ---- partitions ----
    def _evictable(self, part: Part) -> bool:
        idle = part.model.idle_duration()
        return idle is not None and idle > self.idle_timeout

    def evict_due(self) -> list[Hashable]:
        """Evicts the partitions due. (Returns the partitions that may or may not be gone: none.)"""
        for key in [k for k, p in self.parts.items() if self._evictable(p)]:
            self._drop(key)
        return []

    def evict(self, keys: list[Hashable]) -> None:
        for key in keys:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        part = self.parts.pop(key)
        self.evicted_successful += part.model.successful
        self.evicted_failed += part.model.failed

    def place_candidates(self, key: Hashable) -> list[Hashable]:
        """The idle partitions one of which gives its place if ``key`` is used now (none needed:
        [None])."""
        if self.closed or key in self.parts or self.max_partitions is None or len(self.parts) < self.max_partitions:
            return [None]
        return [k for k, p in self.parts.items() if p.model.idle_duration() is not None]

    def _part(self, key: Hashable) -> Part | None:
        """The key's partition, created if absent; None when the bound leaves no place."""
        if self.closed:
            raise Closed
        part = self.parts.get(key)
        if part is None:
            if self.max_partitions is not None and len(self.parts) >= self.max_partitions:
                candidates = self.place_candidates(key)
                if not candidates:
                    return None
                victim = self.victim if self.victim is not None else candidates[0]
                assert victim in candidates and (len(candidates) == 1 or self.victim is not None)
                self._drop(victim)
            model = self.make(self.now)
            model.completions = self.completions.setdefault(key, [])
            part = self.parts[key] = Part(model, self.now)
        part.touched = self.now
        self.victim = None
        return part

    # ---- operations ----
    def acquire(self, key: Hashable, n: int) -> Outcome:
        part = self._part(key)
        if part is None:
            return Outcome(False, n, "partition_limit")
        return part.model.acquire(n)

    def wait(self, waiter_id: int, key: Hashable, n: int, timeout: int | None = None) -> Outcome | None:
        part = self._part(key)
        if part is None:
            outcome = Outcome(False, n, "partition_limit")
            self.completions.setdefault(key, []).append((waiter_id, outcome))
            return outcome
        return part.model.wait(waiter_id, n, timeout)

    def statistics(self, key: Hashable) -> tuple[int, int, int, int]:
        part = self._part(key)
        return (0, 0, 0, 0) if part is None else part.model.statistics()

    def available(self, key: Hashable) -> int:
        part = self._part(key)
        return 0 if part is None else part.model.available()

    def key_of_waiter(self, waiter_id: int) -> Hashable | None:
        for key, part in self.parts.items():
            if waiter_id in part.model.pending_ids():
                return key
        return None

    def pending_ids(self) -> list[int]:
        return sorted(wid for part in self.parts.values() for wid in part.model.pending_ids())

    def cancel(self, waiter_id: int) -> None:
        key = self.key_of_waiter(waiter_id)
        if key is not None:
            self.parts[key].model.cancel(waiter_id)

    def release(self, key: Hashable, n: int) -> None:
        """A concurrency lease's first release: its partition is still there (not idle while held)."""
        part = self.parts.get(key)
        if part is not None and not self.closed:
            part.model.release(n)

    def advance(self, dt: int) -> list[Hashable]:
        """Returns the partitions that may or may not have been evicted (none: eviction is exact)."""
        self.now += dt
        for part in self.parts.values():
            part.model.advance(dt)
        return [] if self.closed else self.evict_due()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for part in self.parts.values():
            part.model.close()
        self.parts.clear()

    # ---- totals ----
    def partition_count(self) -> int:
        return len(self.parts)

    def totals(self) -> tuple[int, int, int, int]:
        if self.closed:
            raise Closed
        stats = [p.model.statistics() for p in self.parts.values()]
        return (
            sum(s[0] for s in stats),
            sum(s[1] for s in stats),
            self.evicted_successful + sum(s[2] for s in stats),
            self.evicted_failed + sum(s[3] for s in stats),
        )
