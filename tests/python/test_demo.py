"""``python -m permits demo``: the simulated run's numbers, the command line, and ``--http`` end to end."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import permits
from permits.__main__ import main
from permits.demo import simulate
from permits.demo.plot import BIN
from permits.demo.scenario import RATE, WINDOW, _describe_traffic

from _child import run_child, run_ok


def test_the_simulated_demo_grants_about_the_configured_rate() -> None:
    result = simulate(5.0)
    offered = len(result.offered_at)
    by_label = {row.label: row for row in result.rows}
    assert offered > 0
    for row in result.rows:
        # Every request offered is granted or rejected (or still queued at the end), never lost.
        assert row.granted + row.rejected + row.unfinished == offered, row.label
        assert all(0 <= t <= 5.0 for t in row.granted_at)
    # About 10 per second over 5 s (the traffic pauses between 3 s and 4 s, which the sliding
    # windows remember), plus a token bucket's burst of 20 at most: far fewer than were offered.
    for row in by_label.values():
        assert 30 <= row.granted <= 10 * 5 + 20, (row.label, row.granted)
        if row.mode != "queue":  # a queue admits the waiters as the bucket refills
            assert row.granted < offered / 2, row.label
        assert row.rejected > 0 or row.mode == "queue", row.label


def test_the_simulated_demo_is_deterministic() -> None:
    first, second = simulate(3.0), simulate(3.0)
    assert [(r.label, r.granted_at, r.rejected_at) for r in first.rows] == [
        (r.label, r.granted_at, r.rejected_at) for r in second.rows
    ]


def test_demo_simulate_prints_a_summary() -> None:
    out = io.StringIO()
    assert permits.demo.run_demo(2.0, simulate=True, stream=out) == 0
    text = out.getvalue()
    assert "granted" in text.lower()


# ------------------------------------------------------------------ the picture (--plot)

ROOT = Path(__file__).resolve().parents[2]
SERIES = [
    "granted",
    "rejected",
    "offered",
    f"limit: {RATE} requests/s",
    f"window boundary (every {WINDOW:g} s)",
    "segment boundary (sliding window, every 0.25 s)",
    "queued: requests waiting (right axis)",
]


def _matplotlib() -> Any:
    # ./scripts/test and the test extra install matplotlib; a bare environment skips, saying why
    return pytest.importorskip("matplotlib", reason="the demo's --plot needs matplotlib (pip install matplotlib)")


def test_the_demo_picture_labels_every_series_and_axis(tmp_path: Path) -> None:
    _matplotlib()
    result = simulate(5.0)
    path = tmp_path / "demo.png"
    fig = permits.demo.write_plot(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert fig._suptitle is not None and _describe_traffic(5.0) in fig._suptitle.get_text()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == SERIES
    panels = [ax for ax in fig.axes if ax.get_ylabel() == "requests/s"]  # the rate axes, one per limiter
    assert len(panels) == len(result.rows)
    for ax, row in zip(panels, result.rows, strict=True):
        assert ax.get_title(loc="left").startswith(f"{row.label} ({row.detail}): granted {row.granted}")
        # the bars are the counts: granted and rejected per bin, as requests per second
        granted, rejected = ax.containers[0], ax.containers[1]
        assert round(sum(bar.get_height() for bar in granted) * BIN) == row.granted
        assert round(sum(bar.get_height() for bar in rejected) * BIN) == row.rejected
    assert "time" in panels[-1].get_xlabel() and "(s)" in panels[-1].get_xlabel()
    queue_axes = [ax for ax in fig.axes if ax.get_ylabel() == "waiting (requests)"]
    assert len(queue_axes) == 1  # the queued variant's, on the right


def test_the_demo_picture_marks_the_windows() -> None:
    _matplotlib()
    result = simulate(5.0)
    fig = permits.demo.plot_figure(result)
    by_label = dict(zip((row.label for row in result.rows), fig.axes, strict=False))

    def verticals(ax: Any, style: str) -> list[float]:
        return [
            float(line.get_xdata()[0])
            for line in ax.get_lines()
            if line.get_linestyle() == style and line.get_xdata()[0] == line.get_xdata()[1]
        ]

    for label in ("fixed window", "sliding window", "sliding window counter"):
        assert verticals(by_label[label], "--") == [1.0, 2.0, 3.0, 4.0], label
    assert verticals(by_label["sliding window"], ":") == [t / 4 for t in range(1, 20) if t % 4]
    assert verticals(by_label["token bucket"], "--") == []  # a bucket has no windows


def test_nothing_in_the_demo_picture_is_hidden_or_clipped() -> None:
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = permits.demo.plot_figure(simulate(5.0, concurrency=True))
    canvas = FigureCanvasAgg(fig)  # what savefig draws a PNG with
    canvas.draw()  # lays the figure out
    renderer = canvas.get_renderer()
    page = fig.bbox
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    inside = lambda b: b.x0 >= page.x0 - 1 and b.y0 >= page.y0 - 1 and b.x1 <= page.x1 + 1 and b.y1 <= page.y1 + 1  # noqa: E731
    assert inside(box)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer)), ax.get_title(loc="left")
        assert inside(ax.get_tightbbox(renderer)), ax.get_title(loc="left")  # titles, ticks, labels
    assert fig._suptitle is not None
    title = fig._suptitle.get_window_extent(renderer)
    assert inside(title) and not box.overlaps(title)


def test_the_docs_describe_the_picture() -> None:
    text = (ROOT / "docs" / "demo.md").read_text()
    picture = text.split("## The picture", 1)[1].split("\n## ", 1)[0]
    for series in ("granted", "rejected", "offered", "limit", "window boundar", "segment boundar", "waiting"):
        assert series in picture, series


def test_the_demo_without_plot_does_not_import_matplotlib() -> None:
    child = run_ok(
        """
        import io, sys
        import permits.demo
        assert permits.demo.run_demo(1.0, simulate=True, stream=io.StringIO()) == 0
        print("matplotlib" in sys.modules)
        """
    )
    assert child.lines() == ["False"]


def test_plot_says_what_to_install_when_matplotlib_is_missing() -> None:
    child = run_child(
        """
        import sys
        sys.modules["matplotlib"] = None  # as if not installed
        import permits.demo
        sys.exit(permits.demo.run_demo(1.0, "out.png", simulate=True))
        """
    )
    assert child.returncode == 2
    assert 'pip install "permits[plot]"' in child.stderr


def test_plot_says_when_matplotlib_is_too_old() -> None:
    child = run_child(
        """
        import sys, types
        sys.modules["matplotlib"] = types.SimpleNamespace(__version__="3.6.3")
        import permits.demo
        sys.exit(permits.demo.run_demo(1.0, "out.png", simulate=True))
        """
    )
    assert child.returncode == 2
    assert "matplotlib 3.7 or later, not 3.6.3" in child.stderr


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"permits {permits.__version__}"


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "abc", "4000"])
def test_bad_seconds_are_refused_by_the_parser(seconds: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--seconds", seconds])
    assert stop.value.code == 2
    assert "--seconds" in capsys.readouterr().err


def test_http_refuses_options_of_the_simulated_demo(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--http", "--simulate"])
    assert stop.value.code == 2
    assert "--http" in capsys.readouterr().err


def test_demo_http_serves_real_requests_and_shows_the_limits() -> None:
    # The real thing, as a user runs it: uvicorn on loopback, an httpx client, for 3 seconds.
    done = subprocess.run(
        [sys.executable, "-m", "permits", "demo", "--http", "--seconds", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    final = done.stdout.split("In all:")[1]
    counts = {
        name: dict((int(code), int(n)) for code, n in re.findall(r"(\d{3}):(\d+)", line))
        for name, line in re.findall(r"^\s+(alice|bob|carol)\s+(.*)$", final, re.MULTILINE)
    }
    assert counts["alice"].get(429, 0) == 0 and counts["alice"][200] >= 8  # 4/s, under her 5/s
    assert counts["bob"][429] > 0 and counts["bob"][200] > 0  # 10/s against 5/s
    assert counts["carol"].get(429, 0) == 0 and counts["carol"][200] >= 6  # queued, none refused
    bob = re.search(r"^\s+bob\s+.*$", final, re.MULTILINE)
    assert bob is not None and re.search(r"Retry-After \d+s", bob.group(0)), bob
    assert re.search(r"reports queued \(most at once\): [1-9]", done.stdout), done.stdout  # carol's bursts waited
    carol = re.search(r"^\s+carol\s+.*at most (\d+)\s+in flight", final, re.MULTILINE)
    assert carol is not None and int(carol.group(1)) >= 3, final  # her burst was in flight together


def test_demo_http_says_what_to_install_when_a_framework_is_missing() -> None:
    child = run_ok(
        """
        import sys
        sys.modules["uvicorn"] = None  # as if not installed: find_spec says None
        from permits.demo import http
        print(http.run_http_demo(1.0))
        """
    )
    assert child.lines() == ["2"]
    assert "uvicorn" in child.stderr


# ``python -m permits`` in a child whose import system refuses some modules, as where they are not
# installed: a finder ahead of the others raises ImportError for them (and their submodules).
_WITHOUT = """
import runpy, sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _NotInstalled())
sys.argv = ["permits", *ARGV]
runpy.run_module("permits", run_name="__main__", alter_sys=True)
"""


def _run_without(blocked: set[str], *argv: str) -> Any:
    code = _WITHOUT.replace("BLOCKED", repr(blocked)).replace("ARGV", repr(list(argv)))
    return run_child(code)


def test_demo_plot_without_matplotlib_names_the_extra_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "demo.png"
    child = _run_without({"matplotlib"}, "demo", "--simulate", "--seconds", "1", "--plot", str(out))
    assert child.returncode == 2, child.stderr
    assert child.stderr.strip().splitlines() == [
        'permits demo: --plot needs matplotlib, which is not installed: pip install "permits[plot]"'
    ]
    assert not out.exists()


@pytest.mark.parametrize("missing", ["fastapi", "uvicorn", "httpx"])
def test_demo_http_without_a_framework_names_the_extra_and_exits_2(missing: str) -> None:
    child = _run_without({missing}, "demo", "--http", "--seconds", "1")
    assert child.returncode == 2, child.stderr
    assert child.stderr.strip().splitlines() == [
        f'permits demo: --http needs {missing}, not installed: pip install "permits[fastapi,httpx]" uvicorn'
    ]
    assert child.stdout == ""


def test_the_plot_extra_is_declared() -> None:
    # The extra the message names exists, with the matplotlib the plot needs.
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert "matplotlib>=3.7" in extras["plot"]
    assert any(dep.startswith("fastapi") for dep in extras["fastapi"])
    assert any(dep.startswith("httpx") for dep in extras["httpx"])
