"""End to end: the CLI against the simulator over real loopback HTTP."""

from __future__ import annotations

import json
import re

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import finding_ids, run_cli, run_process, validate_report

SPINE = "LD001,LD301,LD401,LD701,LD702,LD703"


def test_flat_latency_fit_recovers_injected_costs(capsys: pytest.CaptureFixture[str]) -> None:
    fixed, per_token = 200.0, 10.0
    profile = get_profile("healthy", fixed_ms=fixed, per_output_token_ms=per_token, per_prompt_token_ms=0.0,
                          jitter_ms=0.0)
    with SimServer(profile) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD702")
    breakdown = result.report["breakdown"]
    assert breakdown["fixed_ms"] == pytest.approx(fixed, rel=0.10)
    assert breakdown["per_token_ms"] == pytest.approx(per_token, rel=0.10)
    assert finding_ids(result.report) == []  # 200 ms is 24% of a 64-token answer: no flat-latency finding


def test_cold_start_fires_on_injected_cold_start(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("cold-start")) as server:
        result = run_cli(capsys, "check", "-e", server.base_url, "--json", "--select", SPINE)
    report = result.report
    assert finding_ids(report)[0] == "LD301"
    cold = report["findings"][0]
    assert cold["impact_ms"] == pytest.approx(1500, rel=0.2)
    assert result.code == 1 and report["status"] == "warning"


def test_healthy_profile_has_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", SPINE)
        requests_at_server = server.requests_received
    report = result.report
    assert report["findings"] == []
    assert result.code == 0
    assert report["requests"]["sent"] == requests_at_server <= 25
    phases = report["breakdown"]["phases"]
    assert sum(p["ms"] for p in phases) == pytest.approx(report["breakdown"]["total_ms"], abs=1.0)


def test_text_report_shows_breakdown_then_ranked_findings(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("demo")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--select", SPINE)
    out = result.out
    # the answer first: the verdict, the findings one line each, the waterfall; then the details
    assert out.index("Result: WARNING (exit 1)") < out.index("Findings") < out.index("Where the time goes") \
        < out.index("Details")
    summary = re.findall(r"^\s*(\d+)\. (WARNING|CRITICAL|INFO) (.+)$", out, re.M)
    assert [(rank, severity) for rank, severity, _ in summary] == [("1", "WARNING"), ("2", "WARNING")]
    assert summary[0][2].startswith("Flat latency") and summary[1][2].startswith("Cold start")  # floor first
    assert re.findall(r"^\s*\d+\. .+? · (LD\d+) ·", out, re.M) == ["LD702", "LD301"]
    assert "Fix:" in out and "llmdoctor explain LD301" in out and "once per cold start" in out
    assert result.code == 1 and out.rstrip().endswith("Result: WARNING (exit 1)")


def test_fail_on_critical_tolerates_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("cold-start")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD301", "--fail-on", "critical")
    assert finding_ids(result.report) == ["LD301"]
    assert result.code == 0


def test_budget_is_never_exceeded(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", SPINE, "--max-requests", "4")
        at_server = server.requests_received
    report = result.report
    assert at_server == report["requests"]["sent"] == 4
    skipped = [c for c in report["checks"] if c["status"] == "skipped"]
    assert skipped and all("budget" in c["reason"] for c in skipped)


def test_api_key_is_sent_and_never_printed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path) -> None:
    monkeypatch.setenv("LLMDOCTOR_TEST_KEY", "sim-secret")
    saved = tmp_path / "m.json"
    with SimServer(get_profile("unauthorized")) as server:
        ok = run_cli(capsys, "check", "-e", server.url, "--json", "--select", SPINE,
                     "--api-key-env", "LLMDOCTOR_TEST_KEY", "--save-measurements", str(saved))
        text = run_cli(capsys, "check", "-e", server.url, "--select", SPINE, "--api-key-env", "LLMDOCTOR_TEST_KEY")
    assert "LD001" not in finding_ids(ok.report)
    for output in (ok.out, ok.err, text.out, text.err, saved.read_text()):
        assert "sim-secret" not in output


def test_replay_reproduces_the_diagnosis(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    saved = tmp_path / "m.json"
    with SimServer(get_profile("demo")) as server:
        live = run_cli(capsys, "check", "-e", server.url, "--json", "--select", SPINE,
                       "--save-measurements", str(saved))
    replayed = run_cli(capsys, "replay", str(saved), "--json")
    assert finding_ids(replayed.report) == finding_ids(live.report)
    assert {"LD301", "LD702"} <= set(finding_ids(live.report))
    assert replayed.report["replayed"] is True and replayed.report["requests"]["sent"] == 0
    assert replayed.code == live.code == 1


def test_demo_runs_without_a_server() -> None:
    result = run_process("demo", "--json", timeout=120)
    assert result.code == 1, result.err  # the demo's floor and cold start are warnings: it exits what it reports
    report = json.loads(result.out)
    validate_report(report)
    assert {"LD301", "LD702"} <= set(finding_ids(report)) and report["exit_code"] == 1


def test_default_check_reports_every_request_and_connection_the_server_saw(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as server:
        # --no-followup: the differential diagnosis may open a fresh connection on purpose
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--no-followup")
        requests, connections = server.requests_received, server.connections_accepted
    sent = result.report["requests"]
    assert sent["sent"] == requests <= 25
    # one keep-alive connection for every HTTP request, plus the transport probe's bare TCP samples
    # (and a second one when the diagnosis ordered its concurrency step: 2 requests at once)
    tests = (result.report["diagnosis"] or {}).get("tests", [])
    parallel = any(t["probe"] == "followup_concurrency" and t["ran"] for t in tests)
    assert sent["raw_connections"] >= 3 and connections == sent["raw_connections"] + 1 + parallel


def test_an_oom_in_the_server_log_ranks_first_with_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.checkcases import FIXTURES

    log = FIXTURES / "logs" / "vllm-oom.log"
    with SimServer(get_profile("demo")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--log", str(log), "--no-followup")
    top = result.report["findings"][0]
    assert result.code == 2
    assert top["check_id"] == "LD206" and top["severity"] == "critical" and "out of memory" in top["title"].lower()
    assert any(str(e["value"]).endswith("vllm-oom.log:12") or e["source"].endswith("vllm-oom.log:12")
               for e in top["evidence"]), top["evidence"]
    assert {"LD301", "LD702"} <= set(finding_ids(result.report)[1:])
