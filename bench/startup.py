"""Start-up of a plain (non-editable) install: `llmdoctor --help`, `check --help`, `checks`, `explain LD702`.

    python bench/startup.py                 # 15 pairs per command (about a minute)
    python bench/startup.py --pairs 3       # a smoke run
    python bench/startup.py --json FILE     # also write the numbers

What a user who ran ``pip install llm-latency-doctor`` gets: a copy of this checkout is installed, not
editable, into a fresh venv in a temporary folder (pip builds the wheel and compiles the bytecode at
install, as it always does). The venv sees this machine's installed dependencies through one path entry
(``deps.pth``) and not through ``--system-site-packages``: that would also run the ``.pth`` hooks of the
system site-packages (an editable finder, a CA injector), which every start of ``python -c pass`` would
pay too, inflating the reference and flattering the ratio.

Each command is timed in pairs with ``python -c pass`` of the same venv (one right after the other, so
both see the same load), from a neutral working directory with the proxy variables removed; a warm-up
pair is dropped. Reported: the median of each, and the median of the per-pair ratios of wall time (judged
against `TARGET_RATIO`) and of CPU time (user + system, which other work on a shared machine disturbs less:
a check on the wall-time figure when the load average is high).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Each command's median start-up over ``python -c pass``'s (issue 28).
TARGET_RATIO = 3.0

COMMANDS = ("llmdoctor --help", "llmdoctor check --help", "llmdoctor checks", "llmdoctor explain LD702")
#: Measured too, for information (not judged): what importing click alone costs, which every command pays.
CLICK_ALONE = "python -c 'import click'"

_UNSET = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONSTARTUP", "PYTHONPROFILEIMPORTTIME",
          "http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@contextlib.contextmanager
def plain_install() -> Iterator[Path]:
    """A fresh venv with this checkout installed in it, not editable; its ``bin`` folder."""
    with tempfile.TemporaryDirectory(prefix="llmdoctor-startup-") as tmp:
        src, venv = Path(tmp) / "src", Path(tmp) / "venv"
        src.mkdir()
        for part in ("pyproject.toml", "README.md", "llmdoctor", "checks"):  # what the wheel is built from
            copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy2
            copy(ROOT / part, src / part)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        bindir = venv / "bin"
        python = str(bindir / "python")
        purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}  # the interpreter's own, not a venv's
        deps = dict.fromkeys([sysconfig.get_paths(vars=base)["purelib"], sysconfig.get_paths(vars=base)["platlib"]])
        Path(purelib, "deps.pth").write_text("".join(f"{d}\n" for d in deps))
        install = [python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                   "--disable-pip-version-check"]
        # Built with the setuptools and wheel already here when they can build a wheel, else in pip's usual
        # isolated build environment (setuptools and wheel from the index or pip's cache).
        if subprocess.run([*install, "--no-build-isolation", str(src)], cwd=tmp, env=_env(),
                          capture_output=True).returncode != 0:
            subprocess.run([*install, str(src)], check=True, cwd=tmp, env=_env())
        found = subprocess.run([python, "-c", "import llmdoctor; print(llmdoctor.__file__)"],
                               check=True, capture_output=True, text=True, cwd=tmp, env=_env()).stdout.strip()
        if not found.startswith(purelib):
            raise RuntimeError(f"the venv imports llmdoctor from {found}, not from its own install in {purelib}")
        yield bindir


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _UNSET}


def _time(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=cwd)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(bindir: Path, pairs: int) -> dict[str, Any]:
    """Paired runs of each command and ``python -c pass``: medians (ms) and the median of the pair ratios."""
    env, cwd = _env(), tempfile.gettempdir()
    reference = [str(bindir / "python"), "-c", "pass"]
    rows: dict[str, Any] = {}
    commands = {name: [str(bindir / "llmdoctor"), *name.split()[1:]] for name in COMMANDS}
    commands[CLICK_ALONE] = [str(bindir / "python"), "-c", "import click"]  # the floor under any click CLI
    for name, cmd in commands.items():
        ours, base = [], []
        for i in range(pairs + 1):  # the first pair warms the page cache and is dropped
            b, o = _time(reference, env, cwd), _time(cmd, env, cwd)
            if i:
                base.append(b)
                ours.append(o)
        wall = [o[0] / b[0] for o, b in zip(ours, base)]
        cpu = [o[1] / b[1] for o, b in zip(ours, base) if b[1] > 0]
        rows[name] = {"median_ms": round(statistics.median(o[0] for o in ours) * 1000, 1),
                      "python_c_pass_median_ms": round(statistics.median(b[0] for b in base) * 1000, 1),
                      "ratio": round(statistics.median(wall), 2), "best_ratio": round(min(wall), 2),
                      "cpu_ratio": round(statistics.median(cpu), 2) if cpu else None}
    return {"pairs": pairs, "target_ratio": TARGET_RATIO, "install": "wheel, non-editable, fresh venv",
            "commands": rows, "met": all(r["ratio"] <= TARGET_RATIO for n, r in rows.items() if n in COMMANDS),
            "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def bench_startup(pairs: int = 15) -> dict[str, Any]:
    """Build the plain install, measure it, remove it."""
    with plain_install() as bindir:
        return measure(bindir, pairs)


def rows(result: dict[str, Any]) -> Iterator[str]:
    """Table lines: each command's median, python -c pass's, and the median pair ratio against the target."""
    target = result["target_ratio"]
    for name, r in result["commands"].items():
        verdict = ("ok" if r["ratio"] <= target else "MISSED") if name in COMMANDS else "(info)"
        label = f"{name} / python -c pass"
        yield f"{label:<44}{r['ratio']:>6.2f}  (<= {target:g}) {verdict:<6}  " \
              f"{r['median_ms']:.1f} ms vs {r['python_c_pass_median_ms']:.1f} ms; CPU time ratio {r['cpu_ratio']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15, help="paired runs per command (default 15)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    result = bench_startup(args.pairs)
    print(f"start-up of a plain install, median of {result['pairs']} pairs "
          f"({result['measured_at']}, load {result['load_average']}, {result['cpus']} CPUs):")
    for line in rows(result):
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
