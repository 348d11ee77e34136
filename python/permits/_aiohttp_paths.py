"""The path an aiohttp application routes on: a sub-application's routes are matched on the
request's path, but written (and exempted) without the prefix it is mounted under."""

from __future__ import annotations

import weakref

from aiohttp import web

# Each sub-application's prefix, found once: applications are frozen when they start serving.
_prefixes: weakref.WeakKeyDictionary[web.Application, str] = weakref.WeakKeyDictionary()


def route_path(request: web.Request) -> str:
    """``request.path`` without the prefix of the (sub-)application whose middleware runs now."""
    path = request.path
    prefix = _prefix(request)
    if prefix and path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
        return path[len(prefix) :] or "/"
    return path


def _prefix(request: web.Request) -> str:
    app = request.app  # (the application whose middlewares run: aiohttp sets it for each)
    found = _prefixes.get(app)
    if found is not None:
        return found
    apps = request.match_info.apps
    if app not in apps or apps.index(app) == 0:
        return ""  # the root application, or an application aiohttp did not route through
    parent = apps[apps.index(app) - 1]
    found = ""
    for resource in parent.router.resources():
        info = resource.get_info()
        if info.get("app") is app:
            found = str(info.get("prefix", ""))  # (a domain's sub-application has none: the path is its own)
            break
    if app.frozen:
        _prefixes[app] = found
    return found


__all__ = ["route_path"]
