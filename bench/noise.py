"""Conclusions on a busy host: how often each one holds while busy loops saturate every core.

Issue 15's noise acceptance, repeated. Each round runs the default ``llmdoctor check --json`` (a
process of its own) against three simulator profiles, each served by a process of its own, while
one bounded busy loop per core runs (stopped afterwards): ``healthy``, ``slow-floor`` (a fixed
500 ms floor) and ``slow-decode`` (45 ms per output token). It prints, per profile, how many rounds
each conclusion held (target: at least 9 of 10); the conclusions are listed in tests/busyhost.py,
which tests/test_noise.py asserts on one round::

    python bench/noise.py               # 10 rounds (~5 min on 2 cores)
    python bench/noise.py --rounds 3    # fewer
    python bench/noise.py --quiet-host  # the same without the busy loops (the control)

The report of a round that missed a conclusion is saved under ``bench/results/noise/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ holds the real parts

from tests.busyhost import PROFILES, one_round  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quiet-host", action="store_true", help="no busy loops (the control)")
    parser.add_argument("--profiles", nargs="*", default=list(PROFILES), choices=PROFILES)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "noise",
                        help="where the report of a round that missed a conclusion is saved")
    args = parser.parse_args(argv)
    held: dict[tuple[str, str], int] = {}
    for i in range(args.rounds):
        for profile in args.profiles:
            result, report = one_round(profile, busy=not args.quiet_host)
            if not all(result.values()):
                args.output.mkdir(parents=True, exist_ok=True)
                (args.output / f"round{i + 1}-{profile}.json").write_text(json.dumps(report, indent=1) + "\n")
            for name, ok in result.items():
                held[(profile, name)] = held.get((profile, name), 0) + int(ok)
            print(f"round {i + 1} {profile}: " + ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in result.items()),
                  flush=True)
    print(f"\n{'profile':12} {'conclusion':44} held")
    worst = args.rounds
    for (profile, name), count in held.items():
        worst = min(worst, count)
        print(f"{profile:12} {name:44} {count}/{args.rounds}")
    target = -(-9 * args.rounds // 10)
    print(f"\nworst: {worst}/{args.rounds} (target {target}/{args.rounds})")
    return 0 if worst >= target else 1


if __name__ == "__main__":
    sys.exit(main())
