"""The report model: what one run found, ranked. It never renders itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmdoctor.analysis.failures import counts_as_trouble
from llmdoctor.context import ProbeStatus
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.findings import Finding, Severity
from llmdoctor.measurements.client_host import ClientHostResult
from llmdoctor.measurements.ledger import ProbeTally, RequestLedger, RequestOutcome
from llmdoctor.measurements.timing import ErrorKind
from llmdoctor.runner import CheckOutcome, Status

__all__ = [
    "SCHEMA_VERSION",
    "Accounting",
    "ExitCode",
    "Phase",
    "Breakdown",
    "Report",
    "rank",
    "rank_key",
    "exit_code_for",
]

# Bump the major part when a field changes meaning or disappears; the minor part for additions.
SCHEMA_VERSION = "1.10"


class ExitCode:
    """Monitoring-plugin convention (Nagios/Icinga/Sensu)."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass
class Phase:
    """One segment of the latency waterfall, with the clock that measured it (schema 1.6).

    `clock`: ``client`` (the probe client's own), ``server_header`` / ``server_body`` (the
    server's report for the request), ``server_metrics`` (its histograms' means) or ``inferred``
    (computed from others, e.g. the client's time minus the server's); `source` names the header,
    field or metric.
    """

    name: str
    ms: float
    note: str = ""
    clock: str = "client"
    source: str = ""


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
    #: The fit's intervals (about 90%), and why a coefficient is not given (schema 1.5): `fixed_ms` is
    #: None when the fit does not determine it, never a negative fixed cost.
    fixed_interval_ms: tuple[float, float] | None = None
    per_token_interval_ms: tuple[float, float] | None = None
    fit_note: str = ""
    #: The split by the server's clocks (schema 1.6): time in front of the model server (gateways,
    #: balancers, distance), the server's own time, the first token held on the way; None where no
    #: server clock anchors the split (`split_notes` say why).
    in_front_ms: float | None = None
    server_ms: float | None = None
    held_ms: float | None = None
    split_sources: list[str] = field(default_factory=list)
    split_notes: list[str] = field(default_factory=list)
    #: How to get the server's own per-request clocks when it could send them and did not (schema 1.8).
    clock_hint: str = ""


@dataclass
class Accounting:
    """How the run's requests ended: all of them, the generation requests, and each probe's (schema 1.5)."""

    overall: ProbeTally
    generation: ProbeTally
    by_probe: list[ProbeTally]
    #: Generation requests that ended in endpoint trouble (a refusal, a server error, a timeout, a cut
    #: or empty answer; a 400 the probes handle does not count): a run with any is never OK.
    troubled_generations: int = 0
    #: Requests of any probe that never got an answer: refused, timed out, no TLS, no DNS (schema
    #: 1.7). A run with any is never OK either, even when the checks that would say so were not
    #: selected (``--select LD3`` against a server that is down).
    unanswered: int = 0
    #: Every request of the run in the order sent, with the ``X-Request-Id`` and ``traceparent`` it
    #: carried (schema 1.8): how an operator finds our requests in the server's logs and traces.
    requests: list[RequestOutcome] = field(default_factory=list)

    @classmethod
    def of(cls, ledger: RequestLedger) -> Accounting:
        """The accounting of a run's request ledger."""
        return cls(ledger.overall(), ledger.overall(generation_only=True), ledger.by_probe(),
                   sum(1 for r in ledger.generations if counts_as_trouble(r)),
                   sum(1 for r in ledger.requests if r.error in _NO_ANSWER), list(ledger.requests))

    @property
    def troubled(self) -> bool:
        """Whether requests failed in a way that keeps the run from being OK."""
        return bool(self.troubled_generations or self.unanswered)


#: The errors of a request that got no answer at all (the endpoint down, unreachable or silent).
_NO_ANSWER = frozenset({ErrorKind.REFUSED, ErrorKind.CONNECT_TIMEOUT, ErrorKind.READ_TIMEOUT, ErrorKind.TLS,
                        ErrorKind.DNS})


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
    #: How every request ended (1.5); None when not recorded (replay of an older recording, no request).
    accounting: Accounting | None = None
    #: The client host's load while probing: llmdoctor's own lag, CPU pressure (1.5).
    client_host: ClientHostResult | None = None
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
        them when it aggregates. Generation requests that failed, and requests of any probe that got
        no answer, make the run at least a WARNING, even when no selected check reported them: a run
        whose requests failed is never OK. A check that crashed (or whose plugin failed to load) leaves
        the checklist incomplete, like an interruption: 3 UNKNOWN unless something critical was found,
        never OK.
        """
        code = exit_code_for(self.findings, self.fail_on)
        if (code == ExitCode.OK and self.fail_on == "warning" and self.accounting is not None
                and self.accounting.troubled):
            code = ExitCode.WARNING
        incomplete = self.interrupted or any(o.status == Status.CRASHED for o in self.checks)
        if incomplete and code != ExitCode.CRITICAL:
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
