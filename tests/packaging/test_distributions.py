"""The distributions users install. The sdist holds the sources and nothing of a working tree; a
wheel built from the sdist alone, in a clean virtualenv (build dependencies from the package index),
installs there and works with no source tree in sight; on Linux, auditwheel finds that wheel
consistent with a manylinux tag. The extension is compiled once, in the wheel build (a few minutes)."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from _dist import NAME, ROOT, VERSION, need, python_in, run, tracked

#: Compiling the extension on two cores, with the build dependencies to fetch first.
BUILD_TIMEOUT = 1200.0
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 300)

#: What building from the sdist needs besides the sources under cpp/ and python/.
TOP_LEVEL = {"pyproject.toml", "CMakeLists.txt", "LICENSE", "README.md", "PKG-INFO"}

#: Path parts that belong to a working tree or a build, never to an sdist.
WORKING_TREE = {".git", ".venv", "build", "dist", "__pycache__"}
CACHES = {".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
NOT_SOURCES = WORKING_TREE | CACHES


def clean_env() -> dict[str, str]:
    """The environment without this test run's virtualenv: its bin directory leaves PATH, and nothing
    points Python at another tree."""
    ours = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")  # ./scripts/test sets it from JOBS; ninja would take more
    return env


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need("build")
    out = tmp_path_factory.mktemp("sdist")
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT], cwd=out, timeout=300)
    (archive,) = out.glob("*.tar.gz")
    return archive


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv of the base interpreter: nothing installed but pip."""
    where = tmp_path_factory.mktemp("clean") / "venv"
    run([sys.executable, "-m", "venv", where], cwd=where.parent, env=clean_env())
    return where


@pytest.fixture(scope="module")
def unpacked(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist's sources in a folder, as a user's checkout holds them."""
    where = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        tar.extractall(where, filter="data")
    return where / f"{NAME}-{VERSION}"


@pytest.fixture(scope="module")
def wheel(unpacked: Path, venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from the sdist's sources alone in the clean virtualenv, in an isolated build
    environment, installed there."""
    out = tmp_path_factory.mktemp("wheelhouse")
    py = python_in(venv)
    run(
        [py, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, unpacked],
        cwd=out,
        env=clean_env(),
        timeout=BUILD_TIMEOUT,
    )
    (built,) = out.glob(f"{NAME}-{VERSION}-*.whl")
    run([py, "-m", "pip", "install", built], cwd=out, env=clean_env(), timeout=300)
    return built


def sdist_files(archive: Path) -> set[str]:
    """The sdist's files, relative to its top directory (name-version/)."""
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    top = f"{NAME}-{VERSION}/"
    assert all(n.startswith(top) for n in names), [n for n in names if not n.startswith(top)]
    return {n.removeprefix(top) for n in names}


def test_the_sdist_holds_every_source_the_build_needs(sdist: Path) -> None:
    assert sdist.name == f"{NAME}-{VERSION}.tar.gz"
    files = sdist_files(sdist)
    missing = (TOP_LEVEL | tracked("cpp", "python")) - files
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert "cpp/bindings/module.cpp" in files and "python/permits/__init__.py" in files


def test_the_sdist_holds_nothing_of_a_working_tree(sdist: Path) -> None:
    strays = sorted(
        f for f in sdist_files(sdist) if NOT_SOURCES & set(Path(f).parts) or f.endswith((".so", ".pyd", ".pyc"))
    )
    assert not strays, f"the sdist holds files of a working tree or a build: {strays[:20]}"


def test_the_wheel_built_from_the_sdist_holds_the_package_and_the_extension(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    package = {p.removeprefix("python/") for p in tracked("python/permits")}
    assert not package - names, f"the wheel lacks {sorted(package - names)}"
    assert [n for n in names if re.fullmatch(r"permits/_core\..+\.(so|pyd)", n)], sorted(names)
    assert not [n for n in names if n.startswith(("tests/", "cpp/", "benchmarks/"))]


def smoke(venv: Path, *args: str, timeout: float = 60) -> str:
    """Runs the clean virtualenv's Python isolated (-I: no current directory, PYTHONPATH or user site on
    sys.path) from an empty directory outside the repository."""
    home = venv.parent / "elsewhere"
    home.mkdir(exist_ok=True)
    return run([python_in(venv), "-I", *args], cwd=home, env=clean_env(), timeout=timeout).stdout


def test_the_installed_wheel_reports_its_version(wheel: Path, venv: Path) -> None:
    assert smoke(venv, "-m", "permits", "--version").strip() == f"permits {VERSION}"


def test_the_installed_wheel_runs_the_demo(wheel: Path, venv: Path) -> None:
    # On a ManualClock the run is the same every time: one second of the demo's traffic.
    out = smoke(venv, "-m", "permits", "demo", "--simulate", "--seconds", "1")
    assert "After 1 s: 70 requests offered to each limiter" in out, out
    assert re.search(r"^fixed window\s+10\s+60\s+0\b", out, re.MULTILINE), out


def test_the_installed_wheel_limits_from_the_virtualenv_not_the_source_tree(wheel: Path, venv: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        import permits, permits._core

        for module in (permits, permits._core):
            assert Path(module.__file__).is_relative_to(sys.prefix), module.__file__
        assert not [p for p in sys.path if Path(p).resolve().is_relative_to({str(ROOT)!r})], sys.path
        assert permits.__version__ == {VERSION!r}

        lim = permits.ConcurrencyLimiter(1, queue_limit=1)
        lease = lim.acquire()
        assert lease and not lim.acquire() and lim.available_permits() == 0
        lease.release()
        assert lim.available_permits() == 1

        async def main():
            held = await lim.acquire_async()
            queued = asyncio.ensure_future(lim.wait_async())
            await asyncio.sleep(0)
            held.release()
            return (await asyncio.wait_for(queued, 5)).acquired

        print(asyncio.run(main()), Path(permits._core.__file__).name)
        """
    )
    granted, core = smoke(venv, "-c", script).split()
    assert granted == "True"
    assert core.startswith("_core.")


@pytest.mark.skipif(sys.platform != "linux", reason="manylinux tags are Linux's")
def test_auditwheel_finds_the_wheel_consistent_with_a_manylinux_tag(wheel: Path) -> None:
    need("auditwheel")
    shown = run([sys.executable, "-m", "auditwheel", "show", wheel], cwd=wheel.parent).stdout
    print(shown)  # kept in the log (-rA): the tag, and the symbol versions that set it
    audit = json.loads(run([sys.executable, "-m", "auditwheel", "show", "--json", wheel], cwd=wheel.parent).stdout)
    assert re.fullmatch(rf"manylinux_2_\d+_{platform.machine()}", audit["overall_tag"]), audit
    # Every library the extension links is one the manylinux policy lets a wheel take from the system.
    assert audit["external_libs"] == {}, audit
    assert not audit["unsupported_isa"], audit


def test_installing_the_same_sources_again_with_an_extra_compiles_nothing(
    wheel: Path, unpacked: Path, venv: Path
) -> None:
    # pip builds every install in a new isolated environment (pybind11's headers under a new temporary path):
    # adding an extra to an install of the same checkout reuses its build folder and compiles nothing.
    done = run(
        [python_in(venv), "-m", "pip", "install", "-v", f"{unpacked}[metrics]"],
        cwd=unpacked,
        env=clean_env(),
        timeout=BUILD_TIMEOUT,
    )
    said = done.stdout + done.stderr
    assert "Successfully installed" in said and "prometheus" in said.lower(), said[-3000:]
    assert "Building CXX object" not in said, [line for line in said.splitlines() if "Building CXX" in line]
    assert "ninja: no work to do" in said, said[-3000:]
