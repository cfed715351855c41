"""Ranking and de-duplication of findings: deterministic, one cause listed once."""

from __future__ import annotations

from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.report import exit_code_for, rank, without_restatements


def _f(check_id: str, severity: Severity = Severity.WARNING, impact: float | None = 100.0,
       confidence: Confidence = Confidence.HIGH, cause: str = "", restatement: bool = False) -> Finding:
    return Finding(severity, confidence, f"title {check_id}", "message", Fix("fix"), impact_ms=impact,
                   cause=cause, restatement=restatement, check_id=check_id)


def test_rank_orders_by_severity_then_weighted_impact_then_checklist_order() -> None:
    findings = [
        _f("LD702", impact=300),
        _f("LD301", impact=400, confidence=Confidence.LOW),  # 160 weighted
        _f("LD001", Severity.CRITICAL, impact=None),
        _f("LD703", impact=300),
        _f("LD101", Severity.INFO, impact=5000),
    ]
    assert [f.check_id for f in rank(findings)] == ["LD001", "LD702", "LD703", "LD301", "LD101"]
    assert rank(list(reversed(findings))) == rank(findings)


def test_a_restated_cause_yields_to_the_checklist_finding() -> None:
    checklist = _f("LD301", cause="cold_start")
    restated = _f("LD720", impact=1200, cause="cold_start", restatement=True)
    other = _f("LD720", impact=50, cause="queueing", restatement=True)
    kept = without_restatements([restated, checklist, other])
    assert [f.check_id for f in kept] == ["LD301", "LD720"] and kept[1].cause == "queueing"


def test_exit_codes_follow_fail_on() -> None:
    assert exit_code_for([_f("LD1", Severity.INFO)]) == 0
    assert exit_code_for([_f("LD1")]) == 1
    assert exit_code_for([_f("LD1")], fail_on="critical") == 0
    assert exit_code_for([_f("LD1"), _f("LD2", Severity.CRITICAL)], fail_on="critical") == 2


def test_a_negative_fit_intercept_is_never_shown_as_a_negative_cost() -> None:
    from llmdoctor.render.common import fit_summary
    from llmdoctor.report import Breakdown

    line = fit_summary(Breakdown(label="x", total_ms=10.0, fixed_ms=-7.0, per_token_ms=9.0, typical_output_tokens=64))
    assert line is not None and "fixed ≈ 0 ms (fitted intercept -7.0 ms)" in line and "(0% fixed)" in line
    assert fit_summary(Breakdown(label="x", total_ms=10.0)) is None


def test_folding_a_restatement_keeps_the_checks_tally_consistent() -> None:
    from llmdoctor.report import fold_restatements
    from llmdoctor.runner import CheckOutcome, Status

    direct = CheckOutcome("LD301", "cold-start", "t", "cold_start", Status.FAILED, [_f("LD301", cause="cold_start")])
    restated = CheckOutcome("LD720", "confirmed-cause", "t", "baseline", Status.FAILED,
                            [_f("LD720", cause="cold_start", restatement=True)])
    kept = fold_restatements([direct, restated])
    assert [f.check_id for f in kept] == ["LD301"]
    assert restated.status == Status.PASSED and restated.findings == []
    assert restated.reason == "cold_start is already reported by LD301"
