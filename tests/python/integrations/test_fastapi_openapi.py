"""A FastAPI application's OpenAPI schema documents its rate limits (issue 43, item 3; slowapi #74):
every path operation with a ``RateLimit`` dependency (its own, its router's, the application's) shows
the rejection, its headers and its body, with nothing to call; ``document_limits(app)`` for an
application whose ``openapi`` is its own function."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

import permits
from permits.fastapi import RateLimit, document_limits


def app_with_limits() -> FastAPI:
    app = FastAPI()
    searches = RateLimit(permits.FixedWindowLimiter(2, 60.0, name="searches"))
    busy = RateLimit(permits.ConcurrencyLimiter(4, name="busy"), status_code=503, problem_details=True)

    @app.get("/search", dependencies=[Depends(searches)])
    async def search() -> dict[str, str]:
        return {"found": "nothing"}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"free": "yes"}

    @app.get("/mine", dependencies=[Depends(searches)], responses={429: {"description": "my own words"}})
    async def mine() -> dict[str, str]:
        return {}

    router = APIRouter(dependencies=[Depends(busy)])

    @router.get("/report")
    async def report() -> dict[str, str]:
        return {}

    app.include_router(router)
    return app


def responses(schema: dict[str, Any], path: str) -> dict[str, Any]:
    return schema["paths"][path]["get"]["responses"]  # type: ignore[no-any-return]


def test_a_limited_route_documents_its_rejection() -> None:
    app = app_with_limits()
    document_limits(app)
    schema = app.openapi()
    refused = responses(schema, "/search")["429"]
    assert set(refused["headers"]) == {"Retry-After", "RateLimit", "RateLimit-Policy"}
    assert refused["headers"]["Retry-After"]["schema"]["type"] == "integer"
    assert "searches" in refused["description"]
    assert set(refused["content"]) == {"text/plain"}
    assert "200" in responses(schema, "/search")
    assert "429" not in responses(schema, "/free")
    assert responses(schema, "/mine")["429"]["description"] == "my own words"  # the route's own wins


def test_a_routers_limit_documents_its_own_status_and_problem_document() -> None:
    app = app_with_limits()
    document_limits(app)
    refused = responses(app.openapi(), "/report")["503"]
    problem = refused["content"]["application/problem+json"]["schema"]
    assert {"type", "title", "status", "detail", "violated-policies", "retry-after"} <= set(problem["properties"])
    assert "busy" in refused["description"]


def test_it_needs_nothing_to_be_called() -> None:
    app = app_with_limits()
    schema = app.openapi()
    assert "429" in responses(schema, "/search") and "503" in responses(schema, "/report")
    assert "429" not in responses(schema, "/free")
    plain = FastAPI()

    @plain.get("/x")
    async def x() -> dict[str, str]:
        return {}

    assert set(responses(plain.openapi(), "/x")) == {"200"}  # an app without limits: as FastAPI makes it


def test_an_application_with_its_own_openapi_function() -> None:
    app = FastAPI()

    @app.get("/late", dependencies=[Depends(RateLimit("5/second"))])
    async def late() -> dict[str, str]:
        return {}

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            app.openapi_schema = get_openapi(title="custom", version="1", routes=app.routes)
        return app.openapi_schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    assert "429" not in responses(app.openapi(), "/late")  # made by a function of its own...
    document_limits(app)
    schema = app.openapi()
    assert schema["info"]["title"] == "custom" and "429" in responses(schema, "/late")  # ... and again


def test_the_served_schema_and_the_limit_still_work() -> None:
    app = app_with_limits()
    document_limits(app)
    document_limits(app)  # once is enough: a second call changes nothing
    with TestClient(app) as client:
        schema = client.get("/openapi.json").json()
        assert "429" in schema["paths"]["/search"]["get"]["responses"]
        codes = [client.get("/search").status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_only_a_fastapi_application() -> None:
    with pytest.raises(TypeError, match="takes a FastAPI application"):
        document_limits(object())  # type: ignore[arg-type]
