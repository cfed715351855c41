"""The diagnosis as plain data: hypotheses, the tests ordered, and each cause's chain.

Serialisable dataclasses (saved with the measurements, rendered by every format). The
scoring they record is explained in `llmdoctor.diagnosis.scoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from llmdoctor.causes import Cause

__all__ = ["Observation", "Update", "Step", "HypothesisStatus", "HypothesisState", "ChainLink", "Diagnosis"]


class HypothesisStatus(str, Enum):
    """Where a hypothesis stands (closed set; the value is the JSON ``status``)."""

    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    OPEN = "open"

    def __str__(self) -> str:
        return self.value

    @property
    def verdict(self) -> str:
        """How a conclusion says it: ``confirmed``, ``ruled out``, ``not settled``."""
        return _VERDICT[self]


_VERDICT = {HypothesisStatus.CONFIRMED: "confirmed", HypothesisStatus.REFUTED: "ruled out",
            HypothesisStatus.OPEN: "not settled"}


@dataclass
class Observation:
    """One piece of evidence about one hypothesis: what was seen and its likelihood ratio."""

    hypothesis: Cause
    source: str
    text: str
    likelihood_ratio: float

    def __post_init__(self) -> None:
        self.hypothesis = Cause(self.hypothesis)  # an id that names no cause is an error here


@dataclass
class Update:
    """How a test moved one hypothesis: probability before and after."""

    hypothesis: Cause
    before: float
    after: float
    likelihood_ratio: float
    text: str

    def __post_init__(self) -> None:
        self.hypothesis = Cause(self.hypothesis)


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
    """A candidate cause with its current probability, status and evidence.

    `id` is the cause (the field keeps the name the JSON and the recordings use).
    """

    id: Cause
    title: str
    prior: float
    probability: float
    status: HypothesisStatus
    evidence: list[Observation] = field(default_factory=list)
    impact_ms: float | None = None
    impact_basis: str = ""
    #: Probability after the first pass (before any follow-up test).
    after_first_pass: float = 0.0

    def __post_init__(self) -> None:
        self.id = Cause(self.id)  # an id that names no cause is an error here, not a hypothesis never met
        self.status = HypothesisStatus(self.status)

    @property
    def cause(self) -> Cause:
        """The cause this hypothesis is about."""
        return self.id


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

    def get(self, cause: Cause) -> HypothesisState | None:
        """The hypothesis about `cause`, if the diagnosis considered it (not every cause is a hypothesis)."""
        cause = Cause(cause)  # a string that names no cause is an error, not a miss
        return next((h for h in self.hypotheses if h.id is cause), None)

    def state(self, cause: Cause) -> HypothesisState:
        """The hypothesis about `cause`; `KeyError` when the diagnosis does not consider it.

        Evidence about a cause that is no hypothesis here is a bug of the rules, never dropped in silence.
        """
        h = self.get(cause)
        if h is None:
            raise KeyError(f"{cause!r} is not a hypothesis of this diagnosis "
                           f"({', '.join(x.id.value for x in self.hypotheses)})")
        return h

    @property
    def confirmed(self) -> list[HypothesisState]:
        """Confirmed causes, most probable (then largest impact) first."""
        found = [h for h in self.hypotheses if h.status is HypothesisStatus.CONFIRMED]
        return sorted(found, key=lambda h: (-h.probability, -(h.impact_ms or 0.0), h.id))

    @property
    def refuted(self) -> list[HypothesisState]:
        """Hypotheses ruled out, in table order."""
        return [h for h in self.hypotheses if h.status is HypothesisStatus.REFUTED]

    @property
    def open(self) -> list[HypothesisState]:
        """Hypotheses neither confirmed nor refuted, most probable first."""
        return sorted((h for h in self.hypotheses if h.status is HypothesisStatus.OPEN),
                      key=lambda h: (-h.probability, h.id))

    def chain(self, cause: Cause) -> list[ChainLink]:
        """symptom → hypotheses → test ordered → result → conclusion, for one hypothesis."""
        h = self.get(cause)
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
            mine = [u for u in step.updates if u.hypothesis is cause]
            if not mine:
                continue
            links.append(ChainLink("test", f"{step.title} ({step.cost_requests} requests, ~{step.cost_s:.1f} s): "
                                           f"{step.reason}"))
            for u in mine:
                links.append(ChainLink("result", f"{u.text} → {h.title} {u.before:.0%} → {u.after:.0%}"))
        verdict = h.status.verdict
        impact = f"; costs about {h.impact_ms:,.0f} ms ({h.impact_basis})" if h.impact_ms else ""
        links.append(ChainLink("conclusion", f"{h.title}: {verdict} (p = {h.probability:.2f}){impact}"))
        return links
