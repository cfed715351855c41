"""One typed reasoning vocabulary: an id that names no cause, or a cause that is no hypothesis, is an error.

The differential diagnosis names causes by `Cause`, never by bare strings: a typo is an error at import
(an attribute of `Cause` that does not exist) or when the rule runs, not evidence lost in silence.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmdoctor.causes import CAUSES, Cause
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts, first_pass
from llmdoctor.diagnosis.hypotheses import BY_ID, HYPOTHESES
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState, HypothesisStatus, Observation, Update
from llmdoctor.diagnosis.planner import EXCLUSION_RIVALS, EXPLAINED_BY
from llmdoctor.limits import COLD_START_LIMITS, QUEUEING_LIMITS, SLOW_DECODE_LIMITS


def _diagnosis() -> Diagnosis:
    d = Diagnosis(symptom="test")
    d.hypotheses = [HypothesisState(h.cause, h.title, h.prior, h.prior, HypothesisStatus.OPEN) for h in HYPOTHESES]
    return d


def test_an_unknown_cause_id_is_an_error_not_a_miss() -> None:
    d = _diagnosis()
    with pytest.raises(ValueError, match="queuing"):
        d.get("queuing")  # type: ignore[arg-type]  # the typo the old string ids allowed
    with pytest.raises(ValueError):
        d.state("queuing")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        HypothesisState("queuing", "t", 0.2, 0.2, HypothesisStatus.OPEN)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Observation("queuing", "first pass", "seen", 3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Update("queuing", 0.2, 0.4, 3.0, "seen")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        HypothesisState(Cause.QUEUEING, "t", 0.2, 0.2, "maybe")  # type: ignore[arg-type]


def test_evidence_about_a_cause_that_is_no_hypothesis_raises() -> None:
    d = _diagnosis()
    assert Cause.GPU_MEMORY not in BY_ID
    assert d.get(Cause.GPU_MEMORY) is None  # a lookup may ask: not every cause is a hypothesis
    with pytest.raises(KeyError, match="gpu_memory"):
        d.state(Cause.GPU_MEMORY)  # evidence about it is a bug of the rules
    assert d.state(Cause.QUEUEING).id is Cause.QUEUEING


def test_recorded_string_ids_become_causes() -> None:
    """A recording holds the JSON ids; rebuilt, they are the causes and statuses themselves."""
    h = HypothesisState("queueing", "t", 0.2, 0.2, "confirmed")  # type: ignore[arg-type]
    assert h.cause is Cause.QUEUEING and h.status is HypothesisStatus.CONFIRMED
    assert h.status == "confirmed" and h.id == "queueing"  # the JSON values are unchanged


def test_every_cause_the_rules_name_is_a_hypothesis() -> None:
    for f in FOLLOWUPS:
        assert set(f.separates) <= set(BY_ID), f.title
        assert all(isinstance(c, Cause) for c in f.separates)
    named = {*EXCLUSION_RIVALS, *EXPLAINED_BY, *(c for v in EXPLAINED_BY.values() for c in v)}
    assert named <= set(BY_ID)
    facts = Facts(warm_ttft_ms=400.0, warm_total_ms=900.0, ttft_p90_ms=900.0, decode_ms=45.0,
                  first_ttft_ms=3000.0, first_setup_ms=1.0, models_ms=150.0, fresh=5, reused=0,
                  setup_ms=[20.0] * 5, waiting=3.0)
    seen, impacts = first_pass(facts)
    assert seen and impacts
    for cause, _, _ in seen:
        assert type(cause) is Cause and cause in BY_ID
    assert all(type(c) is Cause and c in BY_ID for c in impacts)


# -- one home per cause: its fix and its thresholds ----------------------------------------------------

def test_every_hypothesis_has_its_causes_fix_and_the_checks_of_that_cause_show_the_same() -> None:
    from llmdoctor.checklist.registry import load_registry
    from tests.checkcases import case_files, load_case, run_case

    for h in HYPOTHESES:
        assert h.fix is h.cause.fix is CAUSES[h.cause].fix and h.fix.summary and h.fix.steps
    registry = load_registry()
    shown: dict[str, set[Cause]] = {}
    for check_id in ("LD301", "LD407", "LD703", "LD720"):
        check = registry.by_id(check_id)
        assert check is not None
        for path in case_files(check_id):
            if load_case(path)["expect"]["status"] != "failed":
                continue
            for f in run_case(check, path).findings:
                assert f.cause is not None and f.fix is f.cause.fix, (path.name, f.fix)
                shown.setdefault(check_id, set()).add(f.cause)
    assert {"LD301", "LD407", "LD703", "LD720"} <= set(shown), "every check fired in one of its cases"
    with pytest.raises(LookupError):
        Cause.SLOW_DNS.fix  # noqa: B018 - a cause without a shared fix says so, its findings say theirs


def test_each_limits_belongs_to_one_cause_and_keeps_its_numbers() -> None:
    owners = [(c, s.limits) for c, s in CAUSES.items() if s.limits is not None]
    kinds = [type(limits) for _, limits in owners]
    assert len(set(kinds)) == len(kinds), "one Limits per cause"
    assert all(limits.__doc__ and f"Cause.{c.name}" in limits.__doc__ for c, limits in owners)
    # Two systems, one home: where the checklist and the diagnosis judge differently, both numbers are here.
    assert (SLOW_DECODE_LIMITS.warning_token_ms, SLOW_DECODE_LIMITS.slow_token_ms) == (40.0, 30.0)
    assert QUEUEING_LIMITS.slowdown == 1.5 and COLD_START_LIMITS.noise_floor_ms == 100.0
    assert CAUSES[Cause.SLOW_DECODE].limits is SLOW_DECODE_LIMITS


def test_no_check_or_rule_of_a_shared_cause_keeps_a_number_of_its_own() -> None:
    """The evidence rules and the checks that share a cause with them define no numeric constant: they read
    `llmdoctor.limits` (a module constant that is a plain number would be a second home)."""
    root = Path(__file__).resolve().parent.parent
    files = ["llmdoctor/diagnosis/evidence.py", "llmdoctor/diagnosis/queue_evidence.py",
             "checks/ld203_queue_building.py", "checks/ld301_cold_start.py", "checks/ld407_no_connection_reuse.py",
             "checks/ld503_concurrency_queueing.py",
             "checks/ld703_decode_speed.py"]
    for name in files:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        numbers = [t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                   and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Name)]
        assert not numbers, (name, numbers)


# -- the closed set of metrics --------------------------------------------------------------------------

def test_the_gate_reads_one_closed_set_of_metrics() -> None:
    from llmdoctor.analysis.measures import METRICS, REGRESSION_METRICS, SLO_METRICS, UnknownMetric, metric
    from llmdoctor.inputs.slo import SloError, merge_slos, parse_slo
    from llmdoctor.probes.catalog import BASELINE, SWEEP

    assert [m.id for m in SLO_METRICS] == ["ttft_p50", "ttft_p90", "total_p50", "total_p90", "fixed_cost",
                                           "per_token"]
    assert [m.id for m in REGRESSION_METRICS] == ["ttft", "total", "fixed_cost", "per_token"]
    assert len({m.id for m in METRICS}) == len(METRICS)
    for m in METRICS:
        assert m.source in (BASELINE, SWEEP) and m.description and metric(m.id) is m
    assert (metric("per_token").unit, metric("ttft_p90").unit) == ("ms/token", "ms")
    assert metric("ttft_p90").tail and not metric("ttft_p50").tail and not metric("fixed_cost").tail
    with pytest.raises(UnknownMetric, match="tokens_per_joule"):
        metric("tokens_per_joule")
    with pytest.raises(SloError, match="unknown metric 'ttft'"):
        parse_slo("ttft=800ms")  # a regression metric is no objective
    assert merge_slos([parse_slo("per_token=40ms")], [parse_slo("ttft_p90=1s")]) == ("ttft_p90=1000ms",
                                                                                    "per_token=40ms")


def test_a_checks_status_is_a_closed_set_with_the_same_json() -> None:
    import json

    from llmdoctor.runner import CheckOutcome, Status

    o = CheckOutcome("LD001", "reachability", "t", "endpoint", "skipped")  # type: ignore[arg-type]
    assert o.status is Status.SKIPPED
    assert json.dumps({"status": o.status}) == '{"status": "skipped"}' and f"{o.status}" == "skipped"
    with pytest.raises(ValueError):
        CheckOutcome("LD001", "reachability", "t", "endpoint", "exploded")  # type: ignore[arg-type]
    assert [s.value for s in Status] == ["passed", "failed", "skipped", "crashed"]
    assert f"{HypothesisStatus.OPEN}" == "open"
