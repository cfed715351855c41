"""Conclusions on a loaded host: how often each one holds, per load level, while busy loops saturate every core.

Issue 15's and issue 27's noise acceptance, repeated. Each round runs the default ``llmdoctor check
--json`` (a process of its own) against each case, each served by a process of its own, at each
load level (tests/busyhost.py's ``LEVELS``): ``quiet`` (no busy loop, the control), ``busy`` (one
bounded busy loop per core) and ``oversubscribed`` (four per core: a CI runner or a shared
inference box, load average 8-12 on 2 cores). The cases are the simulator profiles ``healthy``,
``slow-floor`` (a fixed floor) and ``slow-decode`` (45 ms per output token), and the healthy
simulator behind a real nginx (``nginx-held``) and a real haproxy (``haproxy-held``), each with
the defaults that hold its stream. It prints one table per level, side by side in one listing:
per case and conclusion, the rounds it held (target: at least 9 of 10), and the median number of
requests the check sent. The conclusions are listed in tests/busyhost.py, which
tests/test_noise.py asserts on one round per level::

    python bench/noise.py                                   # 10 rounds at every level (~15 min on 2 cores)
    python bench/noise.py --rounds 3 --levels oversubscribed
    python bench/noise.py --cases healthy slow-floor

The report of a round that missed a conclusion is saved under ``bench/results/noise/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ holds the real parts

from tests.busyhost import CASES, LEVELS, one_round  # noqa: E402


def _levels(text: str) -> list[str]:
    levels = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in levels if name not in LEVELS]
    if unknown or not levels:
        raise argparse.ArgumentTypeError(f"levels are {', '.join(LEVELS)} (comma-separated); got {text!r}")
    return levels


def _table(level: str, rounds: int, held: dict[tuple[str, str], int], sent: dict[str, list[int]]) -> int:
    """Print the table of one level; the fewest rounds any conclusion held."""
    print(f"\n== {level} ({LEVELS[level]} busy loop(s) per core), {rounds} round(s)")
    print(f"{'case':14} {'conclusion':44} {'held':>7}")
    for (case, name), count in held.items():
        print(f"{case:14} {name:44} {count:>3}/{rounds}")
    for case, counts in sent.items():
        print(f"{case:14} {'requests sent (median, max)':44} {statistics.median(counts):>5g}, {max(counts)}")
    return min(held.values(), default=rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--levels", type=_levels, default=list(LEVELS),
                        help=f"comma-separated load levels among {', '.join(LEVELS)} (default: all)")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "noise",
                        help="where the report of a round that missed a conclusion is saved")
    args = parser.parse_args(argv)
    tables: list[tuple[str, dict[tuple[str, str], int], dict[str, list[int]]]] = []
    for level in args.levels:
        held: dict[tuple[str, str], int] = {}
        sent: dict[str, list[int]] = {}
        for i in range(args.rounds):
            for case in args.cases:
                result, report = one_round(case, level)
                if not all(result.values()):
                    args.output.mkdir(parents=True, exist_ok=True)
                    (args.output / f"{level}-round{i + 1}-{case}.json").write_text(json.dumps(report, indent=1) + "\n")
                for name, ok in result.items():
                    held[(case, name)] = held.get((case, name), 0) + int(ok)
                sent.setdefault(case, []).append(int((report.get("requests") or {}).get("sent") or 0))
                print(f"{level} round {i + 1} {case}: "
                      + ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in result.items()), flush=True)
        tables.append((level, held, sent))
    worst = min(_table(level, args.rounds, held, sent) for level, held, sent in tables)
    target = -(-9 * args.rounds // 10)
    print(f"\nworst: {worst}/{args.rounds} (target {target}/{args.rounds})")
    return 0 if worst >= target else 1


if __name__ == "__main__":
    sys.exit(main())
