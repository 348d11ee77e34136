"""A limit as a server keeps it: the algorithm and its parameters in integers (nanoseconds).

Both stores run the same arithmetic as the engine (``design``: time is computed from an anchor
at the state's creation; see ``permits._stores.backend`` for each kind's rules), so a store
limiter grants exactly what an engine limiter of the same spec would on the same clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from .. import specs

KINDS = ("token_bucket", "fixed_window", "sliding_window", "sliding_window_counter", "sliding_log", "concurrency")


@dataclass(frozen=True, slots=True)
class Rule:
    """``kind``; ``limit`` (token_limit or permit_limit); ``period_ns`` (replenishment_period,
    window; 0 for concurrency); ``amount`` (tokens_per_period, segments_per_window, the log's
    segments; else 0);
    ``lease_ttl_ns`` (concurrency; else 0)."""

    kind: str
    limit: int
    period_ns: int = 0
    amount: int = 0
    lease_ttl_ns: int = 0
    #: The signature the name's states were made with before its limit was changed
    #: (``reconfigure``: followed_rules.py); "" when never changed (the rule's own).
    base: str = ""

    @property
    def signature(self) -> str:
        """What the server records with the state: opening it with another rule is an error.
        (lease_ttl is not part of it: holders may choose their own.) A changed limit keeps the
        signature its states were made with: the steps take the limit from their arguments."""
        return self.base or self.own_signature

    @property
    def own_signature(self) -> str:
        """The rule's own: its kind, limit, period and amount."""
        return f"{self.kind}:{self.limit}:{self.period_ns}:{self.amount}"

    @property
    def amounts(self) -> tuple[int, ...]:
        """What a change may set, in the order of its spec's ``_amounts``: the limit, and a token
        bucket's tokens per period."""
        return (self.limit, self.amount) if self.kind == "token_bucket" else (self.limit,)

    def same_shape(self, other: Rule) -> bool:
        """Whether ``other`` counts in the same way (kind, period, segments): only its amounts
        (the limit, a token bucket's refill) differ. A state follows a change of amounts."""
        if self.kind != other.kind or self.period_ns != other.period_ns:
            return False
        return self.kind == "token_bucket" or self.amount == other.amount

    def with_amounts_of(self, signature: str, base: str) -> Rule | None:
        """This rule with the amounts of ``signature`` (another process's change), its states
        keeping ``base``; None when ``signature`` is not of this rule's shape (or not a signature)."""
        parts = signature.split(":")
        if len(parts) != 4 or not all(part.lstrip("-").isdigit() for part in parts[1:]):
            return None
        limit, period, amount = (int(part) for part in parts[1:])
        if limit <= 0 or (self.kind == "token_bucket" and amount <= 0):
            return None
        other = Rule(parts[0], limit, period, amount, self.lease_ttl_ns, "" if signature == base else base)
        return other if self.same_shape(other) else None

    @property
    def timed(self) -> bool:
        return self.kind != "concurrency"

    @property
    def lifetime_ns(self) -> int:
        """How long an untouched state must live for its next use to need it: past this, a state
        left alone is as good as new, so the server may drop it (a key that expires on its own)."""
        if self.kind == "token_bucket":
            periods = -(-self.limit // self.amount)  # periods to refill an empty bucket
            return periods * self.period_ns
        if self.kind == "concurrency":
            return self.lease_ttl_ns
        return 2 * self.period_ns  # the current window and the one before it


class Record(NamedTuple):
    """A name's changed limit as the server records it (``reconfigure``): ``gen`` counts the
    changes (1 the first), ``base`` is the signature its states were made with, ``sig`` the rule
    that holds now."""

    gen: int
    base: str
    sig: str


def made_from_another_base(name: str, stored: object, base: str, sharing: str) -> ValueError:
    """A change of ``name``'s limit refused: its record was made from states of another rule
    (``stored``) than this limiter's (``base``); ``sharing``: what the stores share ("a prefix")."""
    return ValueError(
        f"the limit of {name!r} was changed from the rule {stored}, and this limiter's states were made "
        f"with {base}: stores sharing {sharing} must give a name the same limit"
    )


def parse_record(value: bytes | str | None) -> Record | None:
    """A record as a server keeps it, ``"<gen> <base> <sig>"``; None for none (or one damaged)."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else value
    parts = text.split(" ")
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    return Record(int(parts[0]), parts[1], parts[2])


def rule_of(spec: specs.Spec[Any], lease_ttl_ns: int = 0) -> Rule:
    if isinstance(spec, specs.TokenBucket):
        return Rule("token_bucket", spec.token_limit, spec._period_ns, spec.tokens_per_period)
    if isinstance(spec, specs.FixedWindow):
        return Rule("fixed_window", spec.permit_limit, spec._window_ns)
    if isinstance(spec, specs.SlidingWindow):
        return Rule("sliding_window", spec.permit_limit, spec._window_ns, spec.segments_per_window)
    if isinstance(spec, specs.SlidingLog):
        return Rule("sliding_log", spec.permit_limit, spec._window_ns, -spec._engine_segments)
    if isinstance(spec, specs.SlidingWindowCounter):
        return Rule("sliding_window_counter", spec.permit_limit, spec._window_ns)
    if isinstance(spec, specs.Concurrency):
        return Rule("concurrency", spec.permit_limit, lease_ttl_ns=lease_ttl_ns)
    raise TypeError(f"a store keeps limits of the permits.specs kinds, not {type(spec).__name__}")
