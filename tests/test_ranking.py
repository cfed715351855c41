"""Ranking and folding of findings: deterministic, one cause listed once, above its symptoms."""

from __future__ import annotations

import random

import pytest

from llmdoctor.causes import Cause, Frequency, Symptom
from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.reporting.folding import fold, fold_outcomes
from llmdoctor.reporting.report import exit_code_for, rank
from llmdoctor.runner import CheckOutcome, Status


def _f(check_id: str, severity: Severity = Severity.WARNING, impact: float | None = 100.0,
       confidence: Confidence = Confidence.HIGH, cause: str = "", restatement: bool = False,
       symptom: str = "", frequency: str = "") -> Finding:
    return Finding(severity, confidence, f"title {check_id}", "message", Fix("fix"), impact_ms=impact,
                   cause=cause or None, symptom=symptom or None, restatement=restatement, check_id=check_id,
                   frequency=frequency or None)


def _listed(findings: list[Finding]) -> list[tuple[str, list[str]]]:
    """(check id, [check ids folded under it]) for each listed finding, in rank order."""
    return [(f.check_id, [s.check_id for s in f.supporting]) for f in findings]


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


def test_a_restated_cause_folds_under_the_checklist_finding() -> None:
    checklist = _f("LD301", cause="cold_start")
    restated = _f("LD720", impact=1200, cause="cold_start", restatement=True)
    other = _f("LD720", impact=50, cause="queueing", restatement=True)
    listed = fold([restated, checklist, other])
    # the checklist finding carries the ranking, with the diagnosis's confirmation as its evidence; the
    # queueing (paid under load) ranks above the cold start (paid once, with no sign that it recurs)
    assert _listed(listed) == [("LD720", []), ("LD301", ["LD720"])] and listed[0].cause == Cause.QUEUEING
    top = listed[1]
    assert top.impact_ms == 1200 and top.own == (Severity.WARNING, 100.0) and "from LD720" in top.impact_basis


def test_exit_codes_follow_fail_on() -> None:
    assert exit_code_for([_f("LD1", Severity.INFO)]) == 0
    assert exit_code_for([_f("LD1")]) == 1
    assert exit_code_for([_f("LD1")], fail_on="critical") == 0
    assert exit_code_for([_f("LD1"), _f("LD2", Severity.CRITICAL)], fail_on="critical") == 2


def test_a_negative_fit_intercept_is_never_shown_as_a_negative_cost() -> None:
    from llmdoctor.render.common import fit_summary
    from llmdoctor.reporting.report import Breakdown

    line = fit_summary(Breakdown(label="x", total_ms=10.0, fixed_ms=-7.0, per_token_ms=9.0, typical_output_tokens=64))
    assert line is not None and "Fixed ≈ 0 ms (fitted intercept -7.0 ms)" in line and "(0% fixed)" in line
    assert fit_summary(Breakdown(label="x", total_ms=10.0)) is None


def test_folding_keeps_the_checks_tally_consistent() -> None:
    direct = CheckOutcome("LD301", "cold-start", "t", "cold_start", Status.FAILED, [_f("LD301", cause="cold_start")])
    restated = CheckOutcome("LD720", "confirmed-cause", "t", "baseline", Status.FAILED,
                            [_f("LD720", cause="cold_start", restatement=True)])
    listed = fold_outcomes([direct, restated])
    assert _listed(listed) == [("LD301", ["LD720"])]
    # the restating check found something, and says where it is listed
    assert restated.status == Status.FAILED and restated.findings == list(listed[0].supporting)
    assert restated.reason == "listed under LD301 (cold_start)"
    assert direct.findings == listed and direct.reason == ""


def test_a_cause_ranks_above_its_own_symptoms() -> None:
    """The real-vLLM case: the queue finding used to rank third, behind the floor and the fixed cost."""
    floor = _f("LD701", Severity.CRITICAL, impact=2100, symptom="high_floor")
    fixed = _f("LD702", impact=1800, symptom="fixed_cost")
    queue = _f("LD203", impact=1500, confidence=Confidence.MEDIUM, cause="queueing")
    unrelated = _f("LD602", impact=1700, cause="no_streaming")
    before = [floor, fixed, unrelated, queue]
    assert [f.check_id for f in rank(before)] == ["LD701", "LD702", "LD602", "LD203"]
    listed = fold(before)
    assert _listed(listed) == [("LD203", ["LD701", "LD702"]), ("LD602", [])]
    top = listed[0]
    # the group takes the worst severity and the largest impact: the exit code does not move
    assert top.severity == Severity.CRITICAL and top.impact_ms == 2100
    assert top.own == (Severity.WARNING, 1500) and top.supporting[0] is floor
    assert exit_code_for(listed) == exit_code_for(before) == 2
    assert exit_code_for(listed, "critical") == exit_code_for(before, "critical")


def test_a_less_certain_cause_still_ranks_where_its_symptom_would() -> None:
    queue = _f("LD203", impact=500, confidence=Confidence.LOW, cause="queueing")
    floor = _f("LD701", impact=600, symptom="high_floor")
    streaming = _f("LD602", impact=550, cause="no_streaming")
    assert _listed(fold([streaming, queue, floor])) == [("LD203", ["LD701"]), ("LD602", [])]


def test_a_cause_too_small_for_the_symptom_does_not_explain_it() -> None:
    handshake = _f("LD407", impact=5, cause="no_keepalive")
    fixed = _f("LD702", impact=450, symptom="fixed_cost")
    assert _listed(fold([handshake, fixed])) == [("LD702", []), ("LD407", [])]
    # an unmeasured cause cannot show it explains a measured symptom; an unmeasured symptom folds by kind
    busy = _f("LD208", impact=None, cause="host_pressure")
    assert _listed(fold([busy, fixed])) == [("LD702", []), ("LD208", [])]
    per_token = _f("LD710", Severity.CRITICAL, impact=None, symptom="slow_per_token")
    assert _listed(fold([_f("LD703", impact=900, cause="slow_decode"), per_token])) == [("LD703", ["LD710"])]


def test_a_symptom_of_two_causes_folds_under_the_better_ranked_one_in_any_order() -> None:
    rtt = _f("LD406", impact=300, cause="slow_network")
    queue = _f("LD203", impact=700, cause="queueing")  # paid under load: ~350 ms per request
    floor = _f("LD701", impact=600, symptom="high_floor")
    setup = _f("LD401", impact=250, symptom="slow_connection_setup")
    decode = _f("LD703", impact=200, cause="slow_decode")  # explains a floor, but too small for this one
    alone = _f("LD710", impact=90, symptom="slow_first_token", confidence=Confidence.LOW)
    findings = [rtt, queue, floor, setup, decode, alone]
    expected = [("LD203", ["LD701", "LD710"]), ("LD406", ["LD401"]), ("LD703", [])]
    for seed in range(10):
        random.Random(seed).shuffle(findings)
        assert _listed(fold(findings)) == expected


def test_a_symptom_no_cause_explains_stays_a_finding_of_its_own() -> None:
    fixed = _f("LD702", impact=450, symptom="fixed_cost")
    cold = _f("LD301", impact=1200, cause="cold_start")  # a cold start does not explain the warm floor
    # ... and, paid once, it ranks below the fixed cost every request pays
    assert _listed(fold([fixed, cold])) == [("LD702", []), ("LD301", [])]


def test_causes_and_symptoms_are_a_closed_set() -> None:
    with pytest.raises(ValueError):
        _f("LD999", cause="slowness")
    with pytest.raises(ValueError):
        _f("LD999", symptom="sluggish")
    with pytest.raises(ValueError):
        _f("LD999", cause="queueing", symptom="high_floor")
    assert _f("LD203", cause="queueing").cause is Cause.QUEUEING
    assert _f("LD701", symptom="high_floor").symptom is Symptom.HIGH_FLOOR


def test_a_one_time_cost_ranks_below_what_every_request_pays_unless_it_recurs() -> None:
    """The demo's case: a 1,200 ms cold start paid once vs a 354 ms floor every request pays."""
    cold = _f("LD301", impact=1200, cause="cold_start", frequency="cold_start")
    floor = _f("LD702", impact=354, symptom="fixed_cost", frequency="every_request")
    tail = _f("LD701", impact=40, symptom="unstable_floor", frequency="slow_tail")
    assert [f.check_id for f in fold([cold, tail, floor])] == ["LD702", "LD701", "LD301"]
    assert cold.cost_per_request_ms == 0.0 and floor.cost_per_request_ms == 354
    # a cost no one estimated (a busy host) ranks after the measured ones, the one-time cold start included
    busy = _f("LD208", impact=None, cause="host_pressure")
    assert [f.check_id for f in fold([busy, cold, floor])] == ["LD702", "LD301", "LD208"]
    # evidence that cold starts recur (the model unloads when idle) makes it a recurring cost: ~600 ms a request
    idle = _f("LD304", impact=1100, cause="cold_start", frequency="recurring_cold_start", confidence=Confidence.MEDIUM)
    listed = fold([cold, floor, idle])
    assert _listed(listed) == [("LD304", ["LD301"]), ("LD702", [])]
    assert listed[0].paid is Frequency.RECURRING_COLD_START and listed[0].impact_ms == 1200


def test_a_frequency_defaults_to_its_cause_or_symptom() -> None:
    assert _f("LD301", cause="cold_start").paid is Frequency.COLD_START
    assert _f("LD203", cause="queueing").paid is Frequency.UNDER_LOAD
    assert _f("LD401", symptom="slow_connection_setup").paid is Frequency.NEW_CONNECTION
    assert _f("LD102").paid is Frequency.EVERY_REQUEST
    assert _f("LD407", cause="no_keepalive", frequency="every_request").paid is Frequency.EVERY_REQUEST
    with pytest.raises(ValueError):
        _f("LD999", frequency="sometimes")


def test_a_finding_of_about_0_ms_is_info_and_never_ranked_above_a_costly_one() -> None:
    """LD302 'impact ~0.0 ms · confidence high' was listed as a warning above real costs."""
    restart = _f("LD302", impact=0.0, cause="cold_start")
    decode = _f("LD703", Severity.INFO, impact=80, cause="slow_decode")
    listed = fold([restart, decode])
    assert [f.check_id for f in listed] == ["LD703", "LD302"]
    assert listed[1].severity is Severity.INFO and listed[1].negligible
    assert exit_code_for(listed) == 0
    # a gate's breach is not a latency cause: it keeps its severity whatever its size
    breach = _f("LD710", Severity.CRITICAL, impact=0.4, symptom="slow_first_token")
    assert fold([breach])[0].severity is Severity.CRITICAL
