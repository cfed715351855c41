"""The differential diagnosis as JSON: the ``diagnosis`` object of the report (schema 1.2).

Spelled out field by field like the rest of `render.json`, probabilities and likelihood ratios
included; the reports people read word it in `llmdoctor.render.view`, without them.
"""

from __future__ import annotations

from typing import Any

from llmdoctor.diagnosis.model import Diagnosis, HypothesisState

__all__ = ["diagnosis_to_dict"]


def _hypothesis(h: HypothesisState) -> dict[str, Any]:
    return {
        "id": h.id,
        "title": h.title,
        "status": h.status,
        "prior": round(h.prior, 4),
        "after_first_pass": round(h.after_first_pass, 4),
        "probability": round(h.probability, 4),
        "impact_ms": None if h.impact_ms is None else round(h.impact_ms, 1),
        "impact_basis": h.impact_basis,
        "evidence": [{"source": o.source, "observation": o.text, "likelihood_ratio": o.likelihood_ratio}
                     for o in h.evidence],
    }


def diagnosis_to_dict(d: Diagnosis | None) -> dict[str, Any] | None:
    """The ``diagnosis`` object of the JSON report (None when no diagnosis ran)."""
    if d is None:
        return None
    return {
        "symptom": d.symptom,
        "stop_reason": d.stop_reason,
        "budget": {"requests": d.budget_requests, "seconds": d.budget_s},
        "spent": {"requests": d.spent_requests, "seconds": round(d.spent_s, 2)},
        "confirmed": [
            {"id": h.id, "title": h.title, "probability": round(h.probability, 4),
             "impact_ms": None if h.impact_ms is None else round(h.impact_ms, 1),
             "chain": [{"stage": link.stage, "text": link.text} for link in d.chain(h.id)]}
            for h in d.confirmed
        ],
        "refuted": [{"id": h.id, "title": h.title, "probability": round(h.probability, 4)} for h in d.refuted],
        "tests": [
            {"probe": s.probe, "title": s.title, "reason": s.reason, "cost_requests": s.cost_requests,
             "cost_seconds": s.cost_s, "expected_bits": s.expected_bits, "ran": s.ran, "result": s.result,
             "updates": [{"hypothesis": u.hypothesis, "before": round(u.before, 4), "after": round(u.after, 4),
                          "likelihood_ratio": u.likelihood_ratio} for u in s.updates]}
            for s in d.steps
        ],
        "hypotheses": [_hypothesis(h) for h in d.hypotheses],
    }
