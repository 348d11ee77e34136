"""Deployment scenarios run in a child interpreter under a time limit.

What users do in production (threads each running ``asyncio.run``, ``os.fork()`` with work in
flight, interpreter exit with threads blocked in the engine, loops closed by hand) can hang or
crash a process. Each scenario runs in its own ``python -c`` child, so a hang or a crash fails
the one test that found it, with what the child printed, instead of the whole run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass

#: Wall-clock limit for one scenario: a safety net against hangs, never the thing under test.
LIMIT = 60.0


@dataclass
class Child:
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run_child(code: str, *, timeout: float = LIMIT, env: dict[str, str] | None = None) -> Child:
    """Runs ``code`` (dedented) in a fresh interpreter; fails the test on a hang, with the output
    and, from faulthandler, where each of the child's threads was when it was stopped."""
    full_env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack, then it dies
            try:
                out, err = child.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                out, err = child.communicate()
            raise AssertionError(
                f"the child hung (stopped after {timeout} s)\nstdout:\n{out}\nstderr:\n{err}"
            ) from None
    return Child(child.returncode, out, err)


def run_ok(code: str, *, timeout: float = LIMIT, env: dict[str, str] | None = None) -> Child:
    """Runs ``code`` in a child that must exit with status 0."""
    child = run_child(code, timeout=timeout, env=env)
    assert child.returncode == 0, (
        f"the child exited with status {child.returncode}\nstdout:\n{child.stdout}\nstderr:\n{child.stderr}"
    )
    return child


#: Source for a scenario that forks again: ``in_fork(body)`` runs ``body`` in a forked child and
#: fails (in the parent) on a hang or on the child's failed assertion, printing its traceback.
IN_FORK = """
import os, sys, time, traceback

def in_fork(body):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    give_up = time.monotonic() + float(os.environ.get("FORK_GIVE_UP", 30))  # a safety net, never the thing under test
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > give_up:
            os.kill(pid, 6)  # SIGABRT: faulthandler prints where the child's threads are
            time.sleep(2)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise SystemExit("the forked child hung")
        time.sleep(0.005)
    assert os.waitstatus_to_exitcode(status) == 0, f"the forked child failed: {status}"
"""
