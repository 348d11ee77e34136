"""``python -m permits shm list|show|unlink`` run as a user runs it, on real segments made here:
the numbers it shows after acquires, a killed holder shown dead, and bad input answered with one
line and an exit status, never a traceback or a segment created."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import permits
from permits.partition import Partition
from permits.shm import SharedMemoryStore


def path(name: str) -> str:
    return f"/dev/shm/permits.{name}"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "permits", "shm", *args], capture_output=True, text=True, timeout=60)


def show(name: str) -> dict[str, Any]:
    done = cli("show", name, "--json")
    assert done.returncode == 0, done.stderr
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def limiter(info: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [entry for entry in info["limiters"] if entry["name"] == name]
    assert len(found) == 1, info
    return found[0]


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("permits shm: "), lines
    return lines[0]


def test_list_shows_the_segments_of_permits_and_nothing_else(segment_name: str) -> None:
    other = f"/dev/shm/not-permits-{os.getpid()}"
    with open(other, "wb") as f:  # another program's segment
        f.write(b"x" * 100)
    try:
        with SharedMemoryStore(segment_name, mode=0o600) as store:
            store.token_bucket("api", 10, 10, 3600.0)
            store.concurrency("jobs", 5)
            done = cli("list", "--json")
            assert done.returncode == 0, done.stderr
            entries = {e["name"]: e for e in json.loads(done.stdout)}
            mine = entries[segment_name]
            assert mine["path"] == path(segment_name)
            assert mine["size"] == os.stat(path(segment_name)).st_size == store.size
            assert mine["limiters"] == 2
            assert mine["holders"] == 0
            assert mine["mode"] == "0o600"
            assert mine["owner"] == pwd.getpwuid(os.getuid()).pw_name
            assert mine["error"] is None
            assert not any("not-permits" in name for name in entries)
            text = cli("list")
            assert text.returncode == 0, text.stderr
            (row,) = [line.split() for line in text.stdout.splitlines() if line.startswith(segment_name + " ")]
            assert row[0] == segment_name and row[3:] == ["2", "0", "0600", mine["owner"]]
    finally:
        os.unlink(other)


def test_show_counts_what_every_kind_has_available_and_who_holds_permits(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        # Periods of an hour: nothing refills while the test runs.
        assert store.token_bucket("api", 10, 10, 3600.0).acquire(3)
        assert store.fixed_window("fw", 4, 3600.0).acquire(1)
        assert store.sliding_window("sw", 6, 3600.0, 3).acquire(2)
        assert store.sliding_window_counter("swc", 8, 3600.0).acquire(8)
        jobs = store.concurrency("jobs", 5)
        lease = jobs.acquire(2)
        assert lease
        info = show(segment_name)
        assert info["name"] == segment_name and info["clock"] == "monotonic"
        assert info["capacity"] == 10_000
        assert 0 < info["used_bytes"] < info["arena_bytes"]
        api = limiter(info, "api")
        assert api["kind"] == "token_bucket"
        assert api["params"] == [
            ["token_limit", 10, False],
            ["tokens_per_period", 10, False],
            ["replenishment_period", 3600 * 10**9, True],
        ]
        assert (api["available"], api["limit"]) == (7, 10)
        assert limiter(info, "fw")["available"] == 3
        assert limiter(info, "sw")["available"] == 4
        assert limiter(info, "swc")["available"] == 0
        c = limiter(info, "jobs")
        assert (c["kind"], c["available"], c["limit"], c["damage"]) == ("concurrency", 3, 5, None)
        assert c["holders"] == [
            {"index": c["holders"][0]["index"], "pid": os.getpid(), "permits": 2, "alive": True, "same_namespace": True}
        ]
        assert [h["pid"] for h in info["holders"]] == [os.getpid()]

        text = cli("show", segment_name)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].startswith(f"segment '{segment_name}' ({path(segment_name)}): ")
        free = info["arena_bytes"] - info["used_bytes"]
        assert f"free: {free} of {info['arena_bytes']} bytes" in lines[1]
        assert "holder slots: 1 of 256 in use" in lines[1]
        rows = {line.split()[0]: line.split() for line in lines[3:] if line and not line.startswith(" ")}
        assert rows["api"][1:3] == ["token_bucket", "7/10"]
        assert rows["jobs"][1:] == ["concurrency", "3/5", "permit_limit=5", "lease_ttl=60s"]
        assert f"  jobs: holder pid {os.getpid()}: 2 permits, alive" in lines

        lease.release()
        after = limiter(show(segment_name), "jobs")
        assert (after["available"], after["holders"]) == (5, [])


def test_a_killed_holder_shows_dead_until_the_engine_takes_its_permits_back(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        jobs = store.concurrency("jobs", 5, lease_ttl=3600)
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
                import sys, time
                from permits.shm import SharedMemoryStore
                lease = SharedMemoryStore({segment_name!r}).concurrency("jobs", 5, lease_ttl=3600).acquire(2)
                print("held" if lease else "refused", flush=True)
                time.sleep(600)
                """),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "held"
            alive = limiter(show(segment_name), "jobs")["holders"]
            assert [(h["pid"], h["permits"], h["alive"]) for h in alive] == [(child.pid, 2, True)]
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        info = show(segment_name)
        c = limiter(info, "jobs")
        assert c["available"] == 3  # looking reclaims nothing
        assert [(h["pid"], h["permits"], h["alive"]) for h in c["holders"]] == [(child.pid, 2, False)]
        assert [(h["pid"], h["alive"]) for h in info["holders"]] == [(child.pid, False)]
        text = cli("show", segment_name).stdout
        assert f"jobs: holder pid {child.pid}: 2 permits, dead" in text
        # A take that needs them has the engine give them back.
        lease = jobs.acquire(5)
        assert lease
        c = limiter(show(segment_name), "jobs")
        assert c["available"] == 0
        assert [(h["pid"], h["permits"], h["alive"]) for h in c["holders"]] == [(os.getpid(), 5, True)]
        lease.release()


def test_show_counts_a_per_key_tables_keys_and_holders(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        keyed = store.partitioned(Partition.concurrency(None, 3), name="per-user", max_partitions=50)
        leases = [keyed.acquire("alice", 2), keyed.acquire("bob")]
        assert all(leases)
        store.partitioned(permits.specs.FixedWindow(100, 3600.0), name="per-ip").acquire("10.0.0.1")
        info = show(segment_name)
        users = limiter(info, "per-user")
        assert (users["kind"], users["key_kind"], users["keys"], users["limit"]) == ("partitioned", "concurrency", 2, 3)
        assert ["max_partitions", 50, False] in users["params"]
        assert [(h["pid"], h["permits"]) for h in users["holders"]] == [(os.getpid(), 3)]
        ips = limiter(info, "per-ip")
        assert (ips["key_kind"], ips["keys"], ips["holders"]) == ("fixed_window", 1, [])
        text = cli("show", segment_name).stdout
        rows = [line.split() for line in text.splitlines()]
        assert ["per-user", "partitioned", "(concurrency)", "2/50", "keys", "permit_limit=3"] in [r[:6] for r in rows]
        for lease in leases:
            lease.release()


def test_a_rate_shows_as_the_sliding_log_it_is(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        assert store.limiter("api", "100/minute").acquire(30)
        store.partitioned("10/second", name="per-ip").acquire("10.0.0.1")
        info = show(segment_name)
        api = limiter(info, "api")
        assert (api["kind"], api["limit"], api["available"]) == ("sliding_log", 100, 70)
        assert api["params"] == [["permit_limit", 100, False], ["window", 60_000_000_000, True]]
        ips = limiter(info, "per-ip")
        assert (ips["key_kind"], ips["keys"]) == ("sliding_log", 1)
        assert ["window", 1_000_000_000, True] in ips["params"]
        rows = [line.split() for line in cli("show", segment_name).stdout.splitlines()]
        assert ["api", "sliding_log", "70/100", "permit_limit=100", "window=60s"] in [r[:5] for r in rows], rows


def test_a_reconfigured_limit_shows_as_the_limit_that_holds(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        api = store.limiter("api", "100/minute")
        assert api.acquire(30)
        api.reconfigure("40/minute")
        shown = limiter(show(segment_name), "api")
        assert (shown["limit"], shown["available"], shown["damage"]) == (40, 10, None)
        assert shown["params"] == [["permit_limit", 40, False], ["window", 60_000_000_000, True]]
        api.reconfigure("20/minute")  # 30 taken under a higher limit: no damage
        shown = limiter(show(segment_name), "api")
        assert (shown["limit"], shown["available"], shown["damage"]) == (20, 0, None)


def test_a_manual_clocks_time_based_availability_is_not_guessed(segment_name: str) -> None:
    with SharedMemoryStore(segment_name, clock=permits.ManualClock()) as store:
        store.token_bucket("api", 10, 10, 1.0).acquire(3)
        store.concurrency("jobs", 2)
        info = show(segment_name)
        assert info["clock"] == "manual"
        assert limiter(info, "api")["available"] is None
        assert limiter(info, "jobs")["available"] == 2
        text = cli("show", segment_name).stdout
        assert any(line.split()[:3] == ["api", "token_bucket", "?"] for line in text.splitlines()), text


def test_unlink_removes_the_segment_and_says_when_there_is_none(segment_name: str) -> None:
    SharedMemoryStore(segment_name).close()
    assert os.path.exists(path(segment_name))
    done = cli("unlink", segment_name)
    assert done.returncode == 0, done.stderr
    assert f"removed segment '{segment_name}'" in done.stdout
    assert not os.path.exists(path(segment_name))
    again = cli("unlink", segment_name)
    assert again.returncode == 1
    assert one_line_error(again) == f"permits shm: no shared-memory segment '{segment_name}' ({path(segment_name)})"


def test_a_missing_segment_is_an_error_and_is_never_created(segment_name: str) -> None:
    for args in (["show", segment_name], ["show", segment_name, "--json"]):
        done = cli(*args)
        assert done.returncode == 1
        assert "no shared-memory segment" in one_line_error(done)
        assert done.stdout == ""
    assert not os.path.exists(path(segment_name))


@pytest.mark.parametrize("bad", ["../etc/passwd", "a b", ".hidden", "x" * 101])
@pytest.mark.parametrize("action", ["show", "unlink"])
def test_a_name_that_cannot_name_a_segment_is_a_usage_error(action: str, bad: str) -> None:
    done = cli(action, bad)
    assert done.returncode == 2
    assert "not a segment name" in one_line_error(done)


def test_another_programs_file_under_our_prefix_is_refused_and_listed_as_such(segment_name: str) -> None:
    with open(path(segment_name), "wb") as f:
        f.write(b"not a segment " * 10_000)
    done = cli("show", segment_name)
    assert done.returncode == 1
    assert "is not a permits segment" in one_line_error(done)
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = [e for e in json.loads(listed.stdout) if e["name"] == segment_name]
    assert entry["limiters"] is None and "is not a permits segment" in entry["error"]
    assert os.path.getsize(path(segment_name)) == len(b"not a segment ") * 10_000  # untouched


def test_a_damaged_segment_is_a_one_line_error(segment_name: str) -> None:
    SharedMemoryStore(segment_name).close()
    with open(path(segment_name), "r+b") as f:
        f.seek(8)  # the layout version, after the 8-byte magic number
        f.write((99).to_bytes(4, "little"))
    for args in (["show", segment_name], ["show", segment_name, "--json"]):
        done = cli(*args)
        assert done.returncode == 1
        assert "has layout version 99" in one_line_error(done)


def test_a_damaged_limiter_is_shown_as_such_and_fails_the_command(segment_name: str) -> None:
    with SharedMemoryStore(segment_name) as store:
        store.token_bucket("api", 10, 10, 3600.0)
        store.concurrency("jobs-to-damage", 5)
    with open(path(segment_name), "r+b") as f:
        data = f.read(1 << 20)
        name_at = data.index(b"jobs-to-damage\0")
        f.seek(name_at - 12)  # its slot's kind: {ready, kind, count, pad} come before the name
        f.write((77).to_bytes(4, "little"))
    done = cli("show", segment_name)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "DAMAGED: its kind, 77, is no limiter's" in rows["jobs-to-damage"]
    assert rows["api"].split()[1:3] == ["token_bucket", "10/10"]
    assert done.stderr.strip() == f"permits shm: 1 damaged limiter(s) in segment '{segment_name}' (unlink it)"
    as_json = cli("show", segment_name, "--json")
    assert as_json.returncode == 1
    assert limiter(json.loads(as_json.stdout), "jobs-to-damage")["damage"] == "its kind, 77, is no limiter's"


def test_without_shared_memory_it_says_so() -> None:
    # As on a platform whose extension has no shared memory.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
            import runpy, sys
            import permits._core
            del permits._core.ShmStore
            sys.argv = ["permits", "shm", "list"]
            runpy.run_module("permits", run_name="__main__", alter_sys=True)
            """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert one_line_error(done) == "permits shm: shared memory is not available here: permits.shm needs Linux"


def test_shm_without_an_action_is_a_usage_error() -> None:
    done = cli()
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
