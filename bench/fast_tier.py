"""How long the tests take: the fast tier (``python -m pytest -m "not slow"``), and on request the whole suite.

    python bench/fast_tier.py                # the fast tier as the README gives it (xdist workers, tests/conftest.py)
    python bench/fast_tier.py --workers 0    # the same tests in one process (``-n 0``): the serial reference
    python bench/fast_tier.py --full         # also the README's full command, ``python -m pytest`` (25+ minutes)
    python bench/fast_tier.py --json FILE    # also write the numbers (default bench/results/fast_tier.json)

Each command runs in this checkout with the Python running this script, and is timed by the wall clock
from start to exit; the load average before and after, the number of CPUs, the CPU time the tests used
(user + system of the children: on a shared machine the wall time is the figure a developer waits, the CPU
time the one other work disturbs less) and the date go with it, so every figure the README gives is dated
and reproducible. `bench/run.py` runs the fast tier (not the full suite) as one of its sections.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tiers import FAST_TIER_WORKERS  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "fast_tier.json"

#: The fast tier's target on 2 cores (issue 28), in seconds.
TARGET_S = 300.0
#: The full suite must leave `.ci/run` (installs included) under 45 minutes.
FULL_TARGET_S = 45 * 60.0

FAST_TIER = ["-m", "not slow"]
# A module that fails to import fails the tier, not the timing; no cache, so one run cannot shape the next.
COMMON = ["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors"]


def time_pytest(args: list[str], target_s: float, label: str, workers: int = 1) -> dict[str, Any]:
    """Run ``python -m pytest ARGS`` here (on `workers` processes); its wall and CPU time, outcome and load."""
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *COMMON, *args], capture_output=True, text=True,
                          cwd=ROOT)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = done.stdout.strip().splitlines()
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return {"command": "python -m pytest " + " ".join(repr(a) if " " in a else a for a in args),
            "label": label, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "workers": workers,
            "exit_code": done.returncode, "summary": (lines[-1:] or [""])[0].strip("= "), "failed": failed,
            "target_s": target_s, "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "met": done.returncode == 0 and seconds <= target_s}


def bench_fast_tier(workers: int | None = None) -> dict[str, Any]:
    """The fast tier as the README gives it (``workers`` None), or with ``-n WORKERS``."""
    extra = [] if workers is None else ["-n", str(workers)]
    if workers is None:  # as tests/conftest.py runs it: on xdist workers when pytest-xdist is installed
        workers = FAST_TIER_WORKERS if importlib.util.find_spec("xdist") else 1
    return time_pytest([*FAST_TIER, *extra], TARGET_S, "fast test tier, -m 'not slow'", max(workers, 1))


def row(result: dict[str, Any]) -> str:
    """One line of `bench/run.py`'s table."""
    label = f"{result['label']} (s)"
    return f"{label:<52}{result['seconds']:>14.1f}{'<= ' + format(result['target_s'], 'g'):>12}  " \
           f"{'ok' if result['met'] else 'MISSED'}  ({result['summary']}; {result['workers']} worker(s); " \
           f"CPU {result['cpu_seconds']:.0f} s; load {result['load_average_before'][0]:.1f} on {result['cpus']} " \
           f"CPUs; {result['measured_at'][:10]})"


def main(argv: list[str] | None = None) -> int:
    """Time the fast tier (and the full suite with ``--full``), print one line each, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None,
                        help="run the fast tier with -n WORKERS (0: one process); default: as the README runs it")
    parser.add_argument("--full", action="store_true", help="also time the README's full command, python -m pytest")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "llmdoctor bench/fast_tier.py", "python": sys.version.split()[0],
                              "fast_tier": bench_fast_tier(args.workers)}
    print(row(result["fast_tier"]), flush=True)
    if args.full:
        result["full"] = time_pytest([], FULL_TARGET_S, "whole suite, python -m pytest")
        print(row(result["full"]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
