"""Limiters whose state is in Redis (a single node, Sentinel or Cluster), shared by every process
and host that reaches it: ``RedisStore(client)``.

Each acquisition is one atomic Lua script on the server (its clock, its keys expiring on their
own; one limiter's keys in one Cluster slot); waits queue in each process and ask again when the
server's ``retry_after`` is up. Needs redis-py (``pip install permits[redis]``)::

    import redis, permits.redis
    store = permits.redis.RedisStore(redis.Redis())
    api = store.token_bucket("api", 100, 100, 1.0)
    with api.acquire() as lease:
        ...
"""

from __future__ import annotations

from typing import Any

from ._stores.redis_backend import RedisBackend
from ._stores.returns import Returns
from ._stores.server_store import ServerStore, check_timeout


class RedisStore(ServerStore):
    """Limiters on the Redis server of ``client`` (redis-py: ``redis.Redis``, ``redis.asyncio.Redis``,
    ``RedisCluster`` of either kind, or a Sentinel's ``master_for``). With a sync client use
    ``acquire``/``wait``; with an asyncio client ``acquire_async``/``wait_async``.

    ``prefix`` starts every key; ``timeout`` bounds each call to the server (seconds); ``on_error``
    says what an acquisition returns when the server cannot answer within it: ``"raise"``
    (``permits.BackendError``), ``"deny"`` (a failed lease, reason ``"backend_unavailable"``) or
    ``"allow"`` (an acquired lease with ``metadata["degraded"] = True``). ``clock``: a
    ``permits.ManualClock`` for tests (its time is sent to the server), else the server's time.

    ``reserve=N``: the time-based limiters (token bucket, windows) take their permits from the
    server N at a time and serve them in this process without a round trip, each batch only
    within the window, segment or refill period it was counted in, so a limit is never exceeded:
    it may only be under-used, by the permits a process holds unused (until they go back to the
    server: on close(), after a second idle, or when their window ends). Concurrency limiters ask
    the server every time. ``available_permits()`` is what a request in this process would find:
    the server's available permits and those this process holds (others do not find the latter).
    With a ManualClock, idle permits go back only when the test calls ``store._returns.return_now()``.

    ``wait_replicas=N``: a grant counts only once N replicas have it (Redis ``WAIT``, on the connection
    that made it, waiting at most half of ``timeout``): a failover that promotes a replica holding it
    keeps it (with N the number of replicas, any failover does).
    When fewer acknowledge in time, the grant is not trusted: its permits go back and the acquisition
    ends as ``on_error`` says (a ``permits.BackendError`` saying "only k of N replicas acknowledged").
    Refusals, refunds and renewals do not wait. None or 0: grants do not wait (Redis replicates
    asynchronously: a failover may lose the grants of the last moments).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "permits:",
        on_error: str = "raise",
        timeout: float = 1.0,
        reserve: int | None = None,
        clock: Any = None,
        wait_replicas: int | None = None,
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        self.timeout = check_timeout(timeout)
        """Seconds each call to the server may take (more than 0, at most 3600); past it, the
        acquisition ends as ``on_error`` says."""
        self.prefix = prefix
        """What every key this store writes on the server starts with."""
        self._backend = RedisBackend(client, prefix=prefix, timeout=self.timeout, wait_replicas=wait_replicas)
        self.wait_replicas = self._backend._replicas or None
        """How many replicas must have a grant before it counts, or None (grants do not wait)."""
        self._setup(on_error, clock)
        if reserve is not None:
            if isinstance(reserve, bool) or not isinstance(reserve, int):
                raise TypeError(f"reserve must be an int or None, got {type(reserve).__name__}")
            if reserve < 1:
                raise ValueError(f"reserve must be at least 1, got {reserve!r}")
            self._returns = Returns(self._backend.is_async, manual=clock is not None)
        self.reserve = reserve
        """How many permits the time-based limiters take from the server at a time, or None: each
        acquisition asks the server."""

    def close(self) -> None:
        """Closes the limiters this store made in this process (their waits end with reason
        ``"closed"``; the permits they hold in reserve go back to the server) and stops renewing
        their leases; the server's state stays, and so does the client."""
        super().close()  # (the limiters' stocks go back to the server)
        if self.reserve is not None:
            self._returns.stop()

    def __repr__(self) -> str:
        reserve = "" if self.reserve is None else f" reserve={self.reserve}"
        replicas = "" if self.wait_replicas is None else f" wait_replicas={self.wait_replicas}"
        return f"<RedisStore prefix={self.prefix!r} on_error={self.on_error!r}{reserve}{replicas}>"


__all__ = ["RedisStore"]
