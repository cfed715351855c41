"""The user's request drives the diagnosis (issue 25 item 4), on the simulator.

Found on real llama.cpp: a ``--request`` with ``max_tokens: 512`` and no stop passed LD601 although the
doctor measured ~9 ms an output token, and the top finding was "confirmed: slow prefill" priced on the
probe's 1,000-token prompt, irrelevant to the user's 40-token one. Now LD601 prices the request's own
answer (its cap × the measured decode rate) against the fixed floor, and the diagnosis prices a measured
prefill rate on the user's prompt. The real server: tests/integration/test_request_cost_at_llamacpp.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.sim import LatencyProfile, SimServer
from tests.cliutil import run_cli

PROFILE = LatencyProfile(name="request-cost", fixed_ms=3, per_prompt_token_ms=0.05, per_output_token_ms=2.0)


def _request(tmp_path: Path, max_tokens: int, **more: Any) -> Path:
    path = tmp_path / f"req{max_tokens}.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Summarise the project's risks."}],
                                "max_tokens": max_tokens, "temperature": 0, "stream": True, **more}))
    return path


def _report(capsys: pytest.CaptureFixture[str], url: str, request: Path) -> dict[str, Any]:
    result = run_cli(capsys, "check", "--endpoint", url, "--request", str(request), "--json", "--no-followup")
    assert result.code in (0, 1, 2), result.err
    report: dict[str, Any] = json.loads(result.out)
    return report


def _evidence(finding: dict[str, Any], label: str) -> Any:
    return next(e["value"] for e in finding["evidence"] if e["label"] == label)


def _own_cost(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check_id"] == "LD601" and "Your request's answer" in f["title"]]


def test_a_long_answer_cap_is_the_requests_own_cost_and_ranks_first(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    with SimServer(PROFILE) as server:
        report = _report(capsys, server.url, _request(tmp_path, 512))
    own = _own_cost(report)
    assert len(own) == 1, [f["title"] for f in report["findings"]]
    rate = _evidence(own[0], "decode per output token")
    assert own[0]["impact_ms"] == pytest.approx(512 * rate, rel=0.01)
    # the run measured the simulator's own rate (2 ms a token), whatever its fixed cost
    assert rate == pytest.approx(PROFILE.per_output_token_ms, rel=0.5)
    # first among the warnings: only a critical finding (a failure, not a cost) may rank above it
    above = report["findings"][:report["findings"].index(own[0])]
    assert all(f["severity"] == "critical" for f in above), [(f["check_id"], f["title"]) for f in above]
    assert _evidence(own[0], "stop sequences") == "none"
    assert own[0]["confidence"] == "medium"


def test_a_stop_sequence_lowers_the_confidence_not_the_price(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    with SimServer(PROFILE) as server:
        report = _report(capsys, server.url, _request(tmp_path, 512, stop=["\n\n"]))
    own = _own_cost(report)
    assert len(own) == 1 and own[0]["confidence"] == "low"


def test_control_a_short_cap_costs_no_more_than_the_floor(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    with SimServer(PROFILE) as server:
        report = _report(capsys, server.url, _request(tmp_path, 16))
    assert not _own_cost(report)
