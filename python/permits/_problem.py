"""``problem_details=True`` on every server integration: a rejection's body is an RFC 9457
``application/problem+json`` document of the problem type the IETF draft of the RateLimit fields
defines for an exceeded quota (draft-ietf-httpapi-ratelimit-headers-11, "Problem Types"): its
``violated-policies`` name the policies refused (as ``RateLimit-Policy`` names them)."""

from __future__ import annotations

import json

from ._core import Lease

#: The draft's problem type for a request beyond a quota policy.
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
TITLE = "Request cannot be satisfied as assigned quota has been exceeded"
MEDIA_TYPE = "application/problem+json"


def check_problem_details(problem_details: object) -> bool:
    if not isinstance(problem_details, bool):
        raise TypeError(f"problem_details must be a bool, got {type(problem_details).__name__}")
    return problem_details


def problem_json(lease: Lease, policy_name: str | None, status: int, retry_after: int | None) -> str:
    """The rejection's problem document: ``type``, ``title``, ``status``, ``detail`` (which limit
    refused, and why), ``violated-policies`` and, when the client can tell when to come back,
    ``retry-after`` (whole seconds, as the header)."""
    limiter = lease.metadata.get("limiter")
    # The policy refused: the refusing limiter's (a chain's member), named as RateLimit-Policy names it.
    violated = limiter if limiter is not None else policy_name
    names = [] if violated is None else [violated]
    reason = lease.reason or "limit_reached"
    detail = f"the limit {limiter!r} refused the request ({reason})" if limiter is not None else f"refused ({reason})"
    document: dict[str, object] = {
        "type": QUOTA_EXCEEDED,
        "title": TITLE,
        "status": status,
        "detail": detail,
        "violated-policies": [str(n) for n in names],
    }
    if retry_after is not None:
        document["retry-after"] = retry_after
    return json.dumps(document)
