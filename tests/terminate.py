"""SIGTERM stops the processes the tests started before pytest itself dies.

Python's default for SIGTERM ends the process at once: no fixture's teardown runs, and the real
servers a test started (vLLM in its own session, llama.cpp, nginx, ...) keep running, orphaned.
Measured 2026-12-02: a ``timeout``-killed slow tier left a vLLM engine eating 55 % of the CPU for
46 minutes, and the next run's "quiet host" measurements were a busy host's. `install` (called by
``tests/conftest.py`` in pytest's main thread) replaces the default with a handler that kills every
descendant of this process, then dies of SIGTERM as before (same exit status). A handler, unlike
"ignore", is reset to the default on ``exec``: the children's own dispositions are unchanged.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import psutil

__all__ = ["install", "kill_descendants"]


def kill_descendants(proc: psutil.Process) -> int:
    """SIGKILL every descendant of `proc` (and the process group each session leader among them leads)."""
    try:
        children = proc.children(recursive=True)
    except psutil.Error:
        return 0
    own_group = os.getpgid(0)
    for child in children:
        try:
            if os.getpgid(child.pid) == child.pid != own_group:
                os.killpg(child.pid, signal.SIGKILL)
            child.kill()
        except (OSError, psutil.Error):
            continue
    return len(children)


def _terminated(signum: int, frame: FrameType | None) -> None:
    kill_descendants(psutil.Process())
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def install() -> bool:
    """Install the handler where SIGTERM has its default (in the main thread only); whether it was."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminated)
    return True
