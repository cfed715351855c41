"""One typed reasoning vocabulary: an id that names no cause, or a cause that is no hypothesis, is an error.

The differential diagnosis names causes by `Cause`, never by bare strings: a typo is an error at import
(an attribute of `Cause` that does not exist) or when the rule runs, not evidence lost in silence.
"""

from __future__ import annotations

import pytest

from llmdoctor.causes import Cause
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts, first_pass
from llmdoctor.diagnosis.hypotheses import BY_ID, HYPOTHESES
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState, HypothesisStatus, Observation, Update
from llmdoctor.diagnosis.planner import EXCLUSION_RIVALS, EXPLAINED_BY


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
