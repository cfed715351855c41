"""The differential diagnosis for the renderers: the JSON object and plain text lines.

`diagnosis_to_dict` is part of the JSON contract (``diagnosis`` in schema 1.2), spelled out
field by field like the rest of `render.json`; `diagnosis_lines` gives the text, Markdown
and HTML renderers the same content: each confirmed cause's chain, then what was ruled out.
"""

from __future__ import annotations

from typing import Any

from llmdoctor.diagnosis.model import Diagnosis, HypothesisState

__all__ = ["diagnosis_to_dict", "diagnosis_lines"]


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


def diagnosis_lines(d: Diagnosis) -> list[tuple[str, str]]:
    """``(kind, text)`` lines: ``cause`` headings, ``link`` chain lines, ``note`` lines."""
    out: list[tuple[str, str]] = []
    tests = sum(1 for s in d.steps if s.ran)
    out.append(("note", f"{tests} follow-up test(s), {d.spent_requests} requests of {d.budget_requests}; "
                        f"stopped: {d.stop_reason}"))
    for h in d.confirmed:
        out.append(("cause", f"Confirmed: {h.title} (p = {h.probability:.2f})"))
        out.extend(("link", f"{link.stage}: {link.text}") for link in d.chain(h.id))
    if not d.confirmed:
        leading = ", ".join(f"{h.title} {h.probability:.0%}" for h in d.open[:3]) or "none"
        out.append(("cause", f"No cause confirmed; still open: {leading}"))
    refuted = ", ".join(f"{h.title} ({h.probability:.0%})" for h in d.refuted)
    out.append(("note", f"Ruled out: {refuted or 'nothing'}"))
    return out
