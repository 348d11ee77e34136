"""The deadlines of a backend's asyncio steps: ``asyncio.timeout`` for many steps of one timeout
at once. asyncio.timeout makes a timer per step, and at thousands of steps a second the loop's
heap fills with the cancelled ones (each step paid more for its timer than for its round trip).
Here the steps of one loop queue in the order they start, which is their deadlines' order (they all
have the same timeout), and one timer serves them all: at the first live step's deadline, it drops
the steps that ended and cancels those past their deadline. Each step raises ``TimeoutError``
then, as in asyncio.timeout (a cancellation from elsewhere stays a cancellation: by the task's count)."""

from __future__ import annotations

import asyncio
import collections
import weakref
from types import TracebackType

#: Seconds between two cancellations of a step past its deadline that has not ended: a client
#: library may swallow one (redis-py cleaning up a connection to a hung server, in an await of its
#: own), and the caller must not wait on it for ever.
AGAIN_S = 0.05


class Step:
    """One step's deadline: ``with`` around the step, in the step's task."""

    __slots__ = ("_cancelling", "deadline", "fired", "task")

    def __init__(self, deadline: float, task: asyncio.Task[object]) -> None:
        self.deadline = deadline
        self.task: asyncio.Task[object] | None = task  # None once the step has ended
        self.fired = 0  # the cancellations the deadline made
        self._cancelling = task.cancelling()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        task, self.task = self.task, None
        if not self.fired:
            return
        assert task is not None
        left = task.cancelling()
        for _ in range(self.fired):  # (each of ours is taken back; one from elsewhere stays)
            left = task.uncancel()
        if kind is not None and issubclass(kind, asyncio.CancelledError) and left <= self._cancelling:
            raise TimeoutError("the step's deadline passed") from exc

    def cancel(self) -> None:
        if self.task is not None:
            self.fired += 1
            self.task.cancel()


class _Queue:
    """The steps of one loop, oldest first, and the timer at the first live one's deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._loop = loop
        self._seconds = seconds
        self._steps: collections.deque[Step] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> Step:
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("a step's deadline needs a task")
        step = Step(self._loop.time() + self._seconds, task)
        self._steps.append(step)
        if self._timer is None:
            self._timer = self._loop.call_at(step.deadline, self._sweep)
        return step

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        steps = self._steps
        while steps:
            step = steps[0]
            if step.task is not None and step.deadline > now:
                self._timer = self._loop.call_at(step.deadline, self._sweep)
                return
            steps.popleft()
            if step.task is not None:  # live, and past its deadline
                step.cancel()
                self._loop.call_at(now + AGAIN_S, self._again, step)

    def _again(self, step: Step) -> None:
        """A step cancelled at its deadline that has not ended yet: cancelled again."""
        if step.task is not None:
            step.cancel()
            self._loop.call_at(self._loop.time() + AGAIN_S, self._again, step)


class Deadlines:
    """The deadlines of ``seconds`` of one backend's steps, a queue per event loop."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()
        #: The last loop's queue (a WeakKeyDictionary look-up makes a weak reference every time).
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Queue] | None = None

    def start(self) -> Step:
        """The deadline of a step starting now in the running task."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0]() is loop:
            return last[1].start()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue(loop, self._seconds)
        self._last = weakref.ref(loop), queue
        return queue.start()
