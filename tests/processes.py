"""Real processes for host-probe tests and recordings: a listening server, the simulator, busy loops.

    with http_server_process() as (port, proc):      # python -m http.server on 127.0.0.1
    with serve_sim_process(profile="cold-start") as (port, proc):
    with busy_loops() as pids:                       # one bounded busy loop per core
    with holding_interpreter():                      # a CPU-bound thread of this process: its reads come late

Every process is stopped on exit; the busy loops also end by themselves after `seconds`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

from tests.tiers import require_slow

__all__ = ["busy_loops", "free_port", "holding_interpreter", "http_server_process", "serve_sim_process",
           "start_listening"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_listening(args: list[str], port: int) -> subprocess.Popen[bytes]:
    """Start `args` and return once something accepts connections on 127.0.0.1:`port`."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=tempfile.gettempdir())
    for _ in range(200):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{args[:4]} did not listen on port {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate and reap `proc`."""
    proc.terminate()
    proc.wait(10)


@contextlib.contextmanager
def http_server_process() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``python -m http.server`` on 127.0.0.1: a local endpoint's listening process (any name but a server's)."""
    port = free_port()
    proc = start_listening([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port)
    try:
        yield port, proc
    finally:
        stop(proc)


#: The simulator with a flavor of its own (``serve-sim`` serves a profile's default flavor): profile, flavor, port.
SIM_FLAVOR = ("import sys, time\nfrom llmdoctor.sim.profiles import get_profile\n"
              "from llmdoctor.sim.server import SimServer\n"
              "SimServer(get_profile(sys.argv[1], flavor=sys.argv[2]), port=int(sys.argv[3])).start()\n"
              "while True:\n    time.sleep(3600)\n")


def serve_sim(port: int, profile: str = "healthy", flavor: str | None = None) -> subprocess.Popen[bytes]:
    """``llmdoctor serve-sim`` (or the simulator as `flavor`) as a process of its own on `port`, once it
    accepts connections."""
    if flavor is not None:
        return start_listening([sys.executable, "-c", SIM_FLAVOR, profile, flavor, str(port)], port)
    return start_listening([sys.executable, "-m", "llmdoctor", "serve-sim", "--profile", profile,
                            "--port", str(port)], port)


@contextlib.contextmanager
def serve_sim_process(profile: str = "healthy",
                      flavor: str | None = None) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The simulator in a process of its own (its port, its process), stopped on exit."""
    port = free_port()
    proc = serve_sim(port, profile, flavor)
    try:
        yield port, proc
    finally:
        stop(proc)


@contextlib.contextmanager
def busy_loops(count: int | None = None, seconds: float = 20.0) -> Iterator[list[int]]:
    """One busy loop per core (or `count`), ending by itself after `seconds`, stopped on exit; their pids."""
    require_slow("busy loops (a saturated host)")
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count or os.cpu_count() or 1)]
    try:
        time.sleep(0.5)  # let them reach full speed
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def holding_interpreter(switch_s: float = 0.1) -> Iterator[None]:
    """A CPU-bound thread of this process that keeps the interpreter `switch_s` at a time (the switch
    interval) while in it: every other thread of this process, a client's reads included, waits that long
    for its turn, as the threads of a process starved of CPU wait for a core."""
    stop = threading.Event()

    def hold() -> None:
        while not stop.is_set():
            pass

    switch = sys.getswitchinterval()
    sys.setswitchinterval(switch_s)
    thread = threading.Thread(target=hold, name="holding-interpreter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
