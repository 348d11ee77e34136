"""A limit of a sync (WSGI) server: what the WSGI middleware and the Flask and Django integrations
share (the policy, the exempt paths, the admission with its blocking wait)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._core import Lease
from ._exempt_paths import check_exempt
from ._http_policy import CLIENT_LEFT, DEFAULT_MAX_QUEUED, DEFAULT_TIMEOUT, Policy, Quota, check_sync
from ._sync_leaving import client_socket, enqueue_of, wait_unless_left
from .keyed_limiter import KeyedRateLimiter
from .keys import _ClientIP


class SyncLimit:
    """A limit of a sync (WSGI) server, checked when it is built: the policy, the exempt paths.
    What the WSGI middleware and the Flask and Django integrations share; its defaults are
    theirs."""

    __slots__ = ("_client_ip", "exempt", "policy")

    def __init__(
        self,
        limiter: object,
        *,
        key: object = None,
        permit_count: object = 1,
        wait: object = False,
        timeout: object = DEFAULT_TIMEOUT,
        max_queued: object = DEFAULT_MAX_QUEUED,
        status_code: object = 429,
        on_rejected: object = None,
        headers: object = True,
        retry_after: object = None,
        exempt: object = (),
        enforce: object = True,
        cost: object = None,
        problem_details: object = False,
    ) -> None:
        self.policy = Policy(
            limiter, key=key, permit_count=permit_count, wait=wait, timeout=timeout, max_queued=max_queued,
            status_code=status_code, on_rejected=on_rejected, headers=headers,
            retry_after=retry_after, enforce=enforce, cost=cost, problem_details=problem_details,
        )  # fmt: skip
        """The checked options: ``policy.limiter`` (the instrumented one when the middleware has
        ``metrics``), ``policy.key`` (the key function; ``client_ip()`` by default for a keyed limiter, None for a
        plain one), ``permit_count``, ``wait``, ``timeout``, ``max_queued``, ``status_code``,
        ``on_rejected``, ``headers``."""
        check_sync("key", key)
        check_sync("on_rejected", on_rejected)
        self.exempt = check_exempt(exempt)
        """The exempt path prefixes, as a tuple (a trailing ``/`` dropped): a path equal to one, or
        below it, skips this limit."""
        # The built-in client_ip reads the environ itself: no request object is made for it.
        self._client_ip = self.policy.key if isinstance(self.policy.key, _ClientIP) else None

    @property
    def timeout(self) -> float | None:
        """``policy.timeout``: seconds a request may wait for its permits with ``wait=True`` (then
        it is rejected), or None for no bound."""
        return self.policy.timeout

    def admit(self, environ: dict[str, Any], request: Callable[[], Any]) -> tuple[Lease, Quota | None]:
        """The request's lease (granted or not) and its headers' figures; ``request()`` makes what
        a key function receives (only called when one runs)."""
        lease, quota, _ = self.admit_keyed(environ, request)
        return lease, quota

    def key_of(self, environ: dict[str, Any], request: Callable[[], Any]) -> object:
        """The request's key: the built-in client_ip read from the environ, else the key function's
        (``request()`` makes what it receives); None without one."""
        if self._client_ip is not None:
            return self._client_ip.from_environ(environ)
        return self.policy.key_of_sync(request()) if self.policy.key is not None else None

    def admit_keyed(self, environ: dict[str, Any], request: Callable[[], Any]) -> tuple[Lease, Quota | None, object]:
        """As ``admit``, with the request's key (a cost's further permits are that key's)."""
        policy = self.policy
        key = self.key_of(environ, request)
        if policy.wait:
            lease = self._wait(key, environ)
        elif policy.keyed:
            lease = policy.limiter.acquire(key, policy.permit_count)  # type: ignore[call-arg,arg-type]
        else:
            lease = policy.limiter.acquire(policy.permit_count)
        return lease, policy.quota_or_release(key, lease) if policy.headers else None, key

    def _wait(self, key: object, environ: dict[str, Any]) -> Lease:
        """The blocking wait of ``wait=True`` (the engine's waits release the GIL: the server's
        other threads go on). A free permit is taken at once; a request that must queue is
        refused at once (``"queue_full"``) when ``max_queued`` wait here already, else waits at
        most ``timeout`` on the limiter's clock (``"timeout"``). Where the server gives the
        connection's socket, the wait also ends when the client leaves: a failed lease, reason
        ``"client_left"`` (the response goes nowhere)."""
        policy = self.policy
        now = policy.at_once(key)
        if now is not None:
            return now
        if not policy._enter():
            return policy.refused("queue_full")
        try:
            sock = client_socket(environ)
            return self._blocking(key) if sock is None else self._wait_unless_left(key, sock)
        finally:
            policy._leave()

    def _blocking(self, key: object) -> Lease:
        policy = self.policy
        limiter = policy.limiter
        if isinstance(limiter, KeyedRateLimiter):
            return limiter.wait(key, policy.permit_count, policy.timeout)
        return limiter.wait(policy.permit_count, policy.timeout)

    def _wait_unless_left(self, key: object, sock: Any) -> Lease:
        policy = self.policy
        limiter: Any = policy.limiter
        # An instrumented limiter (permits.metrics) queues in the engine of the limiter it wraps:
        # its observer is handed that wait, to see it as it sees the waits of its own members.
        observe = getattr(type(limiter), "_observe_wait", None)
        enqueue = enqueue_of(limiter if observe is None else limiter.__wrapped__)
        if enqueue is None:  # (a limiter that does not queue in the engine: its own blocking wait)
            return self._blocking(key)

        def waiting() -> Lease | None:
            return wait_unless_left(enqueue, key, policy.keyed, policy.permit_count, policy.timeout, sock)

        lease = waiting() if observe is None else observe(limiter, waiting, policy.permit_count)
        if lease is None:
            return Lease.denied(reason=CLIENT_LEFT, metadata={"limiter": limiter.name})
        return lease


__all__ = ["SyncLimit"]
