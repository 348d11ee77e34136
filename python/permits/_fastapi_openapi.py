"""A FastAPI application's schema documents its rate limits: every path operation with a
``permits.fastapi.RateLimit`` dependency (its own, its router's or the application's) gets the
limit's rejection as a response (429 unless ``status_code`` says otherwise) with its
``Retry-After``, ``RateLimit`` and ``RateLimit-Policy`` headers and its body (the text, or the
problem document with ``problem_details``).

It is automatic: importing ``permits.fastapi`` wraps ``FastAPI.openapi`` once, so that a schema
FastAPI makes gets the limits of the operations that have one (an application without a
``RateLimit`` gets its schema unchanged). ``document_limits(app)`` does the same for an application
whose ``openapi`` is its own function."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, routing
from fastapi.routing import APIRoute

from ._problem import MEDIA_TYPE as PROBLEM_MEDIA_TYPE
from ._problem import QUOTA_EXCEEDED

if TYPE_CHECKING:
    from fastapi.dependencies.models import Dependant

    from .fastapi import RateLimit

_DOCUMENTED = "_permits_documented"

_HEADERS: dict[str, dict[str, Any]] = {
    "Retry-After": {
        "description": "Seconds until the request may be granted (sent when the limit can tell).",
        "schema": {"type": "integer", "minimum": 1},
    },
    "RateLimit": {
        "description": 'The limit\'s state (draft-ietf-httpapi-ratelimit-headers-11), e.g. `"api";r=0;t=30`.',
        "schema": {"type": "string"},
    },
    "RateLimit-Policy": {
        "description": 'The limit\'s policy (draft-ietf-httpapi-ratelimit-headers-11), e.g. `"api";q=100;w=60`.',
        "schema": {"type": "string"},
    },
}

_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "format": "uri", "example": QUOTA_EXCEEDED},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "violated-policies": {"type": "array", "items": {"type": "string"}},
        "retry-after": {"type": "integer"},
    },
    "required": ["type", "title", "status", "violated-policies"],
}


def document_limits(app: FastAPI) -> None:
    """Documents ``app``'s rate limits in its OpenAPI schema (``app.openapi()``, ``/docs``) when
    ``app.openapi`` is a function of the application's own (FastAPI's own documents them already,
    once ``permits.fastapi`` is imported): each path operation with a ``RateLimit`` dependency
    shows the limit's rejection, its status, headers and body (a status the operation documents
    itself is left as it is). The routes are read when the schema is made."""
    if not isinstance(app, FastAPI):
        raise TypeError(f"document_limits() takes a FastAPI application, got {type(app).__name__}")
    if getattr(app, _DOCUMENTED, False):
        return
    setattr(app, _DOCUMENTED, True)
    made = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = made()
        if fresh:
            _add_limits(app, schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.openapi_schema = None  # (made already: made again, with the limits)


def _add_limits(app: FastAPI, schema: dict[str, Any]) -> None:
    """Each limited operation's rejection, where the operation does not document that status itself."""
    for path, methods, dependant in _operations(app):
        for status, limits in _by_status(_limits_of(dependant)).items():
            for method in methods:
                operation = schema.get("paths", {}).get(path, {}).get(method.lower())
                if operation is not None:
                    operation.setdefault("responses", {}).setdefault(str(status), _rejection(limits))


def install() -> None:
    """Wraps ``FastAPI.openapi`` (once per process): every schema FastAPI makes documents its limits."""
    original = FastAPI.openapi
    if getattr(original, "_permits_limits", False):
        return

    @functools.wraps(original)
    def openapi(self: FastAPI) -> dict[str, Any]:
        fresh = self.openapi_schema is None
        schema = original(self)
        if fresh:
            _add_limits(self, schema)
        return schema

    openapi._permits_limits = True  # type: ignore[attr-defined]
    FastAPI.openapi = openapi  # type: ignore[method-assign]


def _operations(app: FastAPI) -> Iterator[tuple[str, set[str], Dependant]]:
    """Every path operation: its path as the schema names it, its methods, its dependencies."""
    contexts = getattr(routing, "iter_route_contexts", None)
    if contexts is None:  # (FastAPI before included routers were kept as such: each route is the app's)
        for route in app.routes:
            if isinstance(route, APIRoute):
                yield route.path_format, set(route.methods or ()), route.dependant
        return
    for context in contexts(app.routes):
        if isinstance(context.original_route, APIRoute):
            yield context.path_format, set(context.methods or ()), context.dependant


def _rejection(limits: list[RateLimit]) -> dict[str, Any]:
    names = ", ".join(sorted({limit.policy.limiter.name for limit in limits}))
    content: dict[str, Any] = {}
    if any(not limit.policy.problem_details for limit in limits):
        content["text/plain"] = {"schema": {"type": "string", "example": "Too Many Requests (limiter: NAME)"}}
    if any(limit.policy.problem_details for limit in limits):
        content[PROBLEM_MEDIA_TYPE] = {"schema": _PROBLEM_SCHEMA}
    return {
        "description": f"Refused by the rate limit ({names}): retry after Retry-After seconds.",
        "headers": _HEADERS,
        "content": content,
    }


def _by_status(limits: Iterable[RateLimit]) -> dict[int, list[RateLimit]]:
    found: dict[int, list[RateLimit]] = {}
    for limit in limits:
        found.setdefault(limit.policy.status_code, []).append(limit)
    return found


def _limits_of(dependant: Dependant) -> Iterator[RateLimit]:
    from .fastapi import RateLimit

    for sub in dependant.dependencies:
        if isinstance(sub.call, RateLimit):
            yield sub.call
        yield from _limits_of(sub)
