"""`tests.terminate`: a SIGTERM to the test process kills what the tests started, then ends it as before."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

# A process like pytest: the handler installed, a server-like child in its own session (as the real servers
# are started), then it waits to be terminated.
SCRIPT = """
import subprocess, sys, time
from tests import terminate
assert terminate.install()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _eventually_gone(pid: int) -> bool:
    try:
        psutil.wait_procs([psutil.Process(pid)], timeout=10)
    except psutil.NoSuchProcess:
        pass
    return _gone(pid)


def test_sigterm_kills_the_children_in_their_own_session_then_terminates() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert not _gone(child)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM  # dies of SIGTERM, as without the handler
        assert _eventually_gone(child)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_control_without_the_handler_the_child_outlives_a_terminated_parent() -> None:
    """What the handler is for: without it, the same child survives (then this test kills it)."""
    script = SCRIPT.replace("assert terminate.install()", "pass")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert not _gone(child)
    finally:
        try:
            psutil.Process(child).kill()
        except psutil.NoSuchProcess:
            pass
        proc.kill()
        proc.wait(timeout=10)


def test_install_leaves_a_disposition_someone_chose() -> None:
    """Only the default is replaced: a handler already there (or "ignore") stays."""
    script = ("import signal\nfrom tests import terminate\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "print(terminate.install(), signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["False", "True"], out.stderr
