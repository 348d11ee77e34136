"""``RedisStore(..., wait_replicas=N)``: a step that grants is followed by ``WAIT N ms`` on the same
connection (WAIT counts the replicas that have this connection's writes), both sent at once in one
pipeline; on a Cluster, on a connection of the node that owns the keys.

``send`` and ``send_async`` take the step's command (FCALL ... or EVALSHA ...) and answer its reply
and the number of replicas that acknowledged it (an error reply is returned, not raised: the
backend loads its functions or scripts and sends again).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio.cluster
import redis.cluster

from ..errors import BackendError

# redis-py's asyncio Cluster pipeline command (untyped there): called through Any.
_PipelineCommand: Any = redis.asyncio.cluster.PipelineCommand


def unreplicated(acked: int, replicas: int, wait_ms: int) -> BackendError:
    return BackendError(
        f"only {acked} of {replicas} replicas acknowledged the grant within {wait_ms} ms "
        "(WAIT): not trusted, its permits were given back"
    )


def check_wait_replicas(wait_replicas: object) -> int:
    """``wait_replicas``: None or 0 (no waiting), else how many replicas must have a grant."""
    if wait_replicas is None:
        return 0
    if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int):
        raise TypeError(f"wait_replicas must be an int or None, got {type(wait_replicas).__name__}")
    if wait_replicas < 0:
        raise ValueError(f"wait_replicas must be at least 0, got {wait_replicas!r}")
    return int(wait_replicas)


def wait_ms(timeout: float) -> int:
    """How long WAIT waits: half the store's timeout, the other half for the round trips and for
    loading the step's code (a WAIT still unanswered when the call's timeout ends would leave the
    grant unknown: neither trusted nor given back)."""
    return max(1, int(timeout * 500))


def send(client: Any, command: tuple[Any, ...], key: bytes, replicas: int, ms: int) -> tuple[Any, int]:
    cluster: Any = client if isinstance(client, redis.cluster.RedisCluster) else None
    if cluster is not None:
        client = cluster.get_node_from_key(key).redis_connection
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*command)
    pipe.execute_command("WAIT", replicas, ms)
    reply, acked = pipe.execute(raise_on_error=False)
    if cluster is not None and _moved(reply):
        cluster.nodes_manager.initialize()  # (learns the slot's owner)
        raise redis.exceptions.TryAgainError(f"the keys' slot moved: {reply}")
    return reply, _count(acked)


async def send_async(client: Any, command: tuple[Any, ...], key: bytes, replicas: int, ms: int) -> tuple[Any, int]:
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        cluster: Any = client
        commands = [_PipelineCommand(0, *command), _PipelineCommand(1, "WAIT", replicas, ms)]
        await cluster.get_node_from_key(key).execute_pipeline(commands)
        if _moved(commands[0].result):
            await cluster.nodes_manager.initialize()
            raise redis.exceptions.TryAgainError(f"the keys' slot moved: {commands[0].result}")
        return commands[0].result, _count(commands[1].result)
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*command)
    pipe.execute_command("WAIT", replicas, ms)
    reply, acked = await pipe.execute(raise_on_error=False)
    return reply, _count(acked)


def _moved(reply: Any) -> bool:
    """A Cluster node's MOVED or ASK to a step sent to it directly: asked again as TRYAGAIN is,
    within the step's timeout."""
    return isinstance(reply, redis.exceptions.MovedError | redis.exceptions.AskError)


def _count(acked: Any) -> int:
    if isinstance(acked, BaseException):
        raise acked
    return int(acked)
