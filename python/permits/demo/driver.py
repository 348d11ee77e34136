"""The driver: offers the traffic to every limiter, on real or manual time."""

from __future__ import annotations

import asyncio
import heapq
import time

import permits

from .display import _Display
from .results import DemoResult, RowResult, _Row
from .scenario import HOLD, traffic

TICK = 0.01


class _Driver:
    """Offers the traffic to every limiter, on real or manual time."""

    def __init__(
        self,
        seconds: float,
        rows: list[_Row],
        clock: permits.ManualClock | None,
        display: _Display | None,
    ) -> None:
        self.seconds = seconds
        self.rows = rows
        self.clock = clock
        self.display = display
        self.arrivals = traffic(seconds)
        self.offered_at: list[float] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.held: list[tuple[float, int, permits.Lease]] = []
        self._held_seq = 0
        self._t0 = clock.now() if clock is not None else time.monotonic()

    def now(self) -> float:
        if self.clock is not None:
            return self.clock.now() - self._t0
        return time.monotonic() - self._t0

    async def sleep(self, seconds: float) -> None:
        if self.clock is None:
            await asyncio.sleep(seconds)
            return
        self.clock.advance(seconds)
        # let the waiters the engine just woke run their continuations
        for _ in range(3):
            await asyncio.sleep(0)

    def result(self) -> DemoResult:
        return DemoResult(self.seconds, self.offered_at, [r.result for r in self.rows])

    # -- one request, offered to every limiter

    def _arrive(self, t: float) -> None:
        self.offered_at.append(t)
        for row in self.rows:
            res = row.result
            if res.mode == "queue":
                task = asyncio.ensure_future(self._queued_request(row, t))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                continue
            lease = row.limiter.acquire()
            if lease:
                res.granted_at.append(t)
                if res.mode == "hold":
                    self._held_seq += 1
                    heapq.heappush(self.held, (t + HOLD, self._held_seq, lease))
            else:
                self._rejected(res, t, lease)

    def _rejected(self, res: RowResult, t: float, lease: permits.Lease) -> None:
        res.rejected_at.append(t)
        res.last_retry_after = lease.retry_after
        res.last_reject_time = t
        reason = lease.reason or "?"
        res.reasons[reason] = res.reasons.get(reason, 0) + 1

    async def _queued_request(self, row: _Row, t: float) -> None:
        res = row.result
        lease: permits.Lease | None
        try:
            lease = await row.limiter.wait_async()
        except permits.LimiterClosedError:
            lease = None
        if lease is None or (not lease and lease.reason == "closed"):
            res.unfinished += 1
        elif lease:
            done = self.now()
            res.granted_at.append(done)
            res.total_wait += max(0.0, done - t)
        else:
            self._rejected(res, t, lease)

    def _sample_queues(self, t: float) -> None:
        for row in self.rows:
            res = row.result
            if res.mode == "queue":
                res.queued = row.limiter.statistics().current_queued_count
                res.queued_peak = max(res.queued_peak, res.queued)
                if not res.queued_over_time or res.queued_over_time[-1][1] != res.queued:
                    res.queued_over_time.append((t, res.queued))

    def _release_due(self, t: float) -> None:
        while self.held and self.held[0][0] <= t:
            _, _, lease = heapq.heappop(self.held)
            lease.release()

    # -- the loop

    async def run(self) -> DemoResult:
        arrivals = self.arrivals
        i = 0
        next_draw = self.display.first if self.display is not None else 0.0
        try:
            while True:
                t = self.now()
                if t >= self.seconds:
                    break
                while i < len(arrivals) and arrivals[i] <= t:
                    self._arrive(t)
                    i += 1
                self._release_due(t)
                self._sample_queues(t)
                if self.display is not None and t >= next_draw:
                    self.display.update(self.result(), t)
                    next_draw = t + self.display.every
                await self.sleep(TICK)
        finally:
            await self._shutdown()
        return self.result()

    async def _shutdown(self) -> None:
        self._sample_queues(min(self.now(), self.seconds))
        while self.held:
            heapq.heappop(self.held)[2].release()
        for row in self.rows:
            row.limiter.close()  # queued requests complete with failed leases ("closed")
        if self.tasks:
            pending = set(self.tasks)
            if self.clock is not None:
                for _ in range(10):
                    await asyncio.sleep(0)
                pending = {task for task in pending if not task.done()}
            if pending:
                _, pending = await asyncio.wait(pending, timeout=2.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
