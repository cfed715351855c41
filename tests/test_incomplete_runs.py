"""A run whose checklist did not complete is never OK.

Found in CI (stop 31): with the package importable from a checkout but its ``checks/`` folder not mapped,
every check crashed on import, no request was sent, and the report said ``Result: OK (exit 0)``. A crashed
check, like Ctrl-C, leaves the checklist incomplete: the run is UNKNOWN (3), unless it found something
critical (2). The control is the same replayed run without the broken plugin: OK.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.reporting.report import Report
from llmdoctor.runner import CheckOutcome, Status
from tests.cliutil import record_sim_run, run_cli

SELECTED = ["LD001", "LD701"]


def _report(findings: list[Finding], statuses: list[Status]) -> Report:
    checks = [CheckOutcome(f"LD9{i:02d}", "x", "x", "endpoint", status) for i, status in enumerate(statuses)]
    return Report(endpoint="http://x/v1", model=None, started_at="", duration_ms=0.0, requests_sent=0,
                  request_budget=30, findings=findings, checks=checks, probes=[])


def _finding(severity: Severity) -> Finding:
    return Finding(severity, Confidence.HIGH, "t", "m", Fix("fix"), check_id="LD900")


def test_a_crashed_check_makes_the_run_unknown() -> None:
    assert _report([], [Status.PASSED, Status.CRASHED]).exit_code == 3
    assert _report([], [Status.PASSED, Status.CRASHED]).status == "unknown"
    assert _report([_finding(Severity.WARNING)], [Status.CRASHED]).exit_code == 3


def test_critical_still_wins_over_a_crash() -> None:
    assert _report([_finding(Severity.CRITICAL)], [Status.CRASHED]).exit_code == 2


def test_control_every_check_ran() -> None:
    assert _report([], [Status.PASSED, Status.SKIPPED, Status.FAILED]).exit_code == 0


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(record_sim_run(tmp_path_factory.mktemp("incomplete") / "rec.json", "healthy", SELECTED))


def test_a_plugin_that_fails_to_load_is_not_ok(capsys: pytest.CaptureFixture[str], recording: Path,
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import llmdoctor.checklist.registry as registry

    real = registry.entry_points

    def with_missing(group: str) -> list[EntryPoint]:
        return [*real(group=group), EntryPoint("LD951", "acme_missing_module:Gone", group)]

    monkeypatch.setattr(registry, "entry_points", with_missing)
    result = run_cli(capsys, "replay", str(recording), "--json", "--select", ",".join(SELECTED))
    assert result.code == 3, result.out[-2000:]
    assert result.report["status"] == "unknown"
    assert any(c["check_id"] == "LD951" and c["status"] == "crashed" for c in result.report["checks"])


def test_control_the_same_replay_without_it_is_ok(capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    result = run_cli(capsys, "replay", str(recording), "--json", "--select", ",".join(SELECTED))
    assert all(c["status"] != "crashed" for c in result.report["checks"])
    assert result.code == 0, [f["title"] for f in result.report["findings"]]
