"""The planner (probe ``diagnosis``): form hypotheses, order the most informative test, repeat.

1. First pass: the baseline (with the first request and GET /v1/models) and, if the backend
   has one, a metrics scrape. `evidence.first_pass` turns them into likelihood ratios.
2. Loop: among the follow-ups in `evidence.FOLLOWUPS` not yet run and applicable here, keep
   those worth at least `MIN_BITS` of expected information that fit the remaining budget
   (``--budget requests=N,seconds=S``, and the run's ``--max-requests``); order the one with
   the most bits per unit of cost (a probe the run's checklist measures costs nothing: the
   diagnosis runs after every other probe of the schedule);
   read its outcome; update. Stop when a cause is confirmed, when nothing informative fits
   the budget, or when no test is left that could change the picture.
3. The fixed-overhead hypothesis is a diagnosis of exclusion: it is confirmed only once the
   causes that look the same from outside (queueing, slow prefill, slow network) are refuted.

Every decision reads measurements only (never the clock), and the costs charged are the
declared ones, so replaying the recorded measurements gives the same diagnosis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from llmdoctor.causes import Cause
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts, FollowUpTest, Seen, facts_from, first_pass, symptom
from llmdoctor.diagnosis.hypotheses import BY_ID, HYPOTHESES
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState, HypothesisStatus, Observation, Step, Update
from llmdoctor.diagnosis.scoring import CONFIRM, MIN_BITS, cost_units, expected_bits, status, update
from llmdoctor.probes.catalog import BASELINE, DIAGNOSIS, SERVER_METRICS
from llmdoctor.probes.contract import AnyProbe

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["diagnose_followups", "restatus", "EXCLUSION_RIVALS", "EXPLAINED_BY"]

#: The fixed-overhead floor is confirmed only when these are refuted.
EXCLUSION_RIVALS: tuple[Cause, ...] = (Cause.QUEUEING, Cause.LONG_PREFILL, Cause.SLOW_NETWORK)
#: A hypothesis is not confirmed while one that explains the same observations is: requests waiting for
#: KV blocks are KV pressure showing, a slow replica makes load-dependent and high latencies of its own.
EXPLAINED_BY: dict[Cause, tuple[Cause, ...]] = {
    Cause.QUEUEING: (Cause.KV_CACHE_PRESSURE, Cause.REPLICA_IMBALANCE),
    Cause.SERVER_FLOOR: (Cause.REPLICA_IMBALANCE,),
}


def _known(causes: Iterable[Cause], where: str) -> None:
    """Every cause a rule names is a hypothesis of the table (checked at import: a typo fails at once)."""
    unknown = sorted(repr(c) for c in causes if Cause(c) not in BY_ID)
    if unknown:
        raise ImportError(f"{where} names causes that are no hypothesis: {', '.join(unknown)}")


_known([c for f in FOLLOWUPS for c in f.separates], "evidence.FOLLOWUPS")
_known([*EXCLUSION_RIVALS, *EXPLAINED_BY, *(c for v in EXPLAINED_BY.values() for c in v)], "planner")


def _status(d: Diagnosis, h: HypothesisState) -> HypothesisStatus:
    s = status(h.probability)
    if s is HypothesisStatus.CONFIRMED and h.id is Cause.SERVER_FLOOR:
        rivals = [d.get(r) for r in EXCLUSION_RIVALS]
        if any(r is not None and r.status is not HypothesisStatus.REFUTED for r in rivals):
            return HypothesisStatus.OPEN
    if s is HypothesisStatus.CONFIRMED and any(
            status(x.probability) is HypothesisStatus.CONFIRMED
            for x in (d.get(e) for e in EXPLAINED_BY.get(h.id, ())) if x is not None):
        return HypothesisStatus.OPEN
    return s


def restatus(d: Diagnosis) -> None:
    """Each hypothesis's status from its probability, the exclusion rule and `EXPLAINED_BY`."""
    # Rivals first, so the exclusion rule sees their final status.
    for h in sorted(d.hypotheses, key=lambda h: (h.id is Cause.SERVER_FLOOR, h.id in EXPLAINED_BY)):
        h.status = _status(d, h)


def _apply(d: Diagnosis, seen: list[Seen], source: str, impacts: dict[Cause, tuple[float, str]]) -> list[Update]:
    """Update the hypotheses with what was seen and their impacts.

    Evidence or an impact about a cause that is no hypothesis of `d` raises (`Diagnosis.state`): a
    rule naming the wrong cause is a bug, and skipping it would lose the evidence in silence.
    """
    updates = []
    for hyp, lr, text in seen:
        h = d.state(hyp)
        before = h.probability
        h.probability = update(before, lr)
        h.evidence.append(Observation(h.id, source, text, lr))
        updates.append(Update(h.id, before, h.probability, lr, text))
    for hyp, (ms, basis) in impacts.items():
        h = d.state(hyp)
        if ms > 0:
            h.impact_ms, h.impact_basis = round(ms, 1), basis
    restatus(d)
    return updates


def _bits(d: Diagnosis, f: FollowUpTest) -> float:
    total = 0.0
    for hyp, (sens, fpr) in f.separates.items():
        h = d.get(hyp)
        if h is not None and h.status is HypothesisStatus.OPEN:
            total += expected_bits(min(h.probability, CONFIRM - 1e-6), sens, fpr)
    return total


def _measured(ctx: Context, f: FollowUpTest) -> AnyProbe | None:
    """A probe of the run's schedule that answers `f` (so it is free), else None."""
    if f.answered_by_checklist(ctx):
        return f.probe  # it reads what the checklist measured and sends nothing
    for probe in f.sources():
        if ctx.scheduled(probe) and ctx.optional(probe) is not None:
            return probe
    return None


def _budget_left(ctx: Context) -> int | None:
    if ctx.recorded is not None or ctx.target is None:
        return None
    try:
        return int(ctx.client.budget_left)
    except Exception:  # noqa: BLE001 - no client: no extra limit
        return None


def _reason(d: Diagnosis, f: FollowUpTest) -> str:
    states = [(h, d.get(h)) for h in f.separates]
    parts = [f"{BY_ID[h].title} {s.probability:.0%}" for h, s in states
             if s is not None and s.status is HypothesisStatus.OPEN]
    return "separates " + ", ".join(parts)


def diagnose_followups(ctx: Context) -> Diagnosis:
    """The ``diagnosis`` probe: first pass, then follow-up tests within the budget."""
    from llmdoctor.context import ProbeUnavailable

    options = ctx.options
    off = DIAGNOSIS.off_reason(options)
    if off:
        raise ProbeUnavailable(off)
    ctx.get(BASELINE)  # nothing to diagnose without a working request (raises with the reason)
    ctx.optional(SERVER_METRICS)
    facts: Facts = facts_from(ctx)
    d = Diagnosis(symptom=symptom(facts), budget_requests=options.diagnosis.followup_requests,
                  budget_s=options.diagnosis.followup_seconds)
    d.hypotheses = [HypothesisState(h.cause, h.title, h.prior, h.prior, HypothesisStatus.OPEN) for h in HYPOTHESES]
    seen, impacts = first_pass(facts)
    _apply(d, seen, "first pass (first request, baseline, GET /v1/models, metrics)", impacts)
    for h in d.hypotheses:
        h.after_first_pass = h.probability
    done: set[str] = set()
    while True:
        if d.confirmed:
            d.stop_reason = f"confirmed: {', '.join(h.title for h in d.confirmed)}"
            break
        global_left = _budget_left(ctx)
        worth, fitting = [], []
        for order, f in enumerate(FOLLOWUPS):
            if f.probe.name in done:
                continue
            bits = _bits(d, f)
            if bits < MIN_BITS:
                continue
            free = _measured(ctx, f)
            why_not = None if free else f.unmet(ctx)
            if why_not:
                continue
            requests, seconds = (0, 0.0) if free else f.cost(facts, options)
            worth.append(f)
            if d.spent_requests + requests > d.budget_requests or d.spent_s + seconds > d.budget_s:
                continue
            if global_left is not None and requests > global_left:
                continue
            time_left = ctx.time_left() if ctx.recorded is None else None
            if time_left is not None and seconds > time_left:
                continue  # --deadline: not enough time left for this test
            fitting.append((-bits / cost_units(requests, seconds), requests, order, f, free, requests, seconds, bits))
        if not worth:
            d.stop_reason = "no test left that could change the picture"
            break
        if not fitting:
            d.stop_reason = (f"budget spent ({d.spent_requests}/{d.budget_requests} requests, "
                             f"{d.spent_s:.1f}/{d.budget_s:g} s) with tests left to order")
            break
        _, _, _, f, free, requests, seconds, bits = min(fitting, key=lambda t: t[:3])
        done.add(f.probe.name)
        step = Step(f.probe.name, f.title, _reason(d, f), requests, round(seconds, 2), round(bits, 3))
        if free:
            step.title += " (already measured by the checklist)"
        try:
            seen, impacts = f.outcome(ctx, facts, free)
        except ProbeUnavailable as exc:
            step.ran, step.result = False, f"could not run: {exc.reason}"
            d.steps.append(step)
            continue
        d.spent_requests += requests
        d.spent_s = round(d.spent_s + seconds, 2)
        step.updates = _apply(d, seen, f.probe.name, impacts)
        step.result = "; ".join(dict.fromkeys(u.text for u in step.updates)) or "no clear outcome"
        d.steps.append(step)
    for h in d.hypotheses:
        h.probability = round(h.probability, 4)
        h.after_first_pass = round(h.after_first_pass, 4)
    return d
