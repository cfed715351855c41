"""Findings: what a check reports, as plain frozen data with no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from llmdoctor.causes import Cause, Fix, Frequency, Symptom

__all__ = ["Severity", "Confidence", "Evidence", "Fix", "Finding", "Frequency", "NEGLIGIBLE_MS"]


class Severity(str, Enum):
    """How bad a finding is; the order drives ranking and the exit code."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the most severe."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


class Confidence(str, Enum):
    """How sure the check is that the finding is real."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def weight(self) -> float:
        """Factor applied to `impact_ms` when ranking."""
        return _CONFIDENCE_WEIGHT[self]


_CONFIDENCE_WEIGHT = {Confidence.HIGH: 1.0, Confidence.MEDIUM: 0.7, Confidence.LOW: 0.4}


#: A measured impact below this is no cost at all: the report shows such a finding as info, under
#: "Also noted", never ranked above a costly one.
NEGLIGIBLE_MS = 1.0


@dataclass(frozen=True)
class Evidence:
    """One measured fact behind a finding.

    `sensitive` values are masked by every renderer; `source` names the probe,
    file or URL path the value came from. A `statistic` (a p-value, a likelihood
    ratio) is for tooling: the JSON carries it, the reports people read do not.
    """

    label: str
    value: str | float | int | None
    unit: str = ""
    source: str = ""
    sensitive: bool = False
    statistic: bool = False


@dataclass(frozen=True)
class Finding:
    """A diagnosis produced by one check.

    Checks fill in the clinical fields; the runner stamps `check_id`,
    `category` and `docs` so a check never has to repeat its own metadata.
    """

    severity: Severity
    confidence: Confidence
    title: str
    message: str
    fix: Fix
    impact_ms: float | None = None
    impact_basis: str = ""
    evidence: tuple[Evidence, ...] = field(default_factory=tuple)
    #: How often the traffic pays `impact_ms` (every check that sets an impact states it); None
    #: falls back to the default of the finding's cause or symptom (`paid`).
    frequency: Frequency | None = None
    #: The cause this finding reports, from the closed set of `llmdoctor.causes` (a plugin may pass its
    #: id as a string: it is checked against the set). Shared by the checklist checks and the
    #: differential diagnosis's hypotheses, so one cause is listed once.
    cause: Cause | None = None
    #: The symptom this finding measures (a high floor, a large fixed cost) when it names no cause:
    #: it folds under a cause that explains it.
    symptom: Symptom | None = None
    #: True for a finding that restates a cause from a synthesis of other measurements (the
    #: differential diagnosis): a checklist finding of the same cause carries the ranking.
    restatement: bool = False
    #: True for a finding whose cause is placed from where the server's own clock puts a symptom it
    #: measured (LD702: the fixed cost, in one phase), not measured itself: a finding that measured
    #: the cause (LD409's proxy, through and around it) carries the ranking.
    located: bool = False
    check_id: str = ""
    category: str = ""
    docs: str = ""
    #: Set by the report: the findings folded under this one (its symptoms, the other findings of
    #: its cause). `severity` and `impact_ms` are then the group's; `own_severity` and
    #: `own_impact_ms` keep this finding's own.
    supporting: tuple[Finding, ...] = ()
    own_severity: Severity | None = None
    own_impact_ms: float | None = None

    def __post_init__(self) -> None:
        if self.cause is not None and not isinstance(self.cause, Cause):
            object.__setattr__(self, "cause", Cause(self.cause) if self.cause else None)
        if self.symptom is not None and not isinstance(self.symptom, Symptom):
            object.__setattr__(self, "symptom", Symptom(self.symptom) if self.symptom else None)
        if self.frequency is not None and not isinstance(self.frequency, Frequency):
            object.__setattr__(self, "frequency", Frequency(self.frequency))
        if self.cause is not None and self.symptom is not None:
            raise ValueError(f"a finding names a cause or a symptom, not both ({self.cause.value}, "
                             f"{self.symptom.value})")

    @property
    def paid(self) -> Frequency:
        """How often the impact is paid: the finding's own `frequency`, else its cause's or symptom's default."""
        if self.frequency is not None:
            return self.frequency
        if self.cause is not None:
            return self.cause.spec.frequency
        if self.symptom is not None:
            return self.symptom.frequency
        return Frequency.EVERY_REQUEST

    @property
    def negligible(self) -> bool:
        """True when the impact was measured and is about 0 ms."""
        return self.impact_ms is not None and abs(self.impact_ms) < NEGLIGIBLE_MS

    @property
    def cost_per_request_ms(self) -> float | None:
        """The expected cost per request, ``impact_ms × share`` (None when not estimated)."""
        if self.impact_ms is None:
            return None
        return max(0.0, self.impact_ms) * self.paid.share

    @property
    def own(self) -> tuple[Severity, float | None]:
        """This finding's own severity and impact, before anything folded under it."""
        if self.own_severity is None:
            return self.severity, self.impact_ms
        return self.own_severity, self.own_impact_ms
