"""The fleet's, the watch's and `compare`'s output, pinned byte for byte (`llmdoctor.render`).

The expected texts under ``tests/data/render_modes/`` were written by the renderers as they stood
in `llmdoctor/fleet.py`, `llmdoctor/watch.py`, `llmdoctor/cli/modes.py` and `llmdoctor/sidebyside.py`
before they moved into `llmdoctor/render/` (main 59029b8): the move changed no byte. Each case
covers the branches of its renderer: a report with a breakdown and findings, one without either,
an endpoint that could not be diagnosed, a label that differs from the display URL (with
credentials masked), every comparison verdict and a side that failed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from llmdoctor import __version__
from llmdoctor.analysis.regress import Comparison, Verdict
from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.fleet import FleetEntry
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.render.compare import render_compare_json, render_compare_text
from llmdoctor.render.fleet import fleet_table, render_fleet_ndjson, render_fleet_text
from llmdoctor.render.watch import render_round_ndjson, watch_view
from llmdoctor.reporting.report import Breakdown, Phase, Report
from llmdoctor.runner import CheckOutcome
from llmdoctor.sidebyside import Side, SideBySide

DATA = Path(__file__).resolve().parent / "data" / "render_modes"


def _finding(check_id: str, title: str, severity: Severity) -> Finding:
    return Finding(severity, Confidence.HIGH, title, "message", Fix("fix"), impact_ms=900.0, check_id=check_id,
                   category="baseline")


def report(endpoint: str, *, breakdown: bool = True, findings: bool = True, interrupted: bool = False) -> Report:
    """A report of fixed content (no clock, no network)."""
    found = [_finding("LD301", "Cold start: the first request waited 1.2 s", Severity.WARNING),
             _finding("LD711", "Slower than the baseline", Severity.CRITICAL)] if findings else []
    checks = [CheckOutcome("LD001", "reachability", "t", "endpoint", "passed")]
    b = Breakdown(
        label="median", total_ms=1400.0,
        phases=[Phase("connection set-up", 0.0), Phase("send request", 1.0), Phase("wait for headers", 9.0),
                Phase("wait for first token", 1350.5), Phase("decode", 35.0), Phase("end of stream", 4.5)],
        ttft_p50_ms=1360.4, ttft_p90_ms=1480.0, total_p50_ms=1400.0, total_p90_ms=1520.0,
    ) if breakdown else None
    return Report(endpoint=endpoint, model="tiny", started_at="2026-12-01T10:00:00+00:00", duration_ms=8500.0,
                  requests_sent=21, request_budget=30, findings=found, checks=checks, probes=[], breakdown=b,
                  interrupted=interrupted)


def fleet_results() -> list[tuple[FleetEntry, Report | None, str]]:
    """Four endpoints: findings, a clean one without breakdown, one that failed, one interrupted."""
    return [
        (FleetEntry("prod", "http://u:CANARY-PW@10.0.0.5:8000/v1?token=CANARY-TOK"),
         report("http://10.0.0.5:8000/v1"), ""),
        (FleetEntry("http://10.0.0.6:8000", "http://10.0.0.6:8000"),
         report("http://10.0.0.6:8000/v1", breakdown=False, findings=False), ""),
        (FleetEntry("down", "http://127.0.0.1:9", "m"), None, "ConnectError: [Errno 111] Connection refused"),
        (FleetEntry("cut", "http://10.0.0.7:8000"), None, "interrupted (Ctrl-C) before it finished"),
    ]


def watch_rounds() -> list[tuple[str, Report]]:
    """Three rounds: one clean without breakdown, then two with a breakdown and findings."""
    return [("10:00:00", report("http://10.0.0.5:8000/v1", breakdown=False, findings=False)),
            ("10:00:05", report("http://10.0.0.5:8000/v1", findings=False)),
            ("10:00:10", report("http://10.0.0.5:8000/v1"))]


def _comparison(metric: str, verdict: str, *, values: bool = True) -> Comparison:
    if not values:
        return Comparison(metric, verdict, None, None, None, None, None, None, 3, 3, 5.0)
    return Comparison(metric, verdict, 120.25, 180.5, 60.25, 41.0, 79.75, 0.000123456, 10, 10, 12.025)


def side_by_side(*, failed: bool = False) -> SideBySide:
    """Every verdict, values missing in one; or side B failed (no comparison)."""
    ok = RequestTiming("POST", "/v1/chat/completions", status=200, total_ms=100.0, ttft_ms=90.0)
    a = Side("A", "http://10.0.0.5:8000/v1", "tiny", [ok] * 10, requests_sent=12)
    b = Side("B", "http://clean-box:8000/v1", "tiny", [ok] * 10, requests_sent=12)
    if failed:
        b = Side("B", "http://clean-box:8000/v1", None, [], error="not usable: connection refused", requests_sent=1)
        return SideBySide(a, b)
    return SideBySide(a, b, [
        _comparison("ttft", Verdict.REGRESSION), _comparison("total", Verdict.IMPROVEMENT),
        _comparison("decode", Verdict.NO_CHANGE), _comparison("wait for headers", Verdict.INSUFFICIENT, values=False),
    ])


def as_text(renderable: RenderableType, *, width: int, color: bool) -> str:
    """A rich renderable as the CLI prints it (`color`: as a terminal shows it, ANSI styles kept)."""
    buf = io.StringIO()
    console = (Console(file=buf, width=width, force_terminal=True, color_system="standard", highlight=False)
               if color else Console(file=buf, width=width, no_color=True, highlight=False))
    console.print(renderable)
    return buf.getvalue()


def outputs() -> dict[str, str]:
    """Every pinned output, by the name of its file under `DATA`."""
    results = fleet_results()
    return {
        "fleet.txt": render_fleet_text(results, worst=2),
        "fleet-color.txt": as_text(fleet_table(results), width=140, color=True),
        "fleet.ndjson": render_fleet_ndjson(results),
        "watch.txt": as_text(watch_view(watch_rounds(), 5.0), width=120, color=False),
        "watch-color.txt": as_text(watch_view(watch_rounds(), 0.5), width=120, color=True),
        "watch-empty.txt": as_text(watch_view([], 2.0), width=120, color=False),
        "watch-round.ndjson": render_round_ndjson(watch_rounds()[-1][1]),
        "compare.txt": render_compare_text(side_by_side()),
        "compare-failed.txt": render_compare_text(side_by_side(failed=True)),
        "compare.json": render_compare_json(side_by_side()),
        "compare-failed.json": render_compare_json(side_by_side(failed=True)),
    }


@pytest.mark.parametrize("name", sorted(outputs()))
def test_the_output_is_byte_for_byte_the_pinned_one(name: str) -> None:
    expected = (DATA / name).read_text(encoding="utf-8").replace("@VERSION@", __version__)  # the tool's
    assert outputs()[name] == expected


def test_the_pinned_outputs_show_what_they_must() -> None:
    """Guards against pinning an empty or wrong output: the cases reach every branch."""
    out = {name: (DATA / name).read_text(encoding="utf-8") for name in outputs()}
    assert "CANARY" not in out["fleet.txt"] + out["fleet.ndjson"]  # the URL's credentials masked
    assert "prod (http://" in out["fleet.txt"] and "UNKNOWN" in out["fleet.txt"]
    assert out["fleet.txt"].endswith("Result: exit 2 (the worst of 4 endpoints)\n")
    assert "1,360 ms" in out["fleet.txt"] and "LD301 Cold start" in out["fleet.txt"]
    assert "\x1b[" in out["fleet-color.txt"] and "\x1b[" in out["watch-color.txt"]
    lines = [json.loads(line) for line in out["fleet.ndjson"].splitlines()]
    assert [line["name"] for line in lines] == ["prod", "http://10.0.0.6:8000", "down", "cut"]
    assert lines[2] == {"name": "down", "endpoint": "http://127.0.0.1:9", "status": "unknown", "exit_code": 3,
                        "error": "ConnectError: [Errno 111] Connection refused"}
    assert "every 5 s" in out["watch.txt"] and "every 0.5 s" in out["watch-color.txt"]
    assert "█" * 30 in out["watch.txt"] and "LD301 Cold start" in out["watch.txt"]
    assert out["watch-round.ndjson"].endswith("\n") and json.loads(out["watch-round.ndjson"])["status"] == "critical"
    for verdict in ("B SLOWER", "B FASTER", "same (within noise)", "too few samples"):
        assert verdict in out["compare.txt"]
    assert "differs in ttft, total (exit 1)" in out["compare.txt"]
    assert "ERROR: not usable" in out["compare-failed.txt"] and "(exit 3)" in out["compare-failed.txt"]
    assert json.loads(out["compare.json"])["comparisons"][0]["p_value"] == 0.000123
    assert json.loads(out["compare-failed.json"])["comparisons"] == []
