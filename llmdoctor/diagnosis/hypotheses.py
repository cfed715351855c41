"""The candidate causes of high latency the doctor tells apart.

Each hypothesis is a cause of the closed set (`llmdoctor.causes`): its id, title and fix are the
cause's (`CauseSpec.fix`, the one remedy a checklist check of the same cause shows too), so a confirmed
hypothesis and a checklist finding of the same cause are one cause in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.causes import Cause, Fix
from llmdoctor.diagnosis.scoring import PRIOR, PRIOR_SECONDARY

__all__ = ["Hypothesis", "HYPOTHESES", "BY_ID"]


@dataclass(frozen=True)
class Hypothesis:
    """A cause with its prior probability; its fix is the cause's."""

    cause: Cause
    prior: float = PRIOR

    def __post_init__(self) -> None:
        self.cause.fix  # noqa: B018 - a hypothesis whose cause has no fix fails when the table is built

    @property
    def id(self) -> Cause:
        """The cause (its value is the id the JSON uses)."""
        return self.cause

    @property
    def title(self) -> str:
        """The cause's title."""
        return self.cause.label

    @property
    def fix(self) -> Fix:
        """The cause's remedy (every hypothesis has one: checked when the table is built)."""
        return self.cause.fix


HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis(Cause.QUEUEING),
    Hypothesis(Cause.LONG_PREFILL),
    Hypothesis(Cause.SLOW_DECODE),
    Hypothesis(Cause.COLD_START),
    Hypothesis(Cause.NO_KEEPALIVE),
    Hypothesis(Cause.SLOW_NETWORK),
    Hypothesis(Cause.SERVER_FLOOR),
    Hypothesis(Cause.PREFIX_CACHE_MISS, PRIOR_SECONDARY),
    Hypothesis(Cause.REPLICA_IMBALANCE, PRIOR_SECONDARY),
    Hypothesis(Cause.HOST_PRESSURE, PRIOR_SECONDARY),
    Hypothesis(Cause.KV_CACHE_PRESSURE, PRIOR_SECONDARY),
    Hypothesis(Cause.GATEWAY_OVERHEAD, PRIOR_SECONDARY),
)

BY_ID: dict[Cause, Hypothesis] = {h.cause: h for h in HYPOTHESES}
