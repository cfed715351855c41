"""A cause that another found cause brings about folds under it (KV pressure: a queue, prefill recomputed)."""

from __future__ import annotations

from llmdoctor.causes import CONSEQUENCES, Cause
from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.reporting.folding import fold, fold_outcomes
from llmdoctor.runner import CheckOutcome, Status


def _f(check_id: str, cause: Cause, severity: Severity = Severity.WARNING, impact: float | None = 500.0,
       category: str = "server", restatement: bool = False) -> Finding:
    return Finding(severity, Confidence.HIGH, f"title {check_id}", "message", Fix("fix"), impact_ms=impact,
                   cause=cause, check_id=check_id, category=category, restatement=restatement)


def _listed(findings: list[Finding]) -> list[tuple[str, list[str]]]:
    return [(f.check_id, [s.check_id for s in f.supporting]) for f in findings]


def test_kv_pressure_brings_about_queueing_and_recomputed_prefill() -> None:
    assert CONSEQUENCES[Cause.KV_CACHE_PRESSURE] >= {Cause.QUEUEING, Cause.LONG_PREFILL}


def test_queueing_and_a_confirmed_slow_prefill_fold_under_kv_pressure() -> None:
    """As on real vLLM under KV pressure (issue 26): KV first, its symptoms folded, not separate warnings."""
    kv = _f("LD204", Cause.KV_CACHE_PRESSURE, Severity.CRITICAL, impact=None)
    queue = _f("LD203", Cause.QUEUEING, impact=2400)
    prefill = _f("LD720", Cause.LONG_PREFILL, impact=900, category="baseline", restatement=True)
    listed = fold([queue, prefill, kv])
    assert _listed(listed) == [("LD204", ["LD203", "LD720"])]
    (top,) = listed
    assert top.severity == Severity.CRITICAL and top.impact_ms == 2400  # the group's cost, its worst severity


def test_without_kv_pressure_queueing_stands_alone() -> None:
    listed = fold([_f("LD203", Cause.QUEUEING), _f("LD720", Cause.LONG_PREFILL, category="baseline")])
    assert sorted(f.check_id for f in listed) == ["LD203", "LD720"]


def test_a_weaker_kv_finding_does_not_swallow_a_louder_queue() -> None:
    """KV usage seen as info (no preemption) does not explain a queue that is a warning: both stay."""
    listed = fold([_f("LD204", Cause.KV_CACHE_PRESSURE, Severity.INFO), _f("LD203", Cause.QUEUEING)])
    assert _listed(listed) == [("LD203", []), ("LD204", [])]


def test_the_users_own_long_prompt_is_never_folded_as_a_consequence() -> None:
    """LD101's long prompt is the user's cause: KV pressure does not explain it away."""
    kv = _f("LD204", Cause.KV_CACHE_PRESSURE, Severity.CRITICAL)
    prompt = _f("LD101", Cause.LONG_PREFILL, category="input")
    assert sorted(_listed(fold([kv, prompt]))) == [("LD101", []), ("LD204", [])]


def test_the_checks_tally_says_where_a_folded_consequence_is_listed() -> None:
    kv = CheckOutcome("LD204", "kv", "KV", "server", Status.FAILED, findings=[_f("LD204", Cause.KV_CACHE_PRESSURE,
                                                                      Severity.CRITICAL)])
    queue = CheckOutcome("LD203", "queue", "Queue", "server", Status.FAILED, findings=[_f("LD203", Cause.QUEUEING)])
    listed = fold_outcomes([kv, queue])
    assert [f.check_id for f in listed] == ["LD204"]
    assert queue.status == Status.FAILED and "listed under LD204 (kv_cache_pressure)" in queue.reason
