"""A take's outcome as a future the caller awaits (``Backend.take_soon``), whose cancellation never
loses a grant: a grant the server makes after the caller gave up is handed to the caller's ``Undo``,
which gives its permits back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from .backend import Outcome

#: Gives back a grant whose caller had gone: (the outcome, the permits asked, the lease id).
Undo = Callable[[Outcome, int, "str | None"], None]


def settle(answer: asyncio.Future[Outcome], out: Outcome, n: int, lid: str | None, undo: Undo) -> None:
    """Hands ``out`` to the caller awaiting ``answer`` or, when it has gone, a grant to ``undo``."""
    if not answer.done():
        answer.set_result(out)
    elif answer.cancelled() and out.granted and n:
        try:
            undo(out, n, lid)
        except Exception as exc:  # (its own failure is logged where it happens; nothing else to do)
            answer.get_loop().call_exception_handler(
                {"message": "permits: giving back a grant whose caller had gone failed", "exception": exc}
            )


def by_task(
    step: Coroutine[Any, Any, Outcome],
    n: int,
    lid: str | None,
    undo: Undo,
    answer: asyncio.Future[Outcome] | None = None,
) -> asyncio.Future[Outcome]:
    """The outcome of ``step``, run in a task of its own, as ``answer`` (a new future by default): a
    cancellation of the caller cancels the answer, never the step (asyncio.shield's guarantee, one
    hop shorter)."""
    loop = asyncio.get_running_loop()
    if answer is None:
        answer = loop.create_future()
    task = loop.create_task(_answering(step, answer, n, lid, undo))
    _running.add(task)
    task.add_done_callback(_running.discard)
    return answer


#: The steps' tasks (a task only the loop holds may be collected before it ends).
_running: set[asyncio.Task[None]] = set()


async def _answering(
    step: Coroutine[Any, Any, Outcome], answer: asyncio.Future[Outcome], n: int, lid: str | None, undo: Undo
) -> None:
    try:
        out = await step
    except asyncio.CancelledError:
        answer.cancel()
        raise
    except Exception as exc:
        if not answer.done():
            answer.set_exception(exc)
        return
    settle(answer, out, n, lid, undo)
