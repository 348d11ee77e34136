"""Leases the segment forgot while their holder lived: a holder in another pid namespace (where its
liveness is its heartbeat), paused with SIGSTOP past lease_ttl, is judged dead by a process that
needs its permits. On resuming it takes its permit back when the limit allows it, and otherwise
its lease is lost: metadata["lost"], a warning naming the limiter on the "permits" logger, a count
in permits_leases_lost_total, and a release that gives nothing back. These tests make the pid
namespaces themselves (unshare, as root)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from permits.shm import SharedMemoryStore

SAFETY = 60.0

if os.environ.get("CI") != "true" and (os.geteuid() != 0 or shutil.which("unshare") is None):
    pytest.skip("needs root and unshare(1) (util-linux) to make pid namespaces", allow_module_level=True)

# The holder: in a pid namespace of its own, one permit of "db" held (instrumented, so that the
# lease seen is the wrapped one users of metrics hold); it reports once the test lets it go on.
HOLDER = """
import json, logging, sys, time
from prometheus_client import CollectorRegistry
from permits.metrics import instrument
from permits.shm import SharedMemoryStore

warnings = []
class Kept(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("permits").addHandler(Kept())

registry = CollectorRegistry()
db = instrument(SharedMemoryStore(sys.argv[1]).concurrency("db", int(sys.argv[2]), lease_ttl=0.5), registry=registry)
lease = db.acquire()
print(bool(lease), flush=True)
sys.stdin.readline()  # resumed: told to look
expect_lost = sys.argv[3] == "lost"
deadline = time.monotonic() + 20
# Unasked, its heartbeat finds the lease forgotten; a lost one is reported from a thread of its own.
while time.monotonic() < deadline and (bool(warnings) != expect_lost or db.available_permits() != 0):
    time.sleep(0.01)
lost = lease.metadata.get("lost", False)
available = db.available_permits()
counted = registry.get_sample_value("permits_leases_lost_total", {"limiter": "db"})
lease.release()
after = lease.metadata.get("lost", False)
print(json.dumps({"lost": lost, "available": available, "after_release": after, "warnings": warnings,
                  "counted": counted}), flush=True)
"""


def start_holder(name: str, limit: int, expect: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-c", textwrap.dedent(HOLDER), name, str(limit), expect],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
    return holder


def stop(holder: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):  # (ended already)
        os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()


def resume_and_read(holder: subprocess.Popen[str]) -> dict[str, object]:
    os.killpg(holder.pid, signal.SIGCONT)
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    report: dict[str, object] = json.loads(holder.stdout.readline())
    assert holder.wait(timeout=SAFETY) == 0
    return report


def test_a_paused_holder_whose_permit_went_to_another_is_told_its_lease_is_lost(segment_name: str) -> None:
    db = SharedMemoryStore(segment_name).concurrency("db", 1, lease_ttl=0.5)
    holder = start_holder(segment_name, 1, "lost")
    try:
        os.killpg(holder.pid, signal.SIGSTOP)
        # Paused past lease_ttl, it beats no more: its permit is given to a process that asks.
        mine = db.wait(timeout=20)
        assert mine, mine.reason
        report = resume_and_read(holder)
    finally:
        stop(holder)
    assert report["lost"] is True
    assert report["available"] == 0  # the other process's
    assert report["after_release"] is True
    assert report["counted"] == 1.0
    warnings = report["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 1 and "'db'" in warnings[0] and "lost 1 lease" in warnings[0]
    # Its release gave nothing back: the permit is this process's, and the limit of 1 held once.
    assert db.available_permits() == 0
    assert not SharedMemoryStore(segment_name).concurrency("db", 1, lease_ttl=0.5).acquire()
    mine.release()
    assert db.available_permits() == 1


def test_a_paused_holder_takes_its_permit_back_when_the_limit_allows(segment_name: str) -> None:
    db = SharedMemoryStore(segment_name).concurrency("db", 2, lease_ttl=0.5)
    holder = start_holder(segment_name, 2, "kept")
    try:
        os.killpg(holder.pid, signal.SIGSTOP)
        both = db.wait(2, timeout=20)  # granted once the paused holder is judged dead
        assert both, both.reason
        both.release()  # its permit is free again when it resumes
        one = db.acquire()
        assert one
        report = resume_and_read(holder)
    finally:
        stop(holder)
    # Taken back (the limit of 2 held by the two of them again), never lost; its release gave it back.
    assert report == {"lost": False, "available": 0, "after_release": False, "warnings": [], "counted": 0.0}
    assert db.available_permits() == 1
    one.release()
    assert db.available_permits() == 2
