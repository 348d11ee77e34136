"""`import permits` (and permits.keys) imports no web framework nor server client: the integrations
and stores are imported only by name (permits.asgi, permits.fastapi, permits.aiohttp, permits.wsgi,
permits.flask, permits.django, permits.drf, permits.celery, permits.redis, permits.postgres)."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = (
    "fastapi",
    "starlette",
    "aiohttp",
    "httpx",
    "uvicorn",
    "anyio",
    "redis",
    "psycopg",
    "psycopg_pool",
    "flask",
    "werkzeug",
    "waitress",
    "django",
    "rest_framework",
    "celery",
    "kombu",
)


def modules_after(statement: str) -> set[str]:
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in json.loads(out)}


def test_import_permits_imports_no_framework() -> None:
    loaded = modules_after("import permits, permits.keys")
    assert loaded.isdisjoint(FRAMEWORKS), sorted(loaded & set(FRAMEWORKS))


def test_each_integration_imports_its_own_framework() -> None:
    assert "starlette" in modules_after("import permits.asgi")
    assert "fastapi" in modules_after("import permits.fastapi")
    assert "aiohttp" in modules_after("import permits.aiohttp")
    assert "fastapi" not in modules_after("import permits.asgi")
    assert "flask" in modules_after("import permits.flask")
    assert modules_after("import permits.wsgi").isdisjoint({"flask", "werkzeug", "starlette", "django"})
    assert "django" in modules_after("import permits.django")
    assert "django" not in modules_after("import permits.flask")
    # (DRF reads Django's settings as its throttling module is imported: a project has them)
    assert "rest_framework" in modules_after("import django.conf; django.conf.settings.configure(); import permits.drf")
    celery_task = modules_after("import permits.celery")
    assert "celery" in celery_task and celery_task.isdisjoint({"django", "rest_framework", "flask"})


def test_each_store_imports_its_own_client() -> None:
    redis_store = modules_after("import permits.redis")
    assert "redis" in redis_store and "psycopg" not in redis_store
    postgres_store = modules_after("import permits.postgres")
    assert "psycopg" in postgres_store and "redis" not in postgres_store
