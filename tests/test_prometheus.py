"""The Prometheus exposition: what it holds, its labels, and the documented contract it must match."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.render.prometheus import (
    METRICS,
    METRICS_VERSION,
    EndpointResult,
    phase_label,
    render_exposition,
    render_prometheus,
    result_for_report,
)
from llmdoctor.reporting.report import Breakdown, Phase, Report
from llmdoctor.runner import CheckOutcome

ROOT = Path(__file__).resolve().parent.parent
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _finding(check_id: str, category: str, severity: Severity, impact_ms: float | None, cause: str = "") -> Finding:
    return Finding(severity, Confidence.HIGH, f"{check_id} title", "message with a secret-looking sk-123",
                   Fix("fix"), impact_ms=impact_ms, cause=cause, check_id=check_id, category=category)


def _report(endpoint: str = "http://10.0.0.5:8000/v1", *, breakdown: bool = True) -> Report:
    findings = [
        _finding("LD301", "cold_start", Severity.WARNING, 1200.0, "cold_start"),
        _finding("LD711", "baseline", Severity.CRITICAL, 180.0),
        _finding("LD711", "baseline", Severity.CRITICAL, 240.0),  # same labels: one series, the larger impact
        _finding("LD702", "baseline", Severity.INFO, None),
    ]
    checks = [
        CheckOutcome("LD001", "reachability", "t", "endpoint", "passed"),
        CheckOutcome("LD301", "cold-start", "t", "cold_start", "failed", findings[:1]),
        CheckOutcome("LD711", "regression", "t", "baseline", "failed", findings[1:3]),
        CheckOutcome("LD702", "flat-latency", "t", "baseline", "failed", findings[3:]),
        CheckOutcome("LD201", "gpu-saturation", "t", "server", "skipped", reason="no NVIDIA driver"),
    ]
    b = Breakdown(
        label="median", total_ms=400.0,
        phases=[Phase("connection set-up", 0.0), Phase("send request", 1.0), Phase("wait for headers", 9.0),
                Phase("wait for first token", 350.0), Phase("decode", 35.0), Phase("end of stream", 5.0)],
        ttft_p50_ms=360.0, ttft_p90_ms=380.0, total_p50_ms=400.0, total_p90_ms=420.0,
        fixed_ms=352.5, per_token_ms=5.25, typical_output_tokens=64,
    ) if breakdown else None
    return Report(endpoint=endpoint, model="tiny", started_at="2026-12-01T10:00:00+00:00", duration_ms=8500.0,
                  requests_sent=21, request_budget=30, findings=findings, checks=checks, probes=[], breakdown=b)


def _samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_one_report_as_metrics_in_seconds() -> None:
    text = render_prometheus(_report())
    s = _samples(text)
    ep = "http://10.0.0.5:8000/v1"
    assert _get(s, "llmdoctor_status", endpoint=ep, status="critical") == 1
    assert [_get(s, "llmdoctor_status", endpoint=ep, status=x) for x in ("ok", "warning", "unknown")] == [0, 0, 0]
    assert _get(s, "llmdoctor_exit_code", endpoint=ep) == 2
    assert _get(s, "llmdoctor_finding_impact_seconds", endpoint=ep, check_id="LD301", category="cold_start",
                severity="warning", cause="cold_start") == pytest.approx(1.2)
    labels711 = {"endpoint": ep, "check_id": "LD711", "category": "baseline", "severity": "critical", "cause": ""}
    assert _get(s, "llmdoctor_findings", **labels711) == 2
    assert _get(s, "llmdoctor_finding_impact_seconds", **labels711) == pytest.approx(0.24)
    info702 = {"endpoint": ep, "check_id": "LD702", "category": "baseline", "severity": "info", "cause": ""}
    assert _get(s, "llmdoctor_findings", **info702) == 1
    assert ("llmdoctor_finding_impact_seconds", frozenset(info702.items())) not in s  # no estimate: absent, not 0
    phases = {dict(k[1])["phase"]: v for k, v in s.items() if k[0] == "llmdoctor_phase_seconds"}
    assert phases == pytest.approx({"connection_set_up": 0.0, "send_request": 0.001, "wait_for_headers": 0.009,
                                    "wait_for_first_token": 0.35, "decode": 0.035, "end_of_stream": 0.005})
    assert sum(phases.values()) == pytest.approx(0.4)
    assert _get(s, "llmdoctor_ttft_seconds", endpoint=ep, percentile="p90") == pytest.approx(0.38)
    assert _get(s, "llmdoctor_request_latency_seconds", endpoint=ep, percentile="p50") == pytest.approx(0.4)
    assert _get(s, "llmdoctor_fixed_cost_seconds", endpoint=ep) == pytest.approx(0.3525)
    assert _get(s, "llmdoctor_per_token_cost_seconds", endpoint=ep) == pytest.approx(0.00525)
    assert _get(s, "llmdoctor_requests_sent", endpoint=ep) == 21
    assert _get(s, "llmdoctor_request_budget", endpoint=ep) == 30
    assert _get(s, "llmdoctor_run_duration_seconds", endpoint=ep) == pytest.approx(8.5)
    assert _get(s, "llmdoctor_last_run_timestamp_seconds", endpoint=ep) == 1796119200.0
    assert {dict(k[1])["status"]: v for k, v in s.items() if k[0] == "llmdoctor_checks"} == {
        "passed": 1, "failed": 3, "skipped": 1, "crashed": 0}
    assert _get(s, "llmdoctor_info", endpoint=ep, url=ep, model="tiny", version=__import__("llmdoctor").__version__,
                metrics_version=METRICS_VERSION) == 1
    assert "sk-123" not in text and "message" not in text  # messages never become labels


def test_a_fleet_is_one_exposition_with_an_endpoint_label_and_no_secret() -> None:
    healthy = _report("http://good:8000/v1", breakdown=True)
    healthy.findings.clear()
    results = [
        result_for_report(healthy, "good"),
        EndpointResult("https://***@broken.example/v1", "https://***@broken.example/v1", None),
        result_for_report(_report("https://alice:hunter2@x.example/v1?token=s3cr3t")),
    ]
    text = render_exposition(results)
    s = _samples(text)
    assert _get(s, "llmdoctor_status", endpoint="good", status="ok") == 1
    assert _get(s, "llmdoctor_exit_code", endpoint="good") == 0
    broken = "https://***@broken.example/v1"
    assert _get(s, "llmdoctor_status", endpoint=broken, status="unknown") == 1
    assert _get(s, "llmdoctor_exit_code", endpoint=broken) == 3
    assert not [k for k in s if dict(k[1]).get("endpoint") == broken and k[0] == "llmdoctor_requests_sent"]
    assert _get(s, "llmdoctor_exit_code", endpoint="https://***@x.example/v1") == 2
    assert "hunter2" not in text and "s3cr3t" not in text and "alice" not in text
    assert not [k for k in s if dict(k[1]).get("endpoint") == "good" and k[0] == "llmdoctor_findings"]


def test_two_endpoints_with_one_label_are_refused() -> None:
    with pytest.raises(ValueError, match="share the endpoint label 'a'"):
        render_exposition([result_for_report(_report(), "a"), result_for_report(_report(), "a")])


def test_without_a_breakdown_the_latency_metrics_are_absent_not_zero() -> None:
    s = _samples(render_prometheus(_report(breakdown=False)))
    names = {k[0] for k in s}
    assert not names & {"llmdoctor_phase_seconds", "llmdoctor_ttft_seconds", "llmdoctor_fixed_cost_seconds"}
    assert "llmdoctor_requests_sent" in names


def test_phase_labels_are_slugs() -> None:
    assert phase_label("connection set-up") == "connection_set_up"
    assert phase_label("wait for first token") == "wait_for_first_token"


def _documented() -> dict[str, tuple[str, ...]]:
    text = (ROOT / "docs" / "prometheus.md").read_text()
    rows = re.findall(r"^\| `(llmdoctor_[a-z_]+)` \| ([^|]+) \|", text, re.M)
    return {name: tuple(re.findall(r"`([a-z_]+)`", labels)) for name, labels in rows}


def test_the_documented_metrics_are_exactly_those_emitted() -> None:
    """docs/prometheus.md, the METRICS table and a full exposition name the same metrics and labels."""
    documented = _documented()
    table = {m.name: m.labels for m in METRICS}
    assert documented == table
    emitted: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(render_prometheus(_report())):
        assert family.type == "gauge" == next(m.kind for m in METRICS if m.name == family.name)
        for sample in family.samples:
            emitted.setdefault(sample.name, set()).add(frozenset(sample.labels))
    assert {name: {frozenset(labels)} for name, labels in table.items()} == emitted
    doc = (ROOT / "docs" / "prometheus.md").read_text()
    assert f"contract version {METRICS_VERSION}" in doc
    readme = (ROOT / "README.md").read_text()
    assert "docs/prometheus.md" in readme


def test_a_finding_folded_under_a_cause_is_exported_with_that_cause_and_its_own_severity() -> None:
    from llmdoctor.causes import Cause, Symptom
    from llmdoctor.reporting.folding import fold_outcomes

    queue = Finding(Severity.WARNING, Confidence.HIGH, "queue", "m", Fix("f"), impact_ms=900.0,
                    cause=Cause.QUEUEING, check_id="LD203", category="server")
    floor = Finding(Severity.CRITICAL, Confidence.HIGH, "floor", "m", Fix("f"), impact_ms=800.0,
                    symptom=Symptom.HIGH_FLOOR, check_id="LD701", category="baseline")
    outcomes = [CheckOutcome("LD203", "queue", "t", "server", "failed", [queue]),
                CheckOutcome("LD701", "floor", "t", "baseline", "failed", [floor])]
    findings = fold_outcomes(outcomes)
    assert [f.check_id for f in findings] == ["LD203"] and [s.check_id for s in findings[0].supporting] == ["LD701"]
    report = _report()
    report.findings[:] = findings
    s = _samples(render_prometheus(report))
    ep = "http://10.0.0.5:8000/v1"
    # the cause carries the group's (worst) severity; the folded symptom keeps its own, labelled with the cause
    assert _get(s, "llmdoctor_findings", endpoint=ep, check_id="LD203", category="server", severity="critical",
                cause="queueing") == 1
    assert _get(s, "llmdoctor_finding_impact_seconds", endpoint=ep, check_id="LD701", category="baseline",
                severity="critical", cause="queueing") == pytest.approx(0.8)
