"""Holders the store cannot see through /proc: another user's processes under a /proc mounted
hidepid=2, and processes in other pid namespaces (containers sharing /dev/shm, each app pid 1).
These tests make the namespaces themselves (unshare, as root)."""

from __future__ import annotations

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
    pytest.skip("needs root and unshare(1) (util-linux) to make namespaces", allow_module_level=True)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


# uid 65534's view, after its imports: /proc hides root's processes from it.
OTHER_USER = """
import os, sys
from permits.shm import SharedMemoryStore
os.setgid(65534)
os.setuid(65534)
assert not os.path.exists(f"/proc/{sys.argv[2]}/stat")  # hidden
print(bool(SharedMemoryStore(sys.argv[1], mode=0o666).concurrency("db", 1).acquire()))
"""


def test_another_users_holder_hidden_by_hidepid_is_alive(segment_name: str) -> None:
    # Root holds the only permit; a process of uid 65534, to which /proc hides root's processes,
    # must not take it for a dead holder's.
    code = f"""
        import os, subprocess, sys
        from permits.shm import SharedMemoryStore
        store = SharedMemoryStore({segment_name!r}, mode=0o666)
        lease = store.concurrency("db", 1).acquire()
        done = subprocess.run(
            [sys.executable, "-c", os.environ["OTHER"], {segment_name!r}, str(os.getpid())],
            capture_output=True, text=True, timeout=30, cwd="/",
        )
        print(done.stdout.strip(), done.stderr.strip()[-300:])
        print(store.concurrency("db", 1).available_permits())
        lease.release()
    """
    mount = f'mount -t proc -o hidepid=2 proc /proc && exec {sys.executable} -c "$CODE"'
    done = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "sh", "-c", mount],
        env={**os.environ, "CODE": textwrap.dedent(code), "OTHER": OTHER_USER},
        capture_output=True,
        text=True,
        timeout=SAFETY,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0"], done.stdout + done.stderr


def test_a_holder_in_another_pid_namespace_lives_by_its_heartbeat(segment_name: str) -> None:
    hold = f"""
        import time
        from permits.shm import SharedMemoryStore
        db = SharedMemoryStore({segment_name!r}).concurrency("db", 1, lease_ttl=1.0)
        lease = db.acquire()  # kept: a lease dropped is released
        print(bool(lease), flush=True)
        time.sleep(60)
    """
    take = f"""
        import os
        from permits.shm import SharedMemoryStore
        db = SharedMemoryStore({segment_name!r}).concurrency("db", 1, lease_ttl=1.0)
        print(os.getpid(), db.wait(timeout={{timeout}}).reason or "acquired")
    """
    # Each "container" is a pid namespace of its own, whose process is pid 1, as an app's usually is.
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", *python(hold)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        # Alive, it renews its heartbeat (every lease_ttl / 3): held for 3 lease_ttl, it keeps its permit.
        alive = subprocess.run(
            ["unshare", "--pid", "--fork", *python(take.replace("{timeout}", "3"))],
            capture_output=True,
            text=True,
            timeout=SAFETY,
        )
        assert alive.stdout.split() == ["1", "timeout"], alive.stdout + alive.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    # Dead, it renews nothing: lease_ttl later its permit is back, for another pid 1 too.
    dead = subprocess.run(
        ["unshare", "--pid", "--fork", *python(take.replace("{timeout}", "30"))],
        capture_output=True,
        text=True,
        timeout=SAFETY,
    )
    assert dead.stdout.split() == ["1", "acquired"], dead.stdout + dead.stderr
    assert SharedMemoryStore(segment_name).concurrency("db", 1, lease_ttl=1.0).available_permits() == 1
