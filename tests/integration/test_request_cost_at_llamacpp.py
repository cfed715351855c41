"""The user's own request is priced at the rates measured on a REAL llama.cpp server (issue 25 item 4).

Before: a ``--request`` with ``max_tokens: 512`` and no stop passed LD601 although the doctor measured
~9 ms an output token (the request itself took seconds), and the top finding was "confirmed: slow
prefill" priced on the probe's 1,000-token prompt, not on the user's ~40-token one. Now LD601's
request-cost finding ranks first, its cost = max_tokens × the run's measured decode rate; a measured
prefill is priced on the user's prompt. Control: the same request with ``max_tokens: 16`` (an answer
of about two fixed floors) brings no such finding. The rate is checked against the run's own sweep,
never against an absolute time.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.cliutil import run_process
from tests.llamacpp_server import LlamaCppServer

pytestmark = pytest.mark.slow

PROMPT = "Summarise the state of the project in a few sentences, with the main risks and what to do next."


def _check(server: LlamaCppServer, tmp_path: Path, max_tokens: int) -> dict[str, Any]:
    path = tmp_path / f"req{max_tokens}.json"
    path.write_text(json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": PROMPT}],
                                "max_tokens": max_tokens, "stream": True}))
    result = run_process("check", "--endpoint", server.url, "--request", str(path), "--json", "--timeout", "60",
                         timeout=300)
    assert result.code in (0, 1, 2), result.err
    report: dict[str, Any] = result.report
    print(f"\nmax_tokens {max_tokens}: " + "; ".join(f"{f['check_id']} {f['title']} ({f['impact_ms']} ms)"
                                                  for f in report["findings"]))
    return report


def _own_cost(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check_id"] == "LD601" and "Your request's answer" in f["title"]]


def _evidence(finding: dict[str, Any], label: str) -> Any:
    return next(e["value"] for e in finding["evidence"] if e["label"] == label)


def _sweep_slope(report: dict[str, Any]) -> float:
    """The run's own ms per output token: its sweep's median totals at the longest and shortest answers."""
    points = report["breakdown"]["sweep_points"]
    by_tokens: dict[int, list[float]] = {}
    for p in points:
        if p.get("total_ms") is not None:
            by_tokens.setdefault(p["output_tokens"], []).append(p["total_ms"])
    low, high = min(by_tokens), max(by_tokens)
    return (statistics.median(by_tokens[high]) - statistics.median(by_tokens[low])) / (high - low)


def test_a_long_answer_is_the_requests_own_cost_and_ranks_first(llama_server: LlamaCppServer,
                                                               tmp_path: Path) -> None:
    report = _check(llama_server, tmp_path, 512)
    own = _own_cost(report)
    assert len(own) == 1
    # first among the warnings: only a critical finding (a failure, not a cost) may rank above it
    above = report["findings"][:report["findings"].index(own[0])]
    assert all(f["severity"] == "critical" for f in above), [(f["check_id"], f["title"]) for f in above]
    rate = _evidence(own[0], "decode per output token")
    assert own[0]["impact_ms"] == pytest.approx(512 * rate, rel=0.01)
    slope = _sweep_slope(report)
    assert 0.5 * slope <= rate <= 2.0 * slope, (rate, slope)
    # what is true only of our probe's long prompt is priced on the user's prompt
    for f in report["findings"]:
        if f["check_id"] == "LD720" and "prefill" in f["title"].lower():
            assert "your requests'" in f["impact_basis"], f["impact_basis"]
            assert f["impact_ms"] < own[0]["impact_ms"]


def test_control_a_short_answer_brings_no_request_cost_finding(llama_server: LlamaCppServer,
                                                              tmp_path: Path) -> None:
    report = _check(llama_server, tmp_path, 16)
    assert not _own_cost(report)
