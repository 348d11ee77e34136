"""``RedisBackend.take_soon``: an asyncio take sent down the loop's pipeline (redis_pipeline) when the
client is redis-py's plain asyncio client, else run in a task of its own (soon.by_task).

A take goes down the pipeline once the backend has made its first step (which asks the server's
eviction policy and learns whether it runs functions); it is sent as an FCALL, or an EVALSHA where the
server has no functions. Whatever the pipeline cannot settle from the reply alone, a function or script
the server lost (a restart, FUNCTION FLUSH) or a connection that failed, is taken again by the backend's
own step in a task (which loads it again, or retries as the client's retry policy says); a deadline that
passed is the store's timeout, as for any step.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

import redis.exceptions

from . import soon
from .backend import Outcome
from .redis_pipeline import Pipeline
from .redis_steps import FW_TAKE, TAKE
from .redis_wire import packed, pipelined

if TYPE_CHECKING:
    from .redis_backend import Name, RedisBackend
    from .rules import Rule


class _Take:
    """One take in the pipeline (a redis_pipeline.Entry)."""

    __slots__ = ("answer", "backend", "lid", "n", "name", "now_ns", "rule", "undo")

    def __init__(
        self,
        backend: RedisBackend,
        name: Name,
        rule: Rule,
        n: int,
        lid: str | None,
        now_ns: int | None,
        undo: soon.Undo,
        answer: asyncio.Future[Outcome],
    ) -> None:
        self.backend, self.name, self.rule, self.n, self.lid = backend, name, rule, n, lid
        self.now_ns, self.undo, self.answer = now_ns, undo, answer

    def dropped(self) -> bool:
        return self.answer.done()

    def reply(self, reply: Any) -> None:
        answer = self.answer
        if isinstance(reply, redis.exceptions.ResponseError):
            self.fail(reply)
            return
        try:
            out = self.backend._outcome(self.name, self.rule, reply)
        except Exception as exc:  # (a signature mismatch: ValueError)
            if not answer.done():
                answer.set_exception(exc)
            return
        soon.settle(answer, out, self.n, self.lid, self.undo)

    def fail(self, exc: BaseException) -> None:
        answer = self.answer
        if not isinstance(exc, Exception):  # (the loop's tasks cancelled, or the process ending)
            answer.cancel()
        elif isinstance(exc, TimeoutError):
            if not answer.done():
                error = self.backend._unavailable(exc)
                error.__cause__ = exc  # (as raise ... from exc)
                answer.set_exception(error)
        elif not answer.cancelled():
            # Taken again by the backend's own step, into the same answer (a grant for a caller gone
            # meanwhile is given back): it loads a lost function or script, retries a failed
            # connection, and says what else the server said.
            step = self.backend.take_async(self.name, self.rule, self.n, self.lid, self.now_ns)
            soon.by_task(step, self.n, self.lid, self.undo, answer)


def take_soon(
    backend: RedisBackend, name: Name, rule: Rule, n: int, lid: str | None, now_ns: int | None, undo: soon.Undo
) -> asyncio.Future[Outcome]:
    pipeline = _pipeline(backend) if backend._eviction_asked and not backend._replicas else None
    if pipeline is None:
        return soon.by_task(backend.take_async(name, rule, n, lid, now_ns), n, lid, undo)
    if rule.kind == "fixed_window":
        script = FW_TAKE
        keys, args = backend._fw_args(name, rule, n, now_ns)
    else:
        script = TAKE
        keys, args = backend._take_args(name, rule, n, lid, now_ns)
    command = backend._waiting_command(script, keys, args)  # (FCALL, or EVALSHA without functions)
    answer: asyncio.Future[Outcome] = pipeline.loop.create_future()
    pipeline.send(packed(command, pipeline.encoder)[0], _Take(backend, name, rule, n, lid, now_ns, undo, answer))
    return answer


def _pipeline(backend: RedisBackend) -> Pipeline | None:
    """The pipeline of the running loop and the backend's client; None when its client is not one
    whose connections can be written to directly (redis_wire.pipelined)."""
    loop = asyncio.get_running_loop()
    kept = backend._pipelines
    pipeline = kept.get(loop)
    if pipeline is None:
        client = backend._client
        if not pipelined(client):
            return None
        with backend._lock:
            pipeline = kept.setdefault(loop, Pipeline(client.connection_pool, loop, backend._timeout))
    return pipeline


def pipelines() -> weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pipeline]:
    """A backend's pipelines, one per loop (a closed loop's goes with it)."""
    return weakref.WeakKeyDictionary()
