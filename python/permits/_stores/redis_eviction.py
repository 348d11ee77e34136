"""Whether a Redis server may evict a store's keys: its ``maxmemory-policy`` under a
``maxmemory``. Evicting a limiter's key resets its limit (a used-up window starts afresh, a
concurrency limit forgets its holders), and a ``volatile-*`` policy evicts exactly those keys
first: they are the ones with a TTL. Asked once per store, off the caller's path (a thread for a
sync client, a task for an asyncio one); a server that does not say (CONFIG disabled, an ACL) is
not warned about."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

logger = logging.getLogger("permits")

SAFE = "noeviction"


def advice(config: dict[Any, Any]) -> str | None:
    """The warning for a server's ``CONFIG GET maxmemory*`` answer, or None when it evicts nothing."""
    values = {_text(k): _text(v) for k, v in config.items()}
    policy, limit = values.get("maxmemory-policy"), values.get("maxmemory", "0")
    if policy is None or policy == SAFE or limit in ("0", ""):
        return None
    first = " (and a volatile-* policy evicts them first: they are the keys with a TTL)" if "volatile" in policy else ""
    return (
        f"the Redis server's maxmemory-policy is {policy} under maxmemory={limit}: under memory pressure it may "
        f"evict the keys of permits' limiters, which resets their limits{first}; set maxmemory-policy noeviction "
        "on a server that holds limits"
    )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _tell(config: dict[Any, Any]) -> None:
    said = advice(config)
    if said is not None:
        logger.warning("%s", said)


def check(client: Any) -> None:
    """Asks a sync client's server in a daemon thread (its answer bounded by the client's timeout)."""

    def ask() -> None:
        try:
            _tell(client.config_get("maxmemory*"))
        except Exception:
            logger.debug("permits: the Redis server's maxmemory-policy could not be read", exc_info=True)

    threading.Thread(target=ask, name="permits-redis-eviction-check", daemon=True).start()


async def check_async(client: Any, timeout: float) -> None:
    """Asks an asyncio client's server (a task of the running loop)."""
    try:
        async with asyncio.timeout(timeout):
            _tell(await client.config_get("maxmemory*"))
    except Exception:
        logger.debug("permits: the Redis server's maxmemory-policy could not be read", exc_info=True)
