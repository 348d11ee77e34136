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
from typing import Any

import pytest

from permits import Lease, Partition
from permits.shm import SharedMemoryStore

SAFETY = 60.0

if os.environ.get("CI") != "true" and (os.geteuid() != 0 or shutil.which("unshare") is None):
    pytest.skip("needs root and unshare(1) (util-linux) to make pid namespaces", allow_module_level=True)

# The holder: in a pid namespace of its own, one permit of "db" held (instrumented, so that the
# lease seen is the wrapped one users of metrics hold); it reports once the test lets it go on.
HOLDER = """
import json, logging, sys, time
from prometheus_client import CollectorRegistry
from permits import Partition
from permits.metrics import instrument
from permits.shm import SharedMemoryStore

warnings = []
class Kept(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("permits").addHandler(Kept())

registry = CollectorRegistry()
store = SharedMemoryStore(sys.argv[1])
if sys.argv[4] == "keyed":  # a key of a per-key concurrency limit: its lease from keyed.acquire(key)
    keyed = store.partitioned(Partition.concurrency(None, int(sys.argv[2])), name="db", lease_ttl=0.5)
    db = instrument(keyed, registry=registry)
    lease = db.acquire("k")
    available_permits = lambda: db.available_permits("k")
else:
    db = instrument(store.concurrency("db", int(sys.argv[2]), lease_ttl=0.5), registry=registry)
    lease = db.acquire()
    available_permits = db.available_permits
print(bool(lease), flush=True)
sys.stdin.readline()  # resumed: told to look
expect_lost = sys.argv[3] == "lost"
deadline = time.monotonic() + 20
# Unasked, its heartbeat finds the lease forgotten; a lost one is reported from a thread of its own.
while time.monotonic() < deadline and (bool(warnings) != expect_lost or available_permits() != 0):
    time.sleep(0.01)
lost = lease.metadata.get("lost", False)
available = available_permits()
counted = registry.get_sample_value("permits_leases_lost_total", {"limiter": "db"})
lease.release()
after = lease.metadata.get("lost", False)
print(json.dumps({"lost": lost, "available": available, "after_release": after, "warnings": warnings,
                  "counted": counted}), flush=True)
"""


def start_holder(name: str, limit: int, expect: str, kind: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-c", textwrap.dedent(HOLDER), name, str(limit), expect, kind],
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


class Db:
    """This test's side of the holder's limit: the named concurrency limiter "db", or the key "k" of
    the per-key concurrency limit "db"."""

    def __init__(self, segment: str, limit: int, kind: str) -> None:
        self.kind, self.segment, self.limit = kind, segment, limit
        self.lim = self.open()

    def open(self) -> Any:
        store = SharedMemoryStore(self.segment)
        if self.kind == "keyed":
            return store.partitioned(Partition.concurrency(None, self.limit), name="db", lease_ttl=0.5)
        return store.concurrency("db", self.limit, lease_ttl=0.5)

    def args(self) -> tuple[object, ...]:
        return ("k",) if self.kind == "keyed" else ()

    def wait(self, permits: int = 1) -> Lease:
        lease: Lease = self.lim.wait(*self.args(), permits, timeout=20)
        return lease

    def acquire(self) -> Lease:
        lease: Lease = self.lim.acquire(*self.args())
        return lease

    def available_permits(self) -> int:
        return int(self.lim.available_permits(*self.args()))


KINDS = pytest.mark.parametrize("kind", ["named", "keyed"])


@KINDS
def test_a_paused_holder_whose_permit_went_to_another_is_told_its_lease_is_lost(segment_name: str, kind: str) -> None:
    db = Db(segment_name, 1, kind)
    holder = start_holder(segment_name, 1, "lost", kind)
    try:
        os.killpg(holder.pid, signal.SIGSTOP)
        # Paused past lease_ttl, it beats no more: its permit is given to a process that asks.
        mine = db.wait()
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
    other = Db(segment_name, 1, kind)
    assert not other.acquire()
    mine.release()
    assert db.available_permits() == 1


@KINDS
def test_a_paused_holder_takes_its_permit_back_when_the_limit_allows(segment_name: str, kind: str) -> None:
    db = Db(segment_name, 2, kind)
    holder = start_holder(segment_name, 2, "kept", kind)
    try:
        os.killpg(holder.pid, signal.SIGSTOP)
        both = db.wait(2)  # granted once the paused holder is judged dead
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
