"""The simulator in its own process for the benchmarks, and the environment of measured child processes.

The simulator runs in a separate process, not on a thread of the benchmark: llmdoctor's client and the
server would otherwise share one GIL, and a server thread waking to send a token would wait for the
client thread to release it (up to the 5 ms switch interval), the very error `bench/run.py` measures.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The simulator as a child process: prints its base URL, answers "count" with the server's
# request counters as JSON, stops at end of input.
SIM_SCRIPT = r"""
import json, sys, threading, time
from llmdoctor.sim import SimServer, get_profile
from llmdoctor.sim.httpd import Handler

spans, lock = [], threading.Lock()

def _timed(method):
    def run(self):
        started = time.monotonic()
        try:
            return method(self)
        finally:
            with lock:
                spans.append((started, time.monotonic()))
    return run

for name in ("do_GET", "do_POST", "do_HEAD"):
    setattr(Handler, name, _timed(getattr(Handler, name)))

def busy_s():
    # The union of the requests' spans: time the server was answering llmdoctor.
    total, end = 0.0, None
    with lock:
        ordered = sorted(spans)
    for a, b in ordered:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total

knobs = json.loads(sys.argv[2])
with SimServer(get_profile(sys.argv[1], **knobs)) as sim:
    print(sim.base_url, flush=True)
    for line in sys.stdin:
        print(json.dumps({"requests_received": sim.requests_received, "by_path": sim.requests_by_path,
                          "connections": sim.connections_accepted, "busy_s": busy_s()}), flush=True)
"""


class SimProcess:
    """The simulator in its own process (a context manager); `.count()` asks its counters."""

    def __init__(self, profile: str, **knobs: Any) -> None:
        env = child_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SIM_SCRIPT, profile, json.dumps(knobs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            raise RuntimeError("the simulator did not start")

    def count(self) -> dict[str, Any]:
        """The server's counters now."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def child_env(bytecode: bool = True) -> dict[str, str]:
    """Environment of the measured child processes.

    An installed package has its bytecode compiled at install time; a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` (as this project's shells are) recompiles every module on every
    start, ~100 ms. With `bytecode`, children cache it under a private ``PYTHONPYCACHEPREFIX``
    (nothing is written into the source tree), as an installed copy would have it.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


PYCACHE = tempfile.mkdtemp(prefix="llmdoctor-bench-pycache-")
