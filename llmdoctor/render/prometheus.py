"""Prometheus rendering: the report as metrics in the text exposition format.

The metric names, types and labels below are a contract for other people's dashboards and alerts,
like the JSON schema: `METRICS` is the one table of them, ``docs/prometheus.md`` documents it and a
test holds the two and the emitted exposition to the same set. Additions bump the minor part of
`METRICS_VERSION`; a rename or a change of meaning bumps the major part.

Every label value comes from a closed set (check ids, categories, severities, causes, statuses,
waterfall phases, percentiles) except ``endpoint``, which is one value per diagnosed endpoint: the
fleet entry's name or the endpoint's display URL (credentials and query string masked). Messages,
evidence and errors never become labels: their cardinality is unbounded and they may quote a
secret. Times are in seconds, as Prometheus's conventions ask.

The text is written by ``prometheus_client`` (a custom `CollectorRegistry` and `generate_latest`),
never by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmdoctor import __version__
from llmdoctor.findings import Finding
from llmdoctor.reporting.report import ExitCode, Report
from llmdoctor.runner import Status
from llmdoctor.target import display_url

__all__ = [
    "METRICS_VERSION",
    "METRICS",
    "MetricSpec",
    "EndpointResult",
    "STATUSES",
    "result_for_report",
    "registry_for",
    "render_exposition",
    "render_prometheus",
    "phase_label",
]

# major.minor: the minor part grows with added metrics or labels, the major part changes when a
# metric or label is renamed, removed or changes meaning.
METRICS_VERSION = "1.0"

#: The values of ``llmdoctor_status``'s ``status`` label (one series each, 1 for the current one).
STATUSES = ("ok", "warning", "critical", "unknown")
#: The values of ``llmdoctor_checks``'s ``status`` label.
CHECK_STATUSES = (Status.PASSED, Status.FAILED, Status.SKIPPED, Status.CRASHED)
_FINDING_LABELS = ("endpoint", "check_id", "category", "severity", "cause")


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: its name, type, labels (in order) and help text."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


#: The contract: every metric llmdoctor exports (``docs/prometheus.md`` documents each one).
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("llmdoctor_info", "gauge", ("endpoint", "url", "model", "version", "metrics_version"),
               "Always 1: the diagnosed endpoint's display URL and model, llmdoctor's version and the metrics "
               "contract version."),
    MetricSpec("llmdoctor_status", "gauge", ("endpoint", "status"),
               "1 for the run's status (ok, warning, critical, unknown), 0 for the others."),
    MetricSpec("llmdoctor_exit_code", "gauge", ("endpoint",),
               "The run's exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."),
    MetricSpec("llmdoctor_last_run_timestamp_seconds", "gauge", ("endpoint",),
               "When the run started, in seconds since the epoch (absent when the endpoint could not be run)."),
    MetricSpec("llmdoctor_run_duration_seconds", "gauge", ("endpoint",), "How long the run took."),
    MetricSpec("llmdoctor_requests_sent", "gauge", ("endpoint",),
               "Requests the run sent to the endpoint (retries included)."),
    MetricSpec("llmdoctor_request_budget", "gauge", ("endpoint",), "The run's request budget (--max-requests)."),
    MetricSpec("llmdoctor_checks", "gauge", ("endpoint", "status"),
               "Checks by outcome: passed, failed (produced findings), skipped, crashed."),
    MetricSpec("llmdoctor_findings", "gauge", _FINDING_LABELS,
               "Findings of one check with this category, severity and cause (present only while found)."),
    MetricSpec("llmdoctor_finding_impact_seconds", "gauge", _FINDING_LABELS,
               "The latency a finding is estimated to cost; the largest of the check's findings with these "
               "labels (present only for findings that estimate it)."),
    MetricSpec("llmdoctor_phase_seconds", "gauge", ("endpoint", "phase"),
               "The waterfall of the median 'Say ok.' request: the time of each phase (they add up to its total)."),
    # A "quantile" label is reserved for summaries (promtool check metrics says so): "percentile" it is.
    MetricSpec("llmdoctor_ttft_seconds", "gauge", ("endpoint", "percentile"),
               "Time to first token of the warm 'Say ok.' samples (percentile p50 and p90)."),
    MetricSpec("llmdoctor_request_latency_seconds", "gauge", ("endpoint", "percentile"),
               "Total latency of the warm 'Say ok.' samples (percentile p50 and p90)."),
    MetricSpec("llmdoctor_fixed_cost_seconds", "gauge", ("endpoint",),
               "Flat-latency fit: the fixed cost every request pays (the fitted intercept; may be negative)."),
    MetricSpec("llmdoctor_per_token_cost_seconds", "gauge", ("endpoint",),
               "Flat-latency fit: the cost of each output token."),
)


@dataclass(frozen=True)
class EndpointResult:
    """One endpoint as the exporter sees it: its label, its display URL and its report (None: it could not run)."""

    endpoint: str
    url: str
    report: Report | None


def result_for_report(report: Report, name: str | None = None) -> EndpointResult:
    """The result of a single run: labelled with `name`, or the endpoint's display URL."""
    url = display_url(report.endpoint)
    return EndpointResult(endpoint=name or url, url=url, report=report)


def phase_label(name: str) -> str:
    """A waterfall phase name as a label value: ``connection set-up`` → ``connection_set_up``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _epoch(started_at: str) -> float | None:
    try:
        return datetime.fromisoformat(started_at).timestamp()
    except ValueError:
        return None


class _Families:
    """The metric families of one exposition, filled endpoint by endpoint."""

    def __init__(self) -> None:
        self.families = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels)) for m in METRICS}

    def add(self, name: str, labels: Sequence[str], value: float | None) -> None:
        if value is not None:
            self.families[name].add_metric(list(labels), float(value))


def _exit_code(result: EndpointResult) -> int:
    return result.report.exit_code if result.report is not None else ExitCode.UNKNOWN


def _status(result: EndpointResult) -> str:
    return result.report.status if result.report is not None else "unknown"


def _add_findings(out: _Families, endpoint: str, findings: Sequence[Finding]) -> None:
    # One series per label set: several findings of one check with the same labels (LD711's TTFT and
    # total regressions) would otherwise be duplicate series, which the Pushgateway rejects.
    # A finding folded under a cause (a symptom such as LD711's regression, or another finding of the
    # same cause) is exported too, with its own severity and impact and the cause it is listed under,
    # so an alert on a check id still sees it.
    counts: dict[tuple[str, ...], int] = {}
    impacts: dict[tuple[str, ...], float] = {}
    for top in findings:
        cause = top.cause.value if top.cause is not None else ""
        for f in (top, *top.supporting):
            severity, impact = (top.severity, top.impact_ms) if f is top else f.own
            key: tuple[str, ...] = (endpoint, f.check_id, f.category, severity.value, cause)
            counts[key] = counts.get(key, 0) + 1
            if impact is not None:
                impacts[key] = max(impacts.get(key, 0.0), impact / 1000.0)
    for labels, count in counts.items():
        out.add("llmdoctor_findings", labels, count)
        out.add("llmdoctor_finding_impact_seconds", labels, impacts.get(labels))


def _add_report(out: _Families, endpoint: str, report: Report) -> None:
    out.add("llmdoctor_last_run_timestamp_seconds", (endpoint,), _epoch(report.started_at))
    out.add("llmdoctor_run_duration_seconds", (endpoint,), _seconds(report.duration_ms))
    out.add("llmdoctor_requests_sent", (endpoint,), report.requests_sent)
    out.add("llmdoctor_request_budget", (endpoint,), report.request_budget)
    for status in CHECK_STATUSES:
        out.add("llmdoctor_checks", (endpoint, status), sum(1 for o in report.checks if o.status == status))
    _add_findings(out, endpoint, report.findings)
    b = report.breakdown
    if b is None:
        return
    for phase in b.phases:
        out.add("llmdoctor_phase_seconds", (endpoint, phase_label(phase.name)), _seconds(phase.ms))
    for percentile, ttft, total in (("p50", b.ttft_p50_ms, b.total_p50_ms), ("p90", b.ttft_p90_ms, b.total_p90_ms)):
        out.add("llmdoctor_ttft_seconds", (endpoint, percentile), _seconds(ttft))
        out.add("llmdoctor_request_latency_seconds", (endpoint, percentile), _seconds(total))
    out.add("llmdoctor_fixed_cost_seconds", (endpoint,), _seconds(b.fixed_ms))
    out.add("llmdoctor_per_token_cost_seconds", (endpoint,), _seconds(b.per_token_ms))


class _ReportCollector(Collector):
    """A collector over finished results: it measures nothing, it only reads the reports."""

    def __init__(self, results: Sequence[EndpointResult]) -> None:
        self._results = tuple(results)

    def collect(self) -> Iterator[Metric]:
        out = _Families()
        for r in self._results:
            model = (r.report.model if r.report is not None else None) or ""
            out.add("llmdoctor_info", (r.endpoint, r.url, model, __version__, METRICS_VERSION), 1)
            current = _status(r)
            for status in STATUSES:
                out.add("llmdoctor_status", (r.endpoint, status), 1 if status == current else 0)
            out.add("llmdoctor_exit_code", (r.endpoint,), _exit_code(r))
            if r.report is not None:
                _add_report(out, r.endpoint, r.report)
        # A family without samples is left out: its HELP/TYPE lines alone would say nothing.
        yield from (f for f in out.families.values() if f.samples)


def registry_for(results: Sequence[EndpointResult]) -> CollectorRegistry:
    """A registry holding only these results (never the process's default metrics)."""
    labels = [r.endpoint for r in results]
    duplicates = sorted({e for e in labels if labels.count(e) > 1})
    if duplicates:
        raise ValueError(f"two endpoints would share the endpoint label {duplicates[0]!r}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(results))
    return registry


def render_exposition(results: Sequence[EndpointResult]) -> str:
    """One exposition for all `results` (a fleet), distinguished by the ``endpoint`` label."""
    return generate_latest(registry_for(results)).decode("utf-8")


def render_prometheus(report: Report) -> str:
    """The exposition of a single run, labelled with the endpoint's display URL."""
    return render_exposition([result_for_report(report)])
