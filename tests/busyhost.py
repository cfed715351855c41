"""A default check on a busy host and the conclusions it must hold (issue 15's noise acceptance).

Shared by tests/test_noise.py (one round, asserted) and bench/noise.py (ten rounds, counted).
`one_round` serves a simulator profile from a process of its own, starts one bounded busy loop per
core (stopped afterwards), runs ``llmdoctor check --json`` as a process of its own and reads its
report with `conclusions`:

- every profile: the report says the client host was saturated (on a quiet host: that it was
  not), and no negative fixed cost is shown;
- ``healthy``: no confirmed cause, and no warning or critical finding but LD208's (the server runs on
  this machine, whose CPUs the loops keep busy: that warning is true);
- ``slow-floor``: the floor is named (LD701 fires, alone or folded under a cause) and its median
  total is within 25% of what the simulator's own latency model predicts for that request;
- ``slow-decode``: slow decode is named (LD703 fires), its per-token cost within 25% of the model's;
- ``nginx-held`` and ``haproxy-held``: the healthy simulator behind a real nginx (its defaults:
  HTTP/1.0 upstream, ``proxy_buffering on``) or haproxy (its defaults: small frames merged), each
  holding the stream: the held-back stream is named (LD410 fires, alone or folded under a cause).

The host's load is a level of `LEVELS`: busy loops per core, 0 (quiet), 1 (busy) or 4 (oversubscribed).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS
from llmdoctor.sim.profiles import get_profile
from tests.gateways import Haproxy, Nginx
from tests.processes import busy_loops, serve_sim_process

__all__ = ["CASES", "GATEWAYS", "LEVELS", "PROFILES", "TOLERANCE", "conclusions", "one_round"]

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ("healthy", "slow-floor", "slow-decode")
#: The healthy simulator behind a real gateway that holds its stream.
GATEWAYS = ("nginx-held", "haproxy-held")
CASES = PROFILES + GATEWAYS
#: Host load levels: busy loops per core (0: the quiet control; 4: an oversubscribed CI runner or shared box).
LEVELS = {"quiet": 0, "busy": 1, "oversubscribed": 4}
#: How far a measured floor or per-token cost may be from the simulator's latency model.
TOLERANCE = 0.25
#: Long enough for the slowest profile's default check (~15 s quiet, ~2x busy), bounded either way.
BUSY_SECONDS = 120.0


def _findings(report: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    return [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == check_id]


def _evidence(finding: dict[str, Any], label: str) -> Any:
    return next((e["value"] for e in finding["evidence"] if e["label"] == label), None)


def _within(measured: float | None, expected: float) -> bool:
    return measured is not None and abs(measured - expected) <= TOLERANCE * expected


def conclusions(profile: str, report: dict[str, Any], *, busy: bool = True) -> dict[str, bool]:
    """Each conclusion this profile's report must hold on a busy (or quiet) host, and whether it held."""
    host = report.get("client_host") or {}
    breakdown = report.get("breakdown") or {}
    fixed = breakdown.get("fixed_ms")
    out = {
        "says the host was saturated" if busy else "says the host was not saturated":
            bool(host.get("saturated")) == busy,
        "no negative fixed cost": fixed is None or fixed >= 0,
    }
    confirmed = [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])]
    if profile in GATEWAYS:
        out["held-back stream named"] = bool(_findings(report, "LD410"))
        return out
    model = get_profile(profile)
    if profile == "healthy":
        out["no confirmed cause"] = not confirmed
        # LD208 is right to warn when the server's host is this busy machine: nothing else may
        out["no other warning or critical"] = not [f for f in report["findings"]
                                                   if f["severity"] != "info" and f["check_id"] != "LD208"]
    elif profile == "slow-floor":
        ld701 = _findings(report, "LD701")
        floor = next((f for f in ld701 if f["title"].startswith("High latency floor")), None)
        p50 = _evidence(floor, "total p50") if floor else None
        # "Say ok." is a handful of prompt tokens (0.05 ms each): its cost is the floor and the 8 tokens decoded
        expected = model.expected_total_ms(0, BASELINE_MAX_TOKENS)
        out["floor named"] = floor is not None
        out[f"floor within {TOLERANCE:.0%} of the model"] = _within(p50, expected)
    elif profile == "slow-decode":
        ld703 = _findings(report, "LD703")
        per = _evidence(ld703[0], "per output token") if ld703 else None
        out["slow decode named"] = bool(ld703)
        out[f"per-token cost within {TOLERANCE:.0%} of the model"] = _within(per, model.per_output_token_ms)
    return out


def check_report(url: str, timeout: float = 240.0) -> dict[str, Any]:
    """The default check of `url` as a process of its own; its JSON report."""
    done = subprocess.run([sys.executable, "-m", "llmdoctor", "check", "-e", url, "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode not in (0, 1, 2):
        raise RuntimeError(f"llmdoctor check exited {done.returncode}: {done.stderr[-1000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@contextlib.contextmanager
def host(loops_per_core: int) -> Iterator[None]:
    """`loops_per_core` busy loops on every core while in it (0: nothing, the quiet control)."""
    if loops_per_core <= 0:
        yield
        return
    with busy_loops(loops_per_core * (os.cpu_count() or 1), seconds=BUSY_SECONDS):
        yield


@contextlib.contextmanager
def endpoint(case: str) -> Iterator[str]:
    """The base URL of `case`: a simulator profile served by a process of its own, or the healthy one behind
    a real gateway that holds its stream (`GATEWAYS`)."""
    if case not in GATEWAYS:
        with serve_sim_process(case) as (port, _):
            yield f"http://127.0.0.1:{port}/v1"
        return
    with serve_sim_process("healthy", "vllm") as (port, _):
        upstream = [("127.0.0.1", port)]
        with (Nginx(upstream, http11=False) if case == "nginx-held" else Haproxy(upstream)) as gw:
            yield gw.base_url


def one_round(case: str, level: str = "busy") -> tuple[dict[str, bool], dict[str, Any]]:
    """One default check of `case` (`CASES`) at a host load level (`LEVELS`): its conclusions and its report."""
    loops = LEVELS[level]
    with endpoint(case) as url, host(loops):
        report = check_report(url)
    return conclusions(case, report, busy=loops > 0), report
