"""``python -m permits demo``: the simulated run's numbers, the command line, and ``--http`` end to end."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

import permits
from permits.__main__ import main
from permits.demo import simulate

from _child import run_ok


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
