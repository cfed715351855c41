"""The report model: what one run found, ranked. It never renders itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmdoctor.context import ProbeStatus
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.findings import Finding, Severity
from llmdoctor.runner import CheckOutcome

__all__ = [
    "SCHEMA_VERSION",
    "ExitCode",
    "Phase",
    "Breakdown",
    "Report",
    "rank",
    "rank_key",
    "exit_code_for",
]

# Bump the major part when a field changes meaning or disappears; the minor part for additions.
SCHEMA_VERSION = "1.5"


class ExitCode:
    """Monitoring-plugin convention (Nagios/Icinga/Sensu)."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass
class Phase:
    """One segment of the latency waterfall."""

    name: str
    ms: float
    note: str = ""


@dataclass
class Breakdown:
    """Where the time of one typical request goes."""

    label: str
    total_ms: float
    phases: list[Phase] = field(default_factory=list)
    new_connection_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    total_p50_ms: float | None = None
    total_p90_ms: float | None = None
    fixed_ms: float | None = None
    per_token_ms: float | None = None
    typical_output_tokens: int | None = None
    #: The output-length sweep behind the fit: (output tokens, total ms) per request (schema 1.1).
    sweep_points: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Report:
    """The outcome of one `check` run."""

    endpoint: str
    model: str | None
    started_at: str
    duration_ms: float
    requests_sent: int
    request_budget: int
    findings: list[Finding]
    checks: list[CheckOutcome]
    probes: list[ProbeStatus]
    raw_connections: int = 0
    breakdown: Breakdown | None = None
    fail_on: str = "warning"
    replayed: bool = False
    interrupted: bool = False
    #: The differential diagnosis (hypotheses, follow-up tests, chains); None when it did not run (1.2).
    diagnosis: Diagnosis | None = None
    schema_version: str = SCHEMA_VERSION

    @property
    def worst(self) -> Severity | None:
        """The most severe finding, if any."""
        return min((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    @property
    def exit_code(self) -> int:
        """0 OK, 1 WARNING, 2 CRITICAL, as gated by `fail_on`.

        An interrupted run (Ctrl-C) is incomplete: 3 UNKNOWN, unless it already found
        something critical (2). States rank OK < WARNING < UNKNOWN < CRITICAL, as Icinga ranks
        them when it aggregates.
        """
        code = exit_code_for(self.findings, self.fail_on)
        if self.interrupted and code != ExitCode.CRITICAL:
            return ExitCode.UNKNOWN
        return code

    @property
    def status(self) -> str:
        """``ok``, ``warning``, ``critical`` (the worst finding that counts) or ``unknown`` (interrupted)."""
        return {ExitCode.OK: "ok", ExitCode.WARNING: "warning", ExitCode.CRITICAL: "critical",
                ExitCode.UNKNOWN: "unknown"}[self.exit_code]


def exit_code_for(findings: Sequence[Finding], fail_on: str = "warning") -> int:
    """Exit code for a set of findings; with ``fail_on="critical"`` warnings exit 0."""
    severities = {f.severity for f in findings}
    if Severity.CRITICAL in severities:
        return ExitCode.CRITICAL
    if Severity.WARNING in severities and fail_on == "warning":
        return ExitCode.WARNING
    return ExitCode.OK


def rank_key(f: Finding) -> tuple[int, int, bool, float, str, str]:
    """Sort key of a finding: what it costs the traffic.

    Severity first; then by what is known of the cost: a measured cost, then a cost not estimated,
    then a ~0 ms one; among measured costs a recurring one before a one-time one (paid once per cold
    start, with no sign that cold starts recur); then the expected cost per request
    (`Finding.cost_per_request_ms`: impact × the share of requests that pay it; a one-time cost by its
    impact) weighted by confidence; then checklist order. A finding with others folded under it ranks
    at least where the best ranked of them would.
    """
    known = 2 if f.negligible else 1 if f.impact_ms is None else 0
    recurs = f.paid.recurs
    cost = (f.cost_per_request_ms if recurs else f.impact_ms) or 0.0
    own = (f.severity.rank, known, not recurs, -max(0.0, cost) * f.confidence.weight, f.check_id, f.title)
    return min([own, *(rank_key(s) for s in f.supporting)])


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """Deterministic order by what each finding costs the traffic (`rank_key`)."""
    return sorted(findings, key=rank_key)
