"""The deploy/ examples work: Prometheus's own tool checks the rules, their unit tests, the config and our metrics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from llmdoctor.render.prometheus import METRICS, render_prometheus
from tests.promtools import require_tool
from tests.test_prometheus import _report

ROOT = Path(__file__).resolve().parent.parent
PROM = ROOT / "deploy" / "prometheus"


def _promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=PROM)


def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    result = _promtool("test", "rules", "rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_checks_the_example_config() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_finds_nothing_to_lint_in_our_exposition() -> None:
    """Prometheus's linter (naming, units, reserved labels) accepts every metric llmdoctor emits."""
    result = _promtool("check", "metrics", stdin=render_prometheus(_report()))
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr)


def test_the_rules_use_only_documented_metrics_and_labels() -> None:
    known = {m.name: set(m.labels) | {"job", "instance"} for m in METRICS}
    rules = [r for g in yaml.safe_load((PROM / "rules.yml").read_text())["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    assert {"LlmdoctorEndpointCritical", "LlmdoctorEndpointWarning", "LlmdoctorQueueing", "LlmdoctorColdStart",
            "LlmdoctorLatencyRegression", "LlmdoctorNotReporting"} <= alerts
    for rule in rules:
        expr = rule["expr"]
        names = re.findall(r"\b(llmdoctor_[a-z_]+)", expr)
        assert names, f"{rule['alert']} reads no llmdoctor metric"
        for name in names:
            assert name in known, f"{rule['alert']}: {name} is not in the contract"
        used = set(re.findall(r"([a-z_]+)\s*=~?\s*\"", expr)) | {
            label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}
        allowed = set().union(*(known[n] for n in names))
        assert used <= allowed, f"{rule['alert']}: labels {used - allowed} are not in the contract"
