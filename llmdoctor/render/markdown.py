"""Markdown rendering: for an incident ticket or a CI job summary ($GITHUB_STEP_SUMMARY).

Same content and order as the terminal report: the waterfall of a typical
request (as a table), then the findings in rank order (a table, then each
finding's message and fix), then what was skipped or crashed.
"""

from __future__ import annotations

from collections import defaultdict

from llmdoctor import __version__
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.findings import Finding
from llmdoctor.render.common import (
    fit_summary,
    format_evidence,
    format_ms,
    names_line,
    phase_clock,
    requests_line,
    run_lines,
    split_summary,
    supporting_line,
)
from llmdoctor.render.json import MASK
from llmdoctor.report import Breakdown, Report
from llmdoctor.runner import Status

__all__ = ["render_markdown"]

_STATUS_ICON = {"ok": "✅", "warning": "⚠️", "critical": "❌", "unknown": "❔"}


def _esc(text: object) -> str:
    """Escape a value for a Markdown table cell (pipes, newlines, HTML brackets)."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return s.replace("<", "&lt;").replace(">", "&gt;")


_ms = format_ms


def _breakdown(b: Breakdown) -> list[str]:
    lines = [f"## Where the time of a request goes — {_esc(b.label)}: **{_ms(b.total_ms)}**", ""]
    lines += ["| Phase | Time | Share | Clock | Note |", "|---|---:|---:|---|---|"]
    for p in b.phases:
        share = p.ms / b.total_ms if b.total_ms > 0 else 0.0
        clock = phase_clock(p.clock, p.source) or "client"
        lines.append(f"| {_esc(p.name)} | {_ms(p.ms)} | {share:.0%} | {_esc(clock)} | {_esc(p.note)} |")
    lines.append("")
    split = split_summary(b)
    if split is not None:
        lines += [f"**{_esc(split)}**", ""]
    lines.append(
        f"TTFT p50 {_ms(b.ttft_p50_ms)} / p90 {_ms(b.ttft_p90_ms)} · "
        f"total p50 {_ms(b.total_p50_ms)} / p90 {_ms(b.total_p90_ms)}"
        + (f" · a new connection adds {_ms(b.new_connection_ms)}" if b.new_connection_ms is not None else "")
    )
    fit = fit_summary(b)
    if fit is not None:
        lines.append("")
        lines.append(fit)
    return lines + [""]


def _evidence(f: Finding) -> str:
    parts = []
    for e in f.evidence:
        parts.append(format_evidence(e.label, MASK if e.sensitive else e.value, e.unit))
    return "; ".join(parts)


def _finding(rank: int, f: Finding) -> list[str]:
    impact = f"~{_ms(f.impact_ms)} ({f.impact_basis})" if f.impact_ms is not None else "not estimated"
    lines = [
        f"### {rank}. {f.severity.value.upper()} {f.check_id} — {_esc(f.title)}",
        "",
        f"{_esc(f.message)}",
        "",
        f"- **Impact:** {_esc(impact)} · confidence {f.confidence.value}",
    ]
    named = names_line(f)
    if named:
        kind, _, text = named.partition(": ")
        lines.insert(4, f"- **{kind}:** {_esc(text)}")
    if f.evidence:
        lines.append(f"- **Evidence:** {_esc(_evidence(f))}")
    if f.supporting:
        lines.append("- **Supporting findings**, folded under this one:")
        lines += [f"  - {_esc(supporting_line(s))}" for s in f.supporting]
    lines.append(f"- **Fix:** {_esc(f.fix.summary)}")
    lines += [f"  - {_esc(step)}" for step in f.fix.steps]
    lines.append(f"- **Docs:** `{f.docs}`")
    return lines + [""]


def _cause_cell(f: Finding) -> str:
    """The table's cause column: the cause's id (and how many findings fold under it), or the symptom."""
    if f.cause is not None:
        return f"`{f.cause.value}`" + (f" (+{len(f.supporting)} folded)" if f.supporting else "")
    return f"symptom `{f.symptom.value}`" if f.symptom is not None else ""


def _diagnosis(d: Diagnosis) -> list[str]:
    from llmdoctor.render.diagnosis import diagnosis_lines

    lines = ["## Differential diagnosis", "", f"**Symptom:** {_esc(d.symptom)}", ""]
    for kind, text in diagnosis_lines(d):
        if kind == "cause":
            lines += ["", f"**{_esc(text)}**", ""]
        elif kind == "link":
            lines.append(f"1. {_esc(text)}")
        else:
            lines.append(f"_{_esc(text)}_")
    return lines + [""]


def _run(report: Report) -> list[str]:
    """The run itself: the client host's load, how the requests ended."""
    lines = [f"> **{_esc(text)}**" if warn else _esc(text) for text, warn in run_lines(report)]
    return [line for pair in zip(lines, [""] * len(lines)) for line in pair]


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    status = report.status
    where = f"`{report.endpoint}`" + (f" (model `{_esc(report.model)}`)" if report.model else "")
    mode = ("replayed measurements" if report.replayed
            else requests_line(report.requests_sent, report.request_budget))
    lines = [
        f"# llmdoctor {_STATUS_ICON.get(status, '')} {status.upper()} — {where}",
        "",
        f"llmdoctor {__version__} · {report.started_at} · {mode} · {report.duration_ms / 1000:.1f} s · "
        f"exit {report.exit_code} (fail on {report.fail_on})",
        "",
    ]
    if report.interrupted:
        lines += ["> **Interrupted:** partial report of what was measured so far.", ""]
    lines += _run(report)
    if report.breakdown is not None:
        lines += _breakdown(report.breakdown)
    if report.diagnosis is not None:
        lines += _diagnosis(report.diagnosis)
    if report.findings:
        lines += [f"## Diagnosis — {len(report.findings)} finding(s), most costly first", ""]
        lines += ["| # | Severity | Check | Finding | Impact | Confidence | Cause |", "|---:|---|---|---|---:|---|---|"]
        for i, f in enumerate(report.findings, 1):
            lines.append(f"| {i} | {f.severity.value} | {f.check_id} | {_esc(f.title)} | {_ms(f.impact_ms)} | "
                         f"{f.confidence.value} | {_esc(_cause_cell(f))} |")
        lines.append("")
        for i, f in enumerate(report.findings, 1):
            lines += _finding(i, f)
    else:
        lines += ["## Diagnosis — no findings: nothing in the checklist fired.", ""]
    counts: dict[str, int] = defaultdict(int)
    for o in report.checks:
        counts[o.status] += 1
    lines.append(
        f"**Checks:** {counts[Status.FAILED]} with findings, {counts[Status.PASSED]} passed, "
        f"{counts[Status.SKIPPED]} skipped, {counts[Status.CRASHED]} crashed"
    )
    lines.append("")
    skipped: dict[str, list[str]] = defaultdict(list)
    for o in report.checks:
        if o.status == Status.SKIPPED:
            skipped[o.reason].append(o.check_id)
    for reason, ids in skipped.items():
        lines.append(f"- skipped {', '.join(ids)}: {_esc(reason)}")
    for o in report.checks:
        if o.status == Status.CRASHED:
            lines.append(f"- **crashed** {o.check_id}: {_esc(o.reason)}")
    return "\n".join(lines).rstrip() + "\n"
