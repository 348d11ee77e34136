"""``python -m permits shm list|show|unlink``: the shared-memory segments of permits on this host.

Each command returns the process's exit status: 0 done, 1 the segment is missing, foreign, damaged
or refused by the OS (or shared memory is not available here), 2 a name that cannot name a segment.
Errors are one line on stderr. Nothing here creates a segment or changes one (``unlink`` removes
its name, as ``SharedMemoryStore.unlink()`` does).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any, TextIO

from .. import _core

SHM_DIR = "/dev/shm"
PREFIX = "permits."

OK, FAILED, USAGE = 0, 1, 2


class _Refused(Exception):
    """A command that cannot go on: its one-line message and exit status."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def _store_type() -> Any:
    store = getattr(_core, "ShmStore", None)
    if store is None:
        raise _Refused("shared memory is not available here: permits.shm needs Linux")
    return store


def _path(name: str) -> str:
    return f"{SHM_DIR}/{PREFIX}{name}"


def _check_name(store: Any, name: str) -> None:
    try:
        store.check_name(name)
    except ValueError as exc:
        raise _Refused(f"not a segment name: {exc}", USAGE) from None


def _describe(store: Any, name: str) -> dict[str, Any]:
    """The segment's description; _Refused with what stood in the way."""
    try:
        info: dict[str, Any] = store.describe(name)
    except FileNotFoundError:
        raise _Refused(f"no shared-memory segment {name!r} ({_path(name)})") from None
    except PermissionError:
        raise _Refused(f"segment {name!r} ({_path(name)}): permission denied (another user's?)") from None
    except OSError as exc:
        raise _Refused(f"segment {name!r} ({_path(name)}): {exc.strerror or exc}") from None
    except ValueError as exc:  # a foreign, truncated or damaged file
        raise _Refused(str(exc)) from None
    return info


def _owner(uid: int) -> str:
    try:
        import pwd  # (POSIX only: elsewhere the command has already said shared memory is not available)

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # (not reached)


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:g}s"


def _spec(limiter: dict[str, Any]) -> str:
    return " ".join(f"{name}={_seconds(value) if duration else value}" for name, value, duration in limiter["params"])


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip(), file=out)


# ---- list ----


def _segments() -> list[str]:
    """Names of the permits segments in /dev/shm (files of other programs are not ours to show)."""
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    store = _store_type()
    names = []
    for entry in entries:
        if not entry.startswith(PREFIX):
            continue
        name = entry[len(PREFIX) :]
        try:
            store.check_name(name)
        except ValueError:
            continue
        names.append(name)
    return sorted(names)


def _entry(store: Any, name: str) -> dict[str, Any] | None:
    try:
        st = os.stat(_path(name))
    except FileNotFoundError:
        return None  # removed since it was listed
    entry: dict[str, Any] = {
        "name": name,
        "path": _path(name),
        "size": st.st_size,
        "mode": f"0o{stat.S_IMODE(st.st_mode):03o}",
        "owner": _owner(st.st_uid),
        "limiters": None,
        "holders": None,
        "error": None,
    }
    try:
        info = _describe(store, name)
    except _Refused as exc:
        entry["error"] = str(exc)
        return entry
    entry["limiters"] = len(info["limiters"])
    entry["holders"] = len(info["holders"])
    entry["capacity"] = info["capacity"]
    entry["used_bytes"] = info["used_bytes"]
    entry["arena_bytes"] = info["arena_bytes"]
    return entry


def list_segments(*, as_json: bool = False, out: TextIO | None = None) -> int:
    """``shm list``: every segment's name, size, limiters, holders, mode and owner."""
    out = out or sys.stdout
    try:
        store = _store_type()
        entries = [e for e in (_entry(store, name) for name in _segments()) if e is not None]
    except _Refused as exc:
        return _fail(exc)
    if as_json:
        json.dump(entries, out, indent=2)
        print(file=out)
        return OK
    if not entries:
        print(f"no segments of permits in {SHM_DIR}", file=out)
        return OK
    rows = [["NAME", "SIZE", "LIMITERS", "HOLDERS", "MODE", "OWNER"]]
    for e in entries:
        limiters = "?" if e["limiters"] is None else str(e["limiters"])
        holders = "?" if e["holders"] is None else str(e["holders"])
        row = [e["name"], _bytes(e["size"]), limiters, holders, "0" + e["mode"][2:], e["owner"]]
        if e["error"]:
            row.append(f"({e['error']})")
        rows.append(row)
    _table(rows, out)
    return OK


# ---- show ----


def _available(limiter: dict[str, Any], clock: str) -> str:
    if limiter["kind"] == "partitioned":
        return f"{limiter['keys']}/{_param(limiter, 'max_partitions')} keys"
    if limiter["available"] is None:
        # A ManualClock's time is each process's own: no time to compute a refill at.
        return "? (ManualClock)" if clock == "manual" else "?"
    return f"{limiter['available']}/{limiter['limit']}"


def _param(limiter: dict[str, Any], name: str) -> int:
    for key, value, _ in limiter["params"]:
        if key == name:
            return int(value)
    return 0


def _holder(h: dict[str, Any]) -> str:
    state = "alive" if h["alive"] else "dead (its permits come back at the next take that needs them)"
    where = "" if h["same_namespace"] else ", another pid namespace"
    return f"pid {h['pid']}: {h['permits']} permits, {state}{where}"


def show_segment(name: str, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """``shm show NAME``: the segment's limiters (spec, available now), holders and free room.
    1 when a limiter's slot is damaged (shown as such)."""
    out = out or sys.stdout
    try:
        store = _store_type()
        _check_name(store, name)
        info = _describe(store, name)
    except _Refused as exc:
        return _fail(exc)
    damaged = [limiter for limiter in info["limiters"] if limiter["damage"]]
    if as_json:
        json.dump({**info, "path": _path(name)}, out, indent=2)
        print(file=out)
        return FAILED if damaged else OK
    clock = "real clock (CLOCK_MONOTONIC)" if info["clock"] == "monotonic" else "ManualClock"
    free = info["arena_bytes"] - info["used_bytes"]
    print(
        f"segment {name!r} ({_path(name)}): {_bytes(info['size'])}, capacity {info['capacity']} keys, {clock}", file=out
    )
    print(
        f"free: {free} of {info['arena_bytes']} bytes for limiters and tables; "
        f"holder slots: {len(info['holders'])} of {info['holder_slots']} in use",
        file=out,
    )
    if not info["limiters"]:
        print("no limiters", file=out)
    else:
        print(file=out)
        rows = [["NAME", "KIND", "AVAILABLE", "SPEC"]]
        for limiter in info["limiters"]:
            kind = limiter["kind"]
            if limiter["key_kind"]:
                kind = f"{kind} ({limiter['key_kind']})"
            if limiter["damage"]:
                rows.append([limiter["name"], kind, "-", f"DAMAGED: {limiter['damage']}"])
            else:
                rows.append([limiter["name"], kind, _available(limiter, info["clock"]), _spec(limiter)])
        _table(rows, out)
        for limiter in info["limiters"]:
            for h in limiter["holders"]:
                print(f"  {limiter['name']}: holder {_holder(h)}", file=out)
    if damaged:
        print(f"permits shm: {len(damaged)} damaged limiter(s) in segment {name!r} (unlink it)", file=sys.stderr)
        return FAILED
    return OK


# ---- unlink ----


def unlink_segment(name: str, *, out: TextIO | None = None) -> int:
    """``shm unlink NAME``: removes the segment's name (processes that have it mapped keep it)."""
    out = out or sys.stdout
    try:
        store = _store_type()
        _check_name(store, name)
        try:
            removed = bool(store.unlink(name))
        except OSError as exc:
            raise _Refused(f"cannot unlink segment {name!r} ({_path(name)}): {exc.strerror or exc}") from None
        if not removed:
            raise _Refused(f"no shared-memory segment {name!r} ({_path(name)})")
    except _Refused as exc:
        return _fail(exc)
    print(f"removed segment {name!r} ({_path(name)}); processes that have it open keep using it", file=out)
    return OK


def _fail(exc: _Refused) -> int:
    print(f"permits shm: {exc}", file=sys.stderr)
    return exc.status
