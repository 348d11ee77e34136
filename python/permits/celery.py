"""Celery: ``permits.celery.rate_limited``, a task decorator that never blocks a worker (extra
``[celery]``).

A task over its limit is not run and not waited for: it is retried (``task.retry``) with a
``countdown`` of the refusal's ``retry_after``, so the worker goes on with other tasks meanwhile
(celery #5732: Celery's own ``rate_limit`` holds tasks in the worker, one limit per worker). With a
shared-memory, Redis or PostgreSQL limiter the limit holds across workers and hosts::

    store = RedisStore(redis.Redis())

    @app.task
    @rate_limited(store.limiter("api", "10/second"))
    def fetch(url): ...

    @app.task
    @rate_limited("2/second", key=lambda url: urlsplit(url).hostname)   # a limit per host
    def crawl(url): ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import celery

from ._rates import LimiterLike, limiter_of
from .keyed_limiter import KeyedRateLimiter
from .rate_limiter import RateLimiter

F = TypeVar("F", bound=Callable[..., Any])
#: The countdown of a refusal that says no retry_after (a concurrency limit: a release frees it).
RETRY_WITHOUT_HINT = 1.0


def rate_limited(
    limiter: LimiterLike, *, key: Callable[..., object] | None = None, permit_count: int = 1
) -> Callable[[F], F]:
    """The task's runs limited by ``limiter`` (a limiter, a spec or a rate; a rate or a spec makes a
    per-key limiter when ``key`` is given, else one limiter for every run of the task). ``key``
    receives the task's arguments (as the function does, ``self`` first for a bound task) and returns
    the key of a keyed limiter. A run refused is retried with ``countdown`` = the refusal's
    ``retry_after`` (1 s when it says none); these retries do not count against the task's
    ``max_retries``. A concurrency limiter's permit is held while the task runs. Put it under
    ``@app.task``."""
    made = limiter_of(limiter, per_key=key is not None)
    if not isinstance(made, RateLimiter | KeyedRateLimiter):
        raise TypeError(
            f"limiter must be a permits limiter, a spec or a rate such as '10/second', got {type(limiter).__name__}"
        )
    if isinstance(made, KeyedRateLimiter) and key is None:
        raise TypeError("a keyed limiter needs key=: key(*task_args, **task_kwargs) -> the key")
    if key is not None and not callable(key):
        raise TypeError(f"key must be callable (key(*args, **kwargs) -> key) or None, got {type(key).__name__}")
    if isinstance(permit_count, bool) or not isinstance(permit_count, int) or permit_count < 1:
        raise ValueError(f"permit_count must be an int of at least 1, got {permit_count!r}")

    def decorate(function: F) -> F:
        if not callable(function):
            raise TypeError(f"rate_limited() decorates a task's function, got {type(function).__name__}")

        @functools.wraps(function)
        def limited(*args: Any, **kwargs: Any) -> Any:
            if isinstance(made, KeyedRateLimiter):
                assert key is not None
                lease = made.acquire(key(*args, **kwargs), permit_count)
            else:
                lease = made.acquire(permit_count)
            if not lease:
                task = celery.current_task  # (a proxy: false when no task is running)
                if not task:  # called directly, not by a worker: nothing to retry
                    raise RuntimeError(f"rate_limited: refused ({lease.reason}), and not run by a Celery worker")
                countdown = RETRY_WITHOUT_HINT if lease.retry_after is None else max(lease.retry_after, 0.001)
                # One retry more than it has had: a refusal is never what ends a task.
                raise task.retry(countdown=countdown, max_retries=task.request.retries + 1)
            with lease:
                return function(*args, **kwargs)

        limited.limiter = made  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate


__all__ = ["rate_limited"]
