"""One diagnosis, start to finish: context → checks → findings → ranked report."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone

from llmdoctor.check import Check
from llmdoctor.checklist.registry import load_registry, select
from llmdoctor.context import Context, Results
from llmdoctor.findings import Finding
from llmdoctor.options import Options
from llmdoctor.probes.catalog import CLIENT_HOST, DIAGNOSIS, DISCOVERY, OUTCOMES
from llmdoctor.redact import redact_output
from llmdoctor.reporting.breakdown import build_breakdown
from llmdoctor.reporting.folding import fold_outcomes
from llmdoctor.reporting.report import Accounting, Report
from llmdoctor.runner import CheckOutcome, Status, run_one, schedule_for
from llmdoctor.target import Target

__all__ = ["diagnose", "Progress", "progress_line"]

Progress = Callable[[str], None]


def diagnose(
    target: Target | None,
    options: Options,
    *,
    selected: Sequence[str] = (),
    ignored: Sequence[str] = (),
    fail_on: str = "warning",
    recorded: Mapping[str, object] | None = None,
    progress: Progress | None = None,
    before_send: Callable[[], None] | None = None,
    deadline_at: float | None = None,
) -> tuple[Report, Context]:
    """Run the checklist against `target` (or on `recorded` measurements) and rank the findings.

    The probes the selected checks declare are measured first, in the catalog's order,
    then every check runs on the results. Ctrl-C stops the measuring and returns the
    partial report, marked ``interrupted``, with the checks whose measurements were complete.
    `deadline_at`: the ``perf_counter()`` instant ``--deadline`` ends (default: the deadline
    counted from now). Raises `ClientSetupError` when the probe client cannot be built.
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    registry = load_registry()
    checks: list[type[Check]] = select(registry.checks, selected, ignored)

    def on_probe(name: str, title: str) -> None:
        if progress:
            progress(progress_line(title, ctx.requests_sent))

    if target is not None and recorded is None:
        _register_secrets(options)
    ctx = Context(target=target, options=options, recorded=recorded, on_probe=on_probe, before_send=before_send,
                  deadline_at=deadline_at)
    outcomes: list[CheckOutcome] = [
        CheckOutcome(e.name, e.name, "plugin failed to load", "endpoint", Status.CRASHED, reason=e.reason)
        for e in registry.errors
    ]
    interrupted = False
    try:
        try:
            ctx.measure(schedule_for(checks, ctx))
        except KeyboardInterrupt:
            interrupted = True
        for check in checks:
            if interrupted and not ctx.complete(check.reads(options).all):
                continue  # judged only on measurements Ctrl-C did not cut short
            if progress:
                progress(f"Checking {check.id}: {check.title}…")
            outcomes.append(run_one(check, ctx))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        ctx.close()
    results = ctx.results()
    outcomes = [_redacted_outcome(o) for o in outcomes]
    for status in ctx.statuses():  # skip reasons quote exceptions and URLs: one redaction pass
        status.reason = redact_output(status.reason)
    findings = fold_outcomes(outcomes)
    ledger = results.get(OUTCOMES)
    report = Report(
        endpoint=target.base_url if target else "(recorded)",
        model=_model(results, target),
        started_at=started_at,
        duration_ms=(time.perf_counter() - started) * 1000,
        requests_sent=ctx.requests_sent,
        raw_connections=ctx.raw_connections,
        request_budget=options.request.max_requests,
        findings=findings,
        checks=outcomes,
        probes=ctx.statuses(),
        breakdown=build_breakdown(results, options),
        fail_on=fail_on,
        replayed=recorded is not None,
        interrupted=interrupted,
        diagnosis=results.get(DIAGNOSIS),
        accounting=Accounting.of(ledger) if ledger is not None else None,
        client_host=results.get(CLIENT_HOST),
    )
    return report, ctx


def progress_line(title: str, sent: int) -> str:
    """What the progress line says while a probe measures: ``Measuring the first request… · 1 request sent so far``."""
    so_far = "no request sent yet" if not sent else f"{sent:,} request{'' if sent == 1 else 's'} sent so far"
    return f"Measuring {title}… · {so_far}"


def _redacted_finding(f: Finding) -> Finding:
    """`f` with its texts through the process-wide redaction (a check may quote a URL or a server)."""
    return dataclasses.replace(
        f, title=redact_output(f.title), message=redact_output(f.message),
        evidence=tuple(dataclasses.replace(e, value=redact_output(e.value)) if isinstance(e.value, str) else e
                       for e in f.evidence),
        supporting=tuple(_redacted_finding(s) for s in f.supporting))


def _redacted_outcome(o: CheckOutcome) -> CheckOutcome:
    o.reason = redact_output(o.reason)
    o.findings = [_redacted_finding(f) for f in o.findings]
    return o


def _register_secrets(options: Options) -> None:
    """The credentials inside the URL options are masked in everything printed from now on."""
    from llmdoctor.redact import register_url_secrets

    register_url_secrets(options.evidence.metrics_url)
    register_url_secrets(options.evidence.gpu_metrics_url)


def _model(results: Results, target: Target | None) -> str | None:
    info = results.get(DISCOVERY)
    if info is not None and info.model:
        return str(info.model)
    return target.model if target else None
