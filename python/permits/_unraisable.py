"""Errors nobody can be handed (an eviction's close on the way through another call): to
``sys.unraisablehook``, as an error in ``__del__`` is, in the form the default hook accepts."""

from __future__ import annotations

import sys
from typing import Any

_args_type: Any = None


def _hook_args_type() -> Any:
    """``sys.UnraisableHookArgs``, which Python does not export: the type of what the hook is
    handed for an error in ``__del__``, found once by causing one."""
    global _args_type
    if _args_type is None:
        seen: list[Any] = []
        hook = sys.unraisablehook
        sys.unraisablehook = seen.append

        class _Probe:
            def __del__(self) -> None:
                raise RuntimeError("probe")

        try:
            _Probe()
        finally:
            sys.unraisablehook = hook
        _args_type = type(seen[0])
    return _args_type


def report_unraisable(exc: BaseException, obj: object, message: str) -> None:
    args = _hook_args_type()((type(exc), exc, exc.__traceback__, message, obj))
    sys.unraisablehook(args)
