"""The diagnosis as plain data: hypotheses, the tests ordered, and each cause's chain.

Serialisable dataclasses (saved with the measurements, rendered by every format). The
scoring they record is explained in `llmdoctor.diagnosis.scoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Observation", "Update", "Step", "HypothesisState", "ChainLink", "Diagnosis"]


@dataclass
class Observation:
    """One piece of evidence about one hypothesis: what was seen and its likelihood ratio."""

    hypothesis: str
    source: str
    text: str
    likelihood_ratio: float


@dataclass
class Update:
    """How a test moved one hypothesis: probability before and after."""

    hypothesis: str
    before: float
    after: float
    likelihood_ratio: float
    text: str


@dataclass
class Step:
    """A follow-up test the planner ordered, why, what it cost and what it showed."""

    probe: str
    title: str
    reason: str
    cost_requests: int
    cost_s: float
    expected_bits: float
    ran: bool = True
    result: str = ""
    updates: list[Update] = field(default_factory=list)


@dataclass
class HypothesisState:
    """A candidate cause with its current probability, status and evidence."""

    id: str
    title: str
    prior: float
    probability: float
    status: str  # confirmed | refuted | open
    evidence: list[Observation] = field(default_factory=list)
    impact_ms: float | None = None
    impact_basis: str = ""
    #: Probability after the first pass (before any follow-up test).
    after_first_pass: float = 0.0


@dataclass
class ChainLink:
    """One link of a conclusion's chain: ``symptom``, ``hypotheses``, ``test``, ``result``, ``conclusion``."""

    stage: str
    text: str


@dataclass
class Diagnosis:
    """Outcome of the differential diagnosis of one run."""

    symptom: str
    hypotheses: list[HypothesisState] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    budget_requests: int = 0
    budget_s: float = 0.0
    spent_requests: int = 0
    spent_s: float = 0.0
    stop_reason: str = ""

    def get(self, hypothesis_id: str) -> HypothesisState | None:
        """The hypothesis with this id, if considered."""
        return next((h for h in self.hypotheses if h.id == hypothesis_id), None)

    @property
    def confirmed(self) -> list[HypothesisState]:
        """Confirmed causes, most probable (then largest impact) first."""
        found = [h for h in self.hypotheses if h.status == "confirmed"]
        return sorted(found, key=lambda h: (-h.probability, -(h.impact_ms or 0.0), h.id))

    @property
    def refuted(self) -> list[HypothesisState]:
        """Hypotheses ruled out, in table order."""
        return [h for h in self.hypotheses if h.status == "refuted"]

    @property
    def open(self) -> list[HypothesisState]:
        """Hypotheses neither confirmed nor refuted, most probable first."""
        return sorted((h for h in self.hypotheses if h.status == "open"), key=lambda h: (-h.probability, h.id))

    def chain(self, hypothesis_id: str) -> list[ChainLink]:
        """symptom → hypotheses → test ordered → result → conclusion, for one hypothesis."""
        h = self.get(hypothesis_id)
        if h is None:
            return []
        considered = ", ".join(f"{x.title} {x.after_first_pass:.0%}" for x in
                               sorted(self.hypotheses, key=lambda x: (-x.after_first_pass, x.id))
                               if x.after_first_pass >= 0.05)
        links = [ChainLink("symptom", self.symptom),
                 ChainLink("hypotheses", f"after the first pass: {considered or 'none likely'}")]
        first = [o for o in h.evidence if o.source.startswith("first pass")]
        if first:
            links.append(ChainLink("result", "first pass: " + "; ".join(o.text for o in first)))
        for step in self.steps:
            mine = [u for u in step.updates if u.hypothesis == hypothesis_id]
            if not mine:
                continue
            links.append(ChainLink("test", f"{step.title} ({step.cost_requests} requests, ~{step.cost_s:.1f} s): "
                                           f"{step.reason}"))
            for u in mine:
                links.append(ChainLink("result", f"{u.text} → {h.title} {u.before:.0%} → {u.after:.0%}"))
        verdict = {"confirmed": "confirmed", "refuted": "ruled out", "open": "not settled"}[h.status]
        impact = f"; costs about {h.impact_ms:,.0f} ms ({h.impact_basis})" if h.impact_ms else ""
        links.append(ChainLink("conclusion", f"{h.title}: {verdict} (p = {h.probability:.2f}){impact}"))
        return links
