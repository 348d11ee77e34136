"""Exempt paths of the server integrations (``exempt=``): a prefix a path equals or continues after a
``/``, never when some server or proxy could resolve a segment of the path as ``.`` or ``..`` (in
any spelling: percent-encoded, overlong UTF-8, full-width, with ``;`` parameters or backslashes)."""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from collections.abc import Iterable
from typing import Any


def check_exempt(exempt: object) -> tuple[str, ...]:
    if isinstance(exempt, str):
        exempt = (exempt,)
    if not isinstance(exempt, Iterable):
        raise TypeError(f"exempt must be path prefixes (e.g. ('/health',)), got {type(exempt).__name__}")
    prefixes = []
    for prefix in exempt:
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"exempt paths must be str starting with '/', got {prefix!r}")
        prefixes.append(prefix.rstrip("/") or "/")
    return tuple(prefixes)


# Encodings beyond RFC 3986's that some servers still decode: IIS's %uXXXX and the overlong
# UTF-8 forms of '.', '/' and '\\'.
_NON_STANDARD = re.compile(r"%u([0-9a-f]{4})|%c0%ae|%e0%80%ae|%c0%af|%c1%9c", re.IGNORECASE)
_OVERLONG = {"%c0%ae": ".", "%e0%80%ae": ".", "%c0%af": "/", "%c1%9c": "\\"}
_STILL_ENCODED = re.compile(r"%[0-9a-f]{2}|%u[0-9a-f]{4}", re.IGNORECASE)
# Decoding layers undone, at most: a path still encoded after that many is refused its exemption
# (each layer is a pass over the path: an attacker's %252525... must not buy one pass per layer).
_MAX_DECODINGS = 4
# What a server may trim around a segment before resolving it (Windows trims spaces and dots).
_IGNORED = " \t\r\n\x00\x0b\x0c."


def _non_standard(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code, 16)) if code else _OVERLONG[match.group().lower()]


_OVERLONG_BYTES = ((b"\xc0\xae", b"."), (b"\xe0\x80\xae", b"."), (b"\xc0\xaf", b"/"), (b"\xc1\x9c", b"\\"))


def _as_utf8(path: str) -> str:
    """A path whose characters are bytes (PEP 3333's latin-1 ``PATH_INFO``) read as UTF-8, as the
    frameworks read it, overlong forms of '.', '/' and '\\' included; others as they are."""
    try:
        raw = path.encode("latin-1")
    except UnicodeEncodeError:
        return path  # (already text: an ASGI or aiohttp path)
    for overlong, char in _OVERLONG_BYTES:
        raw = raw.replace(overlong, char)
    return raw.decode("utf-8", errors="replace")


def has_dot_segment(path: str) -> bool:
    """Whether some server or proxy could resolve a segment of ``path`` as ``.`` or ``..``: after
    undoing up to ``_MAX_DECODINGS`` layers of percent-encoding (``%2e``, ``%252e``, any case,
    IIS's ``%u002e``, overlong UTF-8) and Unicode compatibility forms (a full-width dot), with a
    backslash as a slash, a segment's ``;`` parameters dropped (Tomcat's ``..;``) and blanks
    trimmed, a segment made of dots only. A path still encoded after that many layers counts as
    one (refused rather than read further)."""
    if path.isascii():
        if "." not in path and "%" not in path:  # (the common case)
            return False
    else:
        path = _as_utf8(path)
    for _ in range(_MAX_DECODINGS):
        decoded = urllib.parse.unquote(_NON_STANDARD.sub(_non_standard, path), errors="replace")
        if decoded == path:
            break
        path = decoded
    else:
        if _STILL_ENCODED.search(path):
            return True
    if not path.isascii():
        path = unicodedata.normalize("NFKC", path)  # U+FF0E (full-width) and U+2024 are dots then
    for segment in path.replace("\\", "/").split("/"):
        segment = segment.split(";", 1)[0]
        if "." in segment and not segment.strip(_IGNORED):
            return True
    return False


def is_exempt(path: str, prefixes: tuple[str, ...], raw: str | bytes | None = None) -> bool:
    """A path is exempt when it equals a prefix or continues it after a '/', and has no dot segment
    in any spelling (``/health/../admin``, ``/health/%2e%2e/admin``, ``/health/..;/admin``,
    ``/health/..\\admin``: each leaves the prefix in an app, or a proxy, that resolves it).
    ``raw``: the request target as the client sent it, where the server gives it (ASGI's
    ``raw_path``, aiohttp's ``raw_path``, a WSGI server's ``RAW_URI``), checked too: the server's
    own decoding may have lost a spelling (an overlong form) that something behind it reads."""
    if not any(prefix == "/" or path == prefix or path.startswith(prefix + "/") for prefix in prefixes):
        return False
    if has_dot_segment(path):
        return False
    if raw is None:
        return True
    if isinstance(raw, bytes):
        raw = raw.decode("latin-1")
    return not has_dot_segment(raw.split("?", 1)[0])


def environ_raw_path(environ: Any) -> str | None:
    """The request target as the client sent it, where the WSGI server gives it (gunicorn's
    ``RAW_URI``, werkzeug's and waitress's ``REQUEST_URI``)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    return raw if isinstance(raw, str) else None


__all__ = ["check_exempt", "environ_raw_path", "has_dot_segment", "is_exempt"]
