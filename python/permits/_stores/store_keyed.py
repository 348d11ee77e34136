"""StoreKeyed: a store's limit per key (``store.partitioned``): a ``PartitionedLimiter`` whose
partitions are the store's limiters of each key's state, which ``reconfigure`` and ``reset`` reach on
the server, for every process."""

from __future__ import annotations

from typing import Any

from .. import specs
from .._core import _key_bytes
from ..engine_limiters import _check_reconfigured, _reconfigured_queue
from ..partition import Partition
from ..partitioned import PartitionedLimiter
from .rules import Record, Rule, rule_of
from .store_limiter import UNBOUNDED, StoreLimiter

#: A per-key limiter's state names: its name, then this, then the key as the engine encodes it.
KEY_SEPARATOR = b"\x00"


class StoreKeyed(PartitionedLimiter):
    def __init__(
        self,
        store: Any,
        name: str,
        spec: specs.Spec[Any],
        queue: tuple[int | None, bool],
        lease_ttl_ns: int,
        *,
        idle_timeout: float,
        max_partitions: int | None,
    ) -> None:
        self.store = store
        self._spec = spec
        self._queue_options = queue  # (the keys' queues: those made later get a change's too)
        ttl = lease_ttl_ns if isinstance(spec, specs.Concurrency) else 0
        self._rule: Rule = rule_of(spec, ttl)
        self._gen = -1
        self._prefix = prefix = name.encode() + KEY_SEPARATOR

        def of_key(key: object) -> Partition:
            def make(k: object) -> StoreLimiter:
                limit, newest = self._queue_options
                made: StoreLimiter = store._make(name, prefix + _key_bytes(k), spec, limit, newest, lease_ttl_ns)
                return made

            return Partition.custom(key, make)

        super().__init__(
            of_key, idle_timeout=idle_timeout, max_partitions=max_partitions, clock=store._pause_clock, name=name
        )

    @property
    def spec(self) -> specs.Spec[Any]:
        """Every key's limit, as a value (the one that holds now, when it was changed)."""
        spec: specs.Spec[Any] = self._spec._with_amounts(self._rule.amounts)
        return spec

    def _reset_on_server(self, key: object, after: Any) -> None:
        """reset(key) reaches the server whether this process holds the key's limiter or not."""
        self.store._reset(self._prefix + _key_bytes(key), self._rule, self.name, after)

    def _take_on(self, record: Record | None) -> None:
        """Its name's record (followed_rules): the keys' limiters take it on themselves."""
        gen = 0 if record is None else record.gen
        if gen != self._gen and record is not None:
            self._rule = self._rule.with_amounts_of(record.sig, record.base) or self._rule
        self._gen = gen

    def _reconfigure(self, spec: object, queue_limit: object, queue_order: object) -> None:
        """Every key's limit, present and future, in every process (recorded on the server); the
        queue options are this process's keys'."""
        self._check_open()
        _check_reconfigured(self._spec, spec)
        limit, newest = _reconfigured_queue(self._queue_options, queue_limit, queue_order)
        new = rule_of(spec, self._rule.lease_ttl_ns)  # type: ignore[arg-type]

        def queues() -> None:
            self._queue_options = (limit, newest)
            for limiter in self._key_limiters():
                limiter._queue.reconfigure(UNBOUNDED if limit is None else limit, newest)

        self.store._change_limit(self, new, queues)

    def _probe(self) -> StoreLimiter | None:
        """A key's limiter of this process (``StoreLimiter._probe``); with none, no state is read:
        the first change records this process's limit as the base."""
        return next(iter(self._key_limiters()), None)

    def _key_limiters(self) -> list[StoreLimiter]:
        prefix = self._prefix
        return [
            limiter
            for limiter in list(self.store._limiters)
            if isinstance(limiter, StoreLimiter)
            and isinstance(state := limiter._state, bytes)
            and state.startswith(prefix)
        ]
