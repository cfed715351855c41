"""Benchmark: `llmdoctor check --watch` keeps its memory flat over many rounds (issue 19).

A watch used to keep every round (+27 KB a round, ~450 MB a day at 5 s); it now keeps the last
`llmdoctor.watch.KEEP_ROUNDS`. This script runs a real watch (``python -m llmdoctor check
--watch … --json``, one NDJSON line per round) against the simulator in its own process, reads
the watch's resident set (``VmRSS`` in ``/proc/PID/status``) each time a round's line arrives,
and prints the RSS after the warm-up rounds, at the end, their ratio and the slope::

    python bench/watch_rss.py                 # 500 rounds (about 2-4 minutes)
    python bench/watch_rss.py --rounds 100    # a quicker look

Target: the RSS at the last round within 10% of the RSS after the warm-up (round 50, when the
kept window is long full and the imports, caches and connection pool are in place). Linux only
(``/proc``). Exit status 0 when the target is met, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.10


def rss_kb(pid: int) -> int:
    """The resident set of process `pid`, in KiB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start_simulator() -> tuple[subprocess.Popen[str], str]:
    """`llmdoctor serve-sim` on a free loopback port; its process and base URL."""
    sim = subprocess.Popen([sys.executable, "-m", "llmdoctor", "serve-sim", "--port", "0", "--profile", "healthy"],
                           stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert sim.stderr is not None
    line = sim.stderr.readline()  # "llmdoctor simulator 'healthy' serving http://127.0.0.1:PORT/v1 (...)"
    url = next((w for w in line.split() if w.startswith("http://")), None)
    if url is None:
        sim.kill()
        raise RuntimeError(f"the simulator did not start: {line!r}")
    return sim, url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--interval", type=float, default=0.1, help="--watch SECONDS")
    parser.add_argument("--warmup", type=int, default=50, help="rounds before the reference reading")
    args = parser.parse_args(argv)
    warmup = min(args.warmup, max(1, args.rounds // 2))

    sim, url = start_simulator()
    try:
        started = time.monotonic()
        watch = subprocess.Popen([sys.executable, "-m", "llmdoctor", "check", "-e", url, "--watch", str(args.interval),
                                  "--watch-count", str(args.rounds), "--json", "--samples", "1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert watch.stdout is not None
        readings: list[tuple[int, int]] = []  # (round, RSS KiB)
        codes: dict[int, int] = {}
        for n, line in enumerate(watch.stdout, start=1):
            try:
                readings.append((n, rss_kb(watch.pid)))
            except (OSError, RuntimeError):
                break  # the watch ended between the line and the reading
            code = json.loads(line)["exit_code"]
            codes[code] = codes.get(code, 0) + 1
        watch.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        sim.terminate()
        sim.wait(timeout=10)

    if len(readings) <= warmup:
        print(f"only {len(readings)} rounds came back (watch exit {watch.returncode})", file=sys.stderr)
        return 1
    ref_round, ref = readings[warmup - 1]
    last_round, last = readings[-1]
    peak = max(kb for _, kb in readings[warmup - 1:])
    slope = (last - ref) / max(1, last_round - ref_round)
    ratio = last / ref
    print(f"rounds               {len(readings)} in {took:.1f} s (exit codes {codes}, watch exit {watch.returncode})")
    print(f"RSS at round {ref_round:<7} {ref / 1024:8.1f} MiB")
    print(f"RSS at round {last_round:<7} {last / 1024:8.1f} MiB")
    print(f"peak after warm-up   {peak / 1024:8.1f} MiB")
    print(f"growth per round     {slope:8.2f} KiB (was ~27 KiB a round when every round was kept)")
    verdict = "OK" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio last/warm-up   {ratio:8.3f}  (target <= {TARGET_RATIO:.2f}) {verdict}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    if not os.path.exists("/proc/self/status"):
        sys.exit("bench/watch_rss.py reads /proc: Linux only")
    sys.exit(main())
