"""JSON rendering: the versioned contract for incident tooling.

The layout is spelled out here field by field (not dumped from the
dataclasses) so an internal rename cannot silently change the contract;
``llmdoctor/schema/report.schema.json`` describes it and tests validate
every produced report against it.

Whatever the measurements hold (a replayed recording with NaN, a clock that
went backwards, a hand-edited file), the JSON is valid and within the schema:
`sanitise` turns a non-finite number into null, a negative duration (a ``*_ms``
field) into null where the schema allows it and 0 where it does not (a
breakdown whose total is not a duration is dropped), a string that is not
valid Unicode (a byte that was not UTF-8) into one with U+FFFD, and every
string passes through the process-wide redaction.
"""

from __future__ import annotations

import json
import math
from typing import Any

from llmdoctor import __version__
from llmdoctor.findings import Evidence, Finding
from llmdoctor.measurements.ledger import ProbeTally, RequestOutcome
from llmdoctor.render.diagnosis import diagnosis_to_dict
from llmdoctor.reporting.report import Report

__all__ = ["report_to_dict", "render_json", "sanitise", "MASK"]

MASK = "***"


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _evidence(e: Evidence) -> dict[str, Any]:
    value = MASK if e.sensitive else e.value
    if isinstance(value, float):
        value = round(value, 3) if math.isfinite(value) else None
    return {"label": e.label, "value": value, "unit": e.unit, "source": e.source}


def _finding_fields(f: Finding) -> dict[str, Any]:
    own_severity, own_impact = f.own
    return {
        "check_id": f.check_id,
        "category": f.category,
        "severity": f.severity.value,
        "confidence": f.confidence.value,
        "title": f.title,
        "message": f.message,
        "impact_ms": _round(f.impact_ms),
        "impact_basis": f.impact_basis,
        "cause": f.cause.value if f.cause else "",
        "symptom": f.symptom.value if f.symptom else "",
        "symptoms": _explained(f),
        "own_severity": own_severity.value,
        "own_impact_ms": _round(own_impact),
        "frequency": f.paid.value,
        "cost_per_request_ms": _round(f.cost_per_request_ms),
        "negligible": f.negligible,
        "evidence": [_evidence(e) for e in f.evidence],
        "fix": {"summary": f.fix.summary, "steps": list(f.fix.steps)},
        "docs": f.docs,
        "supporting": [_finding_fields(s) for s in f.supporting],
    }


def _explained(f: Finding) -> list[str]:
    """The symptoms the findings folded under `f` show, in their order, once each."""
    return list(dict.fromkeys(s.symptom.value for s in f.supporting if s.symptom))


def _finding(f: Finding, rank: int) -> dict[str, Any]:
    return {"rank": rank, **_finding_fields(f)}


def _causes(report: Report) -> list[dict[str, Any]]:
    """Each cause the report names, once, in rank order, with the finding that carries it."""
    return [
        {"id": f.cause.value, "title": f.cause.label, "kind": f.cause.spec.kind.value, "rank": i,
         "check_id": f.check_id, "symptoms": _explained(f)}
        for i, f in enumerate(report.findings, 1) if f.cause is not None
    ]


def _tally(t: ProbeTally) -> dict[str, Any]:
    ratio = t.success_ratio
    return {"probe": t.probe, "sent": t.sent, "ok": t.ok, "failed": t.failed, "retried": t.retried,
            "empty": t.empty, "truncated": t.truncated,
            "success_ratio": None if ratio is None else round(ratio, 4), "failures": dict(t.failures),
            "failed_by": dict(t.failed_by)}


def _request(r: RequestOutcome) -> dict[str, Any]:
    """One request of the run: its ids, how it ended, its attempt (1.9) and who failed it (1.10: a misfit is ours)."""
    return {"probe": r.probe, "method": r.method, "path": r.path, "sent_at": _round(r.started_at, 3),
            "outcome": r.outcome, "request_id": r.request_id, "traceparent": r.traceparent,
            "attempt": 2 if r.retried else 1, "label": None if r.ok else r.label, "failed_by": r.who,
            "misfit": r.misfit}


def _requests(report: Report) -> dict[str, Any]:
    """The ``requests`` object: counts, and (1.5) how they ended, overall, for generation and by probe."""
    out: dict[str, Any] = {"sent": report.requests_sent, "budget": report.request_budget,
                           "raw_connections": report.raw_connections}
    a = report.accounting
    if a is not None:
        out.update({"ok": a.overall.ok, "failed": a.overall.failed, "retried": a.overall.retried,
                    "success_ratio": _tally(a.overall)["success_ratio"], "generation": _tally(a.generation),
                    "troubled_generations": a.troubled_generations, "unanswered": a.unanswered,
                    "by_probe": [_tally(t) for t in a.by_probe],
                    "ids": [_request(r) for r in a.requests]})
    return out


def _client_host(report: Report) -> dict[str, Any] | None:
    h = report.client_host
    if h is None:
        return None
    return {"saturated": h.saturated, "line": h.line(), "cpu_count": h.cpu_count, "seconds": h.seconds,
            "lag_samples": h.lag_samples, "lag_p50_ms": h.lag_p50_ms, "lag_p90_ms": h.lag_p90_ms,
            "lag_p99_ms": h.lag_p99_ms, "lag_max_ms": h.lag_max_ms, "late_share": h.late_share,
            "cpu_busy": h.cpu_busy, "cpu_pressure": h.cpu_pressure}


def _pair(values: tuple[float, float] | None, digits: int = 1) -> list[float] | None:
    return None if values is None else [round(values[0], digits), round(values[1], digits)]


# Durations the schema requires (never null): a negative one becomes 0.
_REQUIRED_MS = frozenset({"duration_ms", "total_ms", "ms"})


def _clean_text(text: str) -> str:
    """`text` as valid Unicode: lone surrogates (undecodable bytes) become U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


def _duration_key(key: str) -> bool:
    """Whether `key` names a duration (never negative); a fit's interval may reach below 0 (a fixed cost
    of "-12 to 40 ms" is what the robust fit says: not determined), so ``*_interval_ms`` are not."""
    return (key.endswith("_ms") or key == "ms") and not key.endswith("_interval_ms")


def sanitise(value: Any, key: str = "") -> Any:
    """`value` with every number finite, every duration non-negative, every string valid and redacted."""
    from llmdoctor.redact import redact_output

    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return 0.0 if key in _REQUIRED_MS else None
        if value < 0 and _duration_key(key):
            return 0.0 if key in _REQUIRED_MS else None
        return value
    if isinstance(value, int):
        if value < 0 and _duration_key(key):
            return 0 if key in _REQUIRED_MS else None
        return value
    if isinstance(value, str):
        return redact_output(_clean_text(value))
    if isinstance(value, dict):
        return {sanitise(k) if isinstance(k, str) else k: sanitise(v, k if isinstance(k, str) else "")
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitise(v, key) for v in value]
    return value


def _duration(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 0


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as the JSON contract's plain dict (`sanitise`d)."""
    return sanitise(_report_dict(report))


def _report_dict(report: Report) -> dict[str, Any]:
    b = report.breakdown
    breakdown = None
    if b is not None and _duration(b.total_ms):
        breakdown = {
            "label": b.label,
            "total_ms": _round(b.total_ms),
            "phases": [{"name": p.name, "ms": _round(p.ms), "note": p.note, "clock": p.clock, "source": p.source}
                       for p in b.phases],
            "split": {"in_front_ms": _round(b.in_front_ms), "server_ms": _round(b.server_ms),
                      "held_ms": _round(b.held_ms), "sources": list(b.split_sources), "notes": list(b.split_notes),
                      "hint": b.clock_hint},
            "new_connection_ms": _round(b.new_connection_ms),
            "ttft_p50_ms": _round(b.ttft_p50_ms),
            "ttft_p90_ms": _round(b.ttft_p90_ms),
            "total_p50_ms": _round(b.total_p50_ms),
            "total_p90_ms": _round(b.total_p90_ms),
            "fixed_ms": _round(b.fixed_ms),
            "per_token_ms": _round(b.per_token_ms, 3),
            "typical_output_tokens": b.typical_output_tokens,
            "sweep_points": [{"output_tokens": n, "total_ms": _round(ms)} for n, ms in b.sweep_points
                             if _duration(ms)],
            "fixed_interval_ms": _pair(b.fixed_interval_ms),
            "per_token_interval_ms": _pair(b.per_token_interval_ms, 3),
            "fit_note": b.fit_note,
        }
    return {
        "schema_version": report.schema_version,
        "tool": {"name": "llmdoctor", "version": __version__},
        "endpoint": report.endpoint,
        "model": report.model,
        "started_at": report.started_at,
        "duration_ms": _round(report.duration_ms),
        "status": report.status,
        "exit_code": report.exit_code,
        "fail_on": report.fail_on,
        "replayed": report.replayed,
        "interrupted": report.interrupted,
        "requests": _requests(report),
        "client_host": _client_host(report),
        "breakdown": breakdown,
        "diagnosis": diagnosis_to_dict(report.diagnosis),
        "findings": [_finding(f, i + 1) for i, f in enumerate(report.findings)],
        "causes": _causes(report),
        "checks": [
            {
                "check_id": o.check_id,
                "name": o.name,
                "title": o.title,
                "category": o.category,
                "status": o.status,
                "reason": o.reason,
                "findings": len(o.findings),
                "duration_ms": _round(o.duration_ms),
            }
            for o in report.checks
        ],
        "probes": [
            {"name": p.name, "available": p.available, "reason": p.reason, "duration_ms": _round(p.duration_ms)}
            for p in report.probes
        ],
    }


def render_json(report: Report) -> str:
    """Pretty-printed JSON with a trailing newline."""
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False) + "\n"
