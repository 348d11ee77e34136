"""What tools see: inspect.signature of every public callable (IDE help, docs generators,
signature-based decorators), and instances made by ``Class.__new__(Class)`` (never initialized),
whose every engine method raises TypeError instead of crashing the process."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from importlib.metadata import version

import pytest

import permits
from permits import _core

from _child import run_child

# The classes users reach, and the engine types behind them.
PUBLIC_CLASSES = [getattr(permits, name) for name in permits.__all__ if isinstance(getattr(permits, name), type)]
ENGINE_TYPES = [t for t in vars(_core).values() if isinstance(t, type) and not issubclass(t, BaseException)]


def _public_callables(cls: type) -> list[str]:
    return [
        name
        for name in dir(cls)
        if (not name.startswith("_") or name in ("__enter__", "__exit__", "__aenter__", "__aexit__"))
        and callable(inspect.getattr_static(cls, name))
        and not isinstance(inspect.getattr_static(cls, name), (property, type))
    ]


@pytest.mark.parametrize("cls", PUBLIC_CLASSES + ENGINE_TYPES, ids=lambda c: c.__qualname__)
def test_every_public_callable_has_a_signature(cls: type) -> None:
    if issubclass(cls, BaseException):
        return
    for name in _public_callables(cls):
        inspect.signature(getattr(cls, name))  # raises ValueError when there is none to read


def test_signatures_are_the_documented_ones() -> None:
    clock = permits.ManualClock()
    lim = permits.TokenBucketLimiter(5, 5, 1.0, clock=clock)
    per_key = permits.PartitionedLimiter.per_key(permits.Partition.concurrency(None, 1), clock=clock)
    lease = lim.acquire()
    expected = {
        lim.acquire: "(permit_count=1)",
        lim.wait_async: "(permit_count=1)",
        lim.available_permits: "()",
        lim.try_replenish: "()",
        lim.close: "()",
        per_key.acquire: "(resource, /, permit_count=1)",
        per_key.wait_async: "(resource, /, permit_count=1)",
        per_key.evict_idle: "()",
        lease.release: "()",
        permits.Lease.granted: (
            "(permit_count=1, *, on_release=None, on_refund=None, metadata=None, lost=None, on_settle=None)"
        ),
        lease.settle: "(permit_count, /)",
        permits.Lease.denied: "(reason='limit_reached', *, retry_after=None, metadata=None)",
        permits.MonotonicClock: "()",
        permits.MonotonicClock().now_ns: "()",
        clock.advance_ns: "(delta_ns)",
    }
    for fn, sig in expected.items():
        assert str(inspect.signature(fn)) == sig, fn


def test_a_decorator_that_reads_signatures_wraps_the_engine_methods() -> None:
    # What signature-based tools do (functools.wraps + inspect.signature(...).bind).
    lim = permits.ConcurrencyLimiter(2)
    bound = inspect.signature(lim.acquire).bind(2)
    assert bound.arguments == {"permit_count": 2}
    assert lim.acquire(*bound.args, **bound.kwargs).permit_count == 2


_UNINITIALIZED = """
import inspect, permits
from permits import _core
cls = {where}.{name}
obj = cls.__new__(cls)
engine_names = {{n for t in type.mro(cls) if t.__module__ == "permits._core" for n in vars(t)}}
for attr in sorted(engine_names | {{n for n in dir(cls) if not n.startswith("_")}}):
    # object's own, pybind11's own, and the Python wrappers of now_ns / advance_ns (they call those)
    if attr.startswith(("__", "_pybind11")) or attr in ("now", "advance"):
        continue
    static = inspect.getattr_static(cls, attr)
    if isinstance(static, (staticmethod, classmethod, type)) or attr in ("granted", "denied"):
        continue
    try:
        value = getattr(obj, attr)
        if callable(value) and not inspect.iscoroutinefunction(value):
            for args in ((), (1,), ("k", 1), (1, 1, None), ("k", 1, 1, None)):
                try:
                    value(*args)
                except TypeError as exc:
                    if "not initialized" in str(exc) or "__init__" in str(exc):
                        break
                    last = exc
            else:
                print("NO-TYPEERROR", attr, repr(last))
                continue
        else:
            print("NO-TYPEERROR", attr, "returned", repr(value)[:60])
            continue
    except TypeError as exc:
        if "not initialized" not in str(exc) and "__init__" not in str(exc):
            print("OTHER-TYPEERROR", attr, exc)
            continue
    except AttributeError as exc:
        if attr in engine_names:
            print("ATTRIBUTEERROR", attr, exc)
        continue
    except Exception as exc:
        print("RAISED", attr, type(exc).__name__, exc)
print("done")
"""

ENGINE_BACKED = [
    ("_core", t.__name__)
    for t in ENGINE_TYPES
    if t.__name__ not in ("EngineLeaseWait",)
    and t
    not in (
        _core.Lease,
        _core.Tally,
        _core.Meter,
        _core.Handoff,
        _core.WsgiGate,
        _core.AsgiGate,
        _core.AsgiSend,
        _core.AsgiCall,
    )
] + [
    ("permits", c.__name__)
    for c in PUBLIC_CLASSES
    if any(t.__module__ == "permits._core" for t in c.__mro__[1:]) and c is not permits.Lease
]


@pytest.mark.parametrize(("where", "name"), ENGINE_BACKED, ids=lambda v: str(v))
def test_methods_of_an_uninitialized_instance_raise_type_error(where: str, name: str) -> None:
    # Each class in its own child: a segfault fails this test only.
    child = run_child(_UNINITIALIZED.format(where=where, name=name))
    assert child.returncode == 0, child.stderr
    assert child.lines() == ["done"], child.stdout


def test_a_tally_made_by_new_alone_is_ready() -> None:
    # Tally has no __init__: __new__ makes it whole (zero counts), so no method meets it half made.
    tally = _core.Tally.__new__(_core.Tally)
    tally.grant()
    assert (tally.granted, tally.refused) == (1, 0)
    with pytest.raises(TypeError):
        _core.Tally(1)


def test_a_handoff_made_by_new_alone_is_ready() -> None:
    # Handoff has no __init__ either: __new__ makes it whole (empty lists, None), as the WSGI gate does.
    handoff = _core.Handoff.__new__(_core.Handoff)
    assert (handoff.route_leases, handoff.quotas, handoff.charges, handoff.started, handoff.body_size) == (
        [],
        [],
        [],
        None,
        0,
    )
    handoff.body_size += 5
    assert handoff.body_size == 5
    with pytest.raises(AttributeError):
        handoff.route_leases = []  # type: ignore[misc]  # (a list kept, mutated in place)
    with pytest.raises(TypeError):
        _core.Handoff(1)  # type: ignore[call-arg]


def test_a_wsgi_gate_made_by_new_alone_refuses_requests_until_bound() -> None:
    gate = _core.WsgiGate.__new__(_core.WsgiGate)
    with pytest.raises(TypeError, match="not initialized"):
        gate(lambda environ, start_response: [], {}, lambda *a: None)
    gate._bind(lambda environ, start_response: [b"x"], lambda app, environ, respond: app(environ, respond))
    assert gate({}, lambda *a: None) == [b"x"]
    with pytest.raises(TypeError, match="bound already"):
        gate._bind(lambda *a: None, lambda *a: None)


def test_an_asgi_gate_serves_requests_once_bound_and_is_bound_once() -> None:
    from permits._asgi_gate import asgi_gate
    from permits.asgi import RateLimitMiddleware

    async def app(scope: object, receive: object, send: object) -> str:
        return "served"

    async def python_path(*args: object) -> str:
        return "python"

    policy = RateLimitMiddleware(app, permits.PartitionedLimiter.per_key("5/minute")).policy
    gate = asgi_gate(policy)
    assert gate is not None
    with pytest.raises(TypeError, match="not bound"):
        gate({"type": "http"}, None, None)
    with pytest.raises(TypeError, match="callable"):
        gate.bind(app, 1, app, app, None, app)  # type: ignore[arg-type]
    gate.bind(app, python_path, python_path, python_path, None, lambda handoff: None)
    assert asyncio.run(gate({"type": "lifespan"}, None, None)) == "python"  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="bound already"):
        gate.bind(app, python_path, python_path, python_path, None, lambda handoff: None)


def test_a_meter_is_made_whole_by_new_or_not_at_all() -> None:
    # Meter has no __init__: __new__ needs its clock and bounds, so no method meets it half made.
    with pytest.raises(TypeError):
        _core.Meter.__new__(_core.Meter)
    meter = _core.Meter.__new__(_core.Meter, permits.ManualClock(), [1.0])
    assert (meter.results(), meter.active, meter.durations()) == ({}, 0, ([0, 0], 0.0))


def test_types_without_a_constructor_cannot_be_made_uninitialized() -> None:
    for cls in (_core.Lease, _core.EngineLeaseWait, _core.AsgiGate, _core.AsgiSend, _core.AsgiCall):
        with pytest.raises(TypeError):
            cls.__new__(cls)


def test_the_version_comes_from_the_package_metadata():
    assert permits.__version__ == version("permits")
    out = subprocess.run([sys.executable, "-m", "permits", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"permits {version('permits')}"
