"""``permits.chain(a, b, ...)`` of plain limiters (docs/design.md, Chains and Refunds), over one
LimiterModel per limiter.

Rules:

* ``acquire(n)`` asks each limiter in order and stops at the first failure, which is the chain's
  lease (reason, retry_after); what the earlier limiters granted is given back, latest first
  (LimiterModel.give_back: tokens back, a window's or segment's count back while it is the current
  one, concurrency permits released). A grant given back still counts as a successful lease of
  that limiter (it was granted). Success: one lease of n permits.
* ``wait(n)`` waits in each limiter in turn: the next one is asked only once the previous one
  granted; a failure gives back the earlier grants, at the time it happens. (The driver gives every
  limiter after the first queue_limit 0, so only the first one queues: the others answer at once,
  when the chain's waiter resumes after the first one's grant, i.e. at the end of the operation
  that granted it, in the order the first limiter granted.)
* Releasing a successful chain lease releases the inner leases in reverse order.
* Statistics: available = the minimum, queued and failed = the sums, successful = the last
  limiter's. idle_duration: None if any limiter is in use, else the minimum.
* close() closes the chain only: its limiters stay open; later calls on the chain raise; its
  pending waits end at once with a failed lease, reason "closed", giving back what they took.
* A partitioned limiter in the chain (a KeyedModel, after the first limiter) is asked for the
  request's key; the chain's statistics of a key use that key's partition.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from .keyed import KeyedModel
from .queue import Closed, LimiterModel, Outcome


@dataclass(frozen=True)
class Grant:
    model: LimiterModel  # the limiter (or partition) that granted
    n: int
    taken_at: int  # its state time at the grant
    waiter: object | None = None  # a queued grant's waiter id (its lease), else None


@dataclass
class ChainModel:
    models: list[Any]  # LimiterModel, or KeyedModel after the first
    closed: bool = False
    #: (waiter id, outcome) of every chain wait, in the order they completed.
    completions: list[tuple[int, Outcome]] = field(default_factory=list)
    #: The grants behind every successful chain lease, by lease id (acquire: ("acquire", step)).
    grants: dict[object, list[Grant]] = field(default_factory=dict)
    #: Chain waiters queued in the first limiter: waiter id -> permits.
    pending: dict[int, tuple[int, Hashable]] = field(default_factory=dict)
    _seen: int = 0  # the first limiter's completions already followed up

    def _check_open(self) -> None:
        if self.closed:
            raise Closed

    def at(self, i: int, key: Hashable) -> LimiterModel:
        """Limiter i, or its partition of `key` (created if absent; no bound on partitions)."""
        model = self.models[i]
        if isinstance(model, KeyedModel):
            part = model._part(key)
            assert part is not None
            return part.model
        assert isinstance(model, LimiterModel)
        return model

    def _refund(self, grants: list[Grant]) -> None:
        for g in reversed(grants):
            g.model.give_back(g.n, g.taken_at)

    def _rest(self, lease_id: object, n: int, grants: list[Grant], start: int, wait: bool, key: Hashable) -> Outcome:
        for i in range(start, len(self.models)):
            model = self.at(i, key)
            if wait:
                outcome = model.wait((lease_id, i), n)
                assert outcome is not None, "only the first limiter of a chain queues"
            else:
                outcome = model.acquire(n)
            if not outcome.acquired:
                self._refund(grants)
                return outcome
            grants.append(Grant(model, n, model.state_time))
        self.grants[lease_id] = grants
        return Outcome(True, n)

    def acquire(self, lease_id: object, n: int, key: Hashable = None) -> Outcome:
        self._check_open()
        outcome = self._rest(lease_id, n, [], 0, wait=False, key=key)
        self.follow_up()  # a refund may have served the first limiter's queue
        return outcome

    def wait(self, waiter_id: int, n: int, key: Hashable = None) -> None:
        self._check_open()
        self.pending[waiter_id] = (n, key)
        self.models[0].wait(waiter_id, n)
        self.follow_up()

    def follow_up(self) -> None:
        """Chain waiters whose first grant (or failure) came: they go on, in that order."""
        first = self.models[0]
        while self._seen < len(first.completions):
            wid, outcome = first.completions[self._seen]
            self._seen += 1
            if wid not in self.pending:
                continue
            n, key = self.pending.pop(wid)
            if outcome.acquired:
                grant = Grant(first, n, first.granted_at[wid], wid)
                outcome = self._rest(wid, n, [grant], 1, wait=True, key=key)
            self.completions.append((wid, outcome))

    def cancel(self, waiter_id: int) -> None:
        self.pending.pop(waiter_id)
        self.models[0].cancel(waiter_id)
        self.follow_up()

    def release(self, lease_id: object) -> None:
        for g in reversed(self.grants[lease_id]):
            g.model.release(g.n)
        self.follow_up()

    def advance(self, dt: int) -> None:
        for model in self.models:
            model.advance(dt)
        self.follow_up()

    def close(self) -> None:
        """The chain's pending waits end at once with "closed", in the order they started: each
        leaves the first limiter's queue (which may serve a later one: that grant goes back)."""
        self.closed = True
        first = self.models[0]
        closing = dict(sorted(self.pending.items()))
        self.pending.clear()
        seen = len(first.completions)
        for wid, (n, _) in closing.items():
            first.cancel(wid)
            for granted_wid, outcome in first.completions[seen:]:
                if granted_wid in closing and outcome.acquired:
                    first.give_back(closing[granted_wid][0], first.granted_at[granted_wid])
            seen = len(first.completions)
            self.completions.append((wid, Outcome(False, n, "closed", None)))
        self._seen = len(first.completions)

    def pending_ids(self) -> list[int]:
        return sorted(self.pending)

    def statistics(self, key: Hashable = None) -> tuple[int, int, int, int]:
        self._check_open()
        stats = [self.at(i, key).statistics() for i in range(len(self.models))]
        return (
            min(s[0] for s in stats),
            sum(s[1] for s in stats),
            stats[-1][2],
            sum(s[3] for s in stats),
        )

    def idle_duration(self) -> int | str | None:
        """ "unknown" when that depends on a limiter's idle duration after a refund (queue.py)."""
        self._check_open()
        durations = [m.idle_duration() for m in self.models]
        if any(d is None for d in durations):
            return None
        if not all(m.idle_known for m in self.models):
            return "unknown"
        return min(d for d in durations if d is not None)
