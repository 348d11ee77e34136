"""permits is imported in the main interpreter only.

The engine's bindings keep Python objects in C++ globals (asyncio's functions, the lease type,
each loop's bridge), which belong to the interpreter that imported it first; a subinterpreter
(mod_wsgi's application groups, ``interpreters.create()``) using them would crash or hang the
process when it goes. It is refused here, before the extension is loaded (loading it in a
subinterpreter of Python 3.11 deadlocks in pybind11's set-up), with an ImportError that says why.
"""

from __future__ import annotations

import importlib


def check_main_interpreter() -> None:
    for name in ("_interpreters", "_xxsubinterpreters"):  # 3.13+, then 3.11-3.12
        try:
            interpreters = importlib.import_module(name)
        except ImportError:
            continue
        if interpreters.get_current() != interpreters.get_main():
            raise ImportError(
                "permits runs in the main interpreter only: its engine keeps one interpreter's objects, so it "
                "cannot be imported in a subinterpreter (with mod_wsgi: WSGIApplicationGroup %{GLOBAL})"
            )
        return


check_main_interpreter()
