"""Folding: the report lists each cause once, above the symptoms it explains.

Findings are first grouped by cause: among the findings that name one cause, a checklist finding
carries the ranking over the differential diagnosis's restatement of it, a finding that measured the
cause over one that located it from a symptom (`Finding.located`), then the best ranked; the
others fold under it. A cause that another found cause brings about (`llmdoctor.causes.CONSEQUENCES`:
KV-cache pressure recomputes prefill and queues requests) folds under it with its findings, when the
other's own finding is at least as severe; a finding about the user's own request (an input check: a
long prompt) is the user's cause and never folds so. Then each symptom finding (a high floor, a
large fixed cost, a breached objective) folds under the best ranked cause that explains it
(`llmdoctor.causes`), provided that cause's measured cost is at least `EXPLAINS_SHARE` of the
symptom's when both are measured. A symptom no cause explains stays a finding of its own.

Before grouping, a finding of a latency cause whose measured impact is about 0 ms
(`llmdoctor.findings.NEGLIGIBLE_MS`) is set to info: it costs nothing, so it neither ranks above a
costly finding nor moves the exit code. A group takes the worst severity and the largest impact of its
members, and the most frequent way of paying it (`_paid`), so folding never changes the exit code,
and it ranks at least where the best ranked of its members would have ranked alone (`report.rank_key`);
the finding keeps its own values in `own_severity` / `own_impact_ms`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmdoctor.causes import CAUSES, CONSEQUENCES, EXPLAINS_SHARE, Cause, Frequency, Kind
from llmdoctor.findings import Finding, Severity
from llmdoctor.reporting.report import rank, rank_key
from llmdoctor.runner import CheckOutcome

__all__ = ["fold", "fold_outcomes", "explains", "settle"]


def explains(cause: Finding, symptom: Finding, cause_impact_ms: float | None = None) -> bool:
    """True when `cause` (a finding naming a cause) explains `symptom` (a finding naming a symptom).

    `cause_impact_ms` is the cost of the cause's whole group (default: the finding's own impact). A
    cause whose cost is not measured cannot show that it explains a measured symptom.
    """
    if cause.cause is None or symptom.symptom is None or not CAUSES[cause.cause].can_explain(symptom.symptom):
        return False
    if symptom.impact_ms is None or symptom.impact_ms <= 0:
        return True
    cost = cause.impact_ms if cause_impact_ms is None else cause_impact_ms
    return cost is not None and cost >= EXPLAINS_SHARE * symptom.impact_ms


def settle(f: Finding) -> Finding:
    """`f`, as info when it names a latency cause and its measured impact is about 0 ms."""
    if f.negligible and f.cause is not None and f.cause.spec.kind == Kind.LATENCY and f.severity != Severity.INFO:
        return dataclasses.replace(f, severity=Severity.INFO)
    return f


def _groups(findings: Sequence[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """(primary, supporting) pairs in a deterministic order; every finding is in exactly one."""
    ranked = rank(findings)
    position = {id(f): i for i, f in enumerate(ranked)}
    by_cause: dict[Cause, list[Finding]] = {}
    for f in ranked:
        if f.cause is not None:
            by_cause.setdefault(f.cause, []).append(f)
    causes: list[tuple[Finding, list[Finding]]] = []
    for members in by_cause.values():
        # a checklist finding carries the ranking over a restatement, one that measured the cause over one
        # that located it from a symptom, then the best ranked one
        primary = min(members, key=lambda f: (f.restatement, f.located, position[id(f)]))
        causes.append((primary, [f for f in members if f is not primary]))
    causes = _fold_consequences(causes)
    causes.sort(key=lambda g: rank_key(_combined(*g)))
    # what each cause costs by its own measurements, before any symptom joins it
    costs = [_impact(g) for g in causes]
    rest: list[tuple[Finding, list[Finding]]] = []
    for f in ranked:
        if f.cause is not None:
            continue
        home = None
        if f.symptom is not None:
            home = next((g for g, cost in zip(causes, costs) if explains(g[0], f, cost)), None)
        if home is None:
            rest.append((f, []))
        else:
            home[1].append(f)
    return causes + rest


def _fold_consequences(groups: list[tuple[Finding, list[Finding]]]) -> list[tuple[Finding, list[Finding]]]:
    """`groups` with each consequence's group folded under the group of the cause that brings it about."""
    home: dict[Cause, tuple[Finding, list[Finding]]] = {g[0].cause: g for g in groups if g[0].cause is not None}
    out = []
    for group in groups:
        primary = group[0]
        parent = next((home[c] for c, follows in CONSEQUENCES.items()
                       if primary.cause in follows and c in home), None)
        if (parent is None or primary.category == "input" or parent[0].severity.rank > primary.severity.rank
                or any(f.category == "input" for f in group[1])):
            out.append(group)
        else:
            parent[1].extend((primary, *group[1]))
    return out


def _impact(group: tuple[Finding, list[Finding]]) -> float | None:
    impacts = [f.impact_ms for f in (group[0], *group[1]) if f.impact_ms is not None]
    return max(impacts) if impacts else None


def _combined(primary: Finding, supporting: Sequence[Finding]) -> Finding:
    """`primary` with `supporting` folded under it: the group's worst severity and largest impact."""
    if not supporting:
        return primary
    members = (primary, *supporting)
    severity = min((f.severity for f in members), key=lambda s: s.rank)
    impact, basis = primary.impact_ms, primary.impact_basis
    for f in supporting:
        if f.impact_ms is not None and (impact is None or f.impact_ms > impact):
            impact, basis = f.impact_ms, f"from {f.check_id}: {f.impact_basis}"
    return dataclasses.replace(primary, severity=severity, impact_ms=impact, impact_basis=basis,
                               frequency=_paid(members), supporting=tuple(rank(supporting)),
                               own_severity=primary.severity, own_impact_ms=primary.impact_ms)


def _paid(members: Sequence[Finding]) -> Frequency:
    """How often a group is paid: the most frequent way any member with a cost is paid (a cold start that
    one member shows recurring after idle recurs), else the primary's."""
    costed = [f.paid for f in members if f.impact_ms is not None] or [members[0].paid]
    return max(costed, key=lambda p: (p.recurs, p.share))


def fold(findings: Sequence[Finding]) -> list[Finding]:
    """The findings as the report lists them: each cause once, its symptoms folded under it, ranked."""
    return rank([_combined(p, s) for p, s in _groups([settle(f) for f in findings])])


def fold_outcomes(outcomes: Sequence[CheckOutcome]) -> list[Finding]:
    """`fold` over every check's findings; each outcome then holds the objects the report lists.

    A check whose finding folded under another check's keeps its status (it found something) and
    says where the finding is listed, so the checks' tally agrees with the report.
    """
    for outcome in outcomes:
        outcome.findings = [settle(f) for f in outcome.findings]
    groups = _groups([f for o in outcomes for f in o.findings])
    final: dict[int, Finding] = {}
    home: dict[int, Finding] = {}
    for primary, supporting in groups:
        combined = _combined(primary, supporting)
        final[id(primary)] = combined
        for f in supporting:
            home[id(f)] = combined
    for outcome in outcomes:
        outcome.findings = [final.get(id(f), f) for f in outcome.findings]
        notes = []
        for f in outcome.findings:
            top = home.get(id(f))
            if top is not None:
                note = f"listed under {top.check_id}" + (f" ({top.cause.value})" if top.cause else "")
                if note not in notes:
                    notes.append(note)
        if notes:
            outcome.reason = "; ".join(notes)
    return rank(list(final.values()))
