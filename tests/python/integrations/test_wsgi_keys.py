"""permits.keys reading a WSGI environ and a Flask request, over real servers: the same keys as from
the ASGI and aiohttp request objects; behind a real reverse proxy, the client cannot choose its key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from _proxy import reverse_proxy

import permits
from permits import keys
from permits.wsgi import RateLimitMiddleware

from _integration import require, serve_wsgi

flask = require("flask")

KEY_FUNCTIONS = (
    keys.client_ip(),
    keys.client_ip(["127.0.0.0/8"]),
    keys.header("X-Api-Key"),
    keys.header("X-Api-Key", fallback=None),
    keys.path(),
    keys.header("Content-Type", fallback=None),  # (CONTENT_TYPE in an environ, without HTTP_)
)


def wsgi_echo(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
    return ["|".join(str(f(environ)) for f in KEY_FUNCTIONS).encode()]


def flask_echo() -> Any:
    app = flask.Flask(__name__)

    @app.route("/<path:rest>", methods=["GET", "POST"])
    def echo(rest: str) -> str:
        return "|".join(str(f(flask.request)) for f in KEY_FUNCTIONS)

    return app


@pytest.mark.parametrize("framework", ["wsgi", "flask"])
@pytest.mark.parametrize("server", ["werkzeug", "waitress"])
def test_the_helpers_read_an_environ_and_a_flask_request(framework: str, server: str) -> None:
    app = wsgi_echo if framework == "wsgi" else flask_echo()
    with serve_wsgi(app, server) as url, httpx.Client(base_url=url) as client:
        plain = client.get("/items/7").text
        assert plain == "127.0.0.1|127.0.0.1|127.0.0.1|None|/items/7|None"
        # (Forwarded is the client's own word to a key reading X-Forwarded-For: ignored)
        headers = {"X-Forwarded-For": "6.6.6.6, 198.51.100.7", "Forwarded": "for=1.2.3.4", "X-Api-Key": "k1"}
        tagged = ("x-api-key", "k1")
        typed = ("content-type", "text/csv")
        found = client.post("/x", headers={**headers, "Content-Type": "text/csv"}, content=b"a").text
        assert found == f"127.0.0.1|198.51.100.7|{tagged}|{tagged}|/x|{typed}"
        odd = {"X-Forwarded-For": "é" * 3000, "Forwarded": 'for="[::1', "X-Api-Key": "ß"}
        response = client.get("/y", headers={k: v.encode("utf-8") for k, v in odd.items()})
        assert response.status_code == 200
        assert response.text.split("|")[:2] == ["127.0.0.1", "127.0.0.1"]


async def test_behind_a_reverse_proxy_the_client_cannot_pick_its_key(clock: permits.ManualClock) -> None:
    # The client connects from 127.0.0.2; the proxy (127.0.0.1, trusted) appends it to X-Forwarded-For.
    limiter = permits.PartitionedLimiter.per_key(permits.specs.FixedWindow(3, 60), clock=clock)
    app = RateLimitMiddleware(wsgi_echo, limiter, key=keys.client_ip(trusted_proxies=["127.0.0.1"]))
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    with serve_wsgi(app) as upstream:
        async with reverse_proxy(upstream) as url, httpx.AsyncClient(base_url=url, transport=transport) as client:
            spoofs = [{"X-Forwarded-For": f"203.0.113.{i}", "Forwarded": f"for=198.51.100.{i}"} for i in range(4)]
            assert [(await client.get("/", headers=h)).status_code for h in spoofs] == [200, 200, 200, 429]
        direct = httpx.AsyncHTTPTransport(local_address="127.0.0.2")  # not through the proxy: its words
        async with httpx.AsyncClient(base_url=upstream, transport=direct) as client:
            assert (await client.get("/", headers={"X-Forwarded-For": "203.0.113.50"})).status_code == 429
    assert limiter.statistics("127.0.0.2").total_successful_leases == 3
    assert limiter.statistics("127.0.0.2").total_failed_leases == 2
