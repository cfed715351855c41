"""Terminal rendering with rich: the waterfall first, then the ranked diagnosis."""

from __future__ import annotations

import io
from collections import defaultdict

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from llmdoctor import __version__
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.findings import Finding, Severity
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

__all__ = ["render_terminal", "print_terminal"]

SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}
STATUS_STYLE = {"ok": "bold green", "warning": "bold yellow", "critical": "bold red", "unknown": "bold magenta"}
BAR_WIDTH = 32


_ms = format_ms


def _breakdown(console: Console, b: Breakdown) -> None:
    console.print(
        Text.assemble(("Where the time of a request goes", "bold"), f" — {b.label}: ", (_ms(b.total_ms), "bold"))
    )
    table = Table(show_header=False, box=None, padding=(0, 1), pad_edge=False)
    table.add_column(justify="left", min_width=22)
    table.add_column(justify="right", min_width=10)
    table.add_column(min_width=BAR_WIDTH)
    table.add_column(style="dim")
    longest = max((p.ms for p in b.phases), default=0.0) or 1.0
    for phase in b.phases:
        width = phase.ms / longest * BAR_WIDTH
        bar = "█" * int(width) + ("▌" if width - int(width) >= 0.5 else "")
        clock = phase_clock(phase.clock, phase.source)
        note = f"{phase.note} [{clock}]" if clock and phase.note else phase.note or (f"[{clock}]" if clock else "")
        table.add_row(phase.name, _ms(phase.ms), Text(bar or "▏", style="magenta"), note)
    console.print(table)
    split = split_summary(b)
    if split is not None:
        console.print(f"  {split}", style="bold")
    line = (
        f"  TTFT p50 {_ms(b.ttft_p50_ms)} / p90 {_ms(b.ttft_p90_ms)}"
        f" · total p50 {_ms(b.total_p50_ms)} / p90 {_ms(b.total_p90_ms)}"
    )
    if b.new_connection_ms is not None:
        line += f" · a new connection adds {_ms(b.new_connection_ms)}"
    console.print(line, style="dim")
    fit = fit_summary(b)
    if fit is not None:
        console.print(f"  {fit}", style="dim")


def _indented(console: Console, text: str | Text, indent: int = 6, style: str = "") -> None:
    body = text if isinstance(text, Text) else Text(text, style=style)
    console.print(Padding(body, (0, 0, 0, indent)))


def _finding(console: Console, rank: int, f: Finding) -> None:
    head = Text.assemble(
        f"{rank:>2}. ",
        (f"{f.severity.value.upper():<9}", SEVERITY_STYLE[f.severity]),
        (f" {f.check_id}  ", "bold"),
        (f.title, "bold"),
    )
    console.print(head)
    named = names_line(f)
    if named:
        _indented(console, Text(named, style="bold" if f.cause else ""))
    impact = f"impact ~{_ms(f.impact_ms)} ({f.impact_basis})" if f.impact_ms is not None else "impact not estimated"
    _indented(console, f"{impact} · confidence {f.confidence.value}", style="dim")
    _indented(console, f.message)
    if f.evidence:
        parts = []
        for e in f.evidence:
            parts.append(format_evidence(e.label, MASK if e.sensitive else e.value, e.unit))
        _indented(console, "Evidence: " + "; ".join(parts), style="dim")
    if f.supporting:
        _indented(console, "Supporting findings, folded under this one:")
        for s in f.supporting:
            _indented(console, f"- {supporting_line(s)}", indent=8)
    _indented(console, Text.assemble(("Fix: ", "bold green"), f.fix.summary))
    for step in f.fix.steps:
        _indented(console, f"- {step}", indent=8)
    _indented(console, f"Docs: {f.docs}", style="dim")


def _diagnosis(console: Console, d: Diagnosis) -> None:
    from llmdoctor.render.diagnosis import diagnosis_lines

    console.print(Text("Differential diagnosis — " + d.symptom, style="bold"))
    for kind, text in diagnosis_lines(d):
        if kind == "link" and text.startswith("symptom:"):
            continue  # the heading above already states the symptom
        if kind == "cause":
            _indented(console, Text(text, style="bold"), indent=2)
        else:
            _indented(console, text, indent=4 if kind == "link" else 2, style="" if kind == "link" else "dim")


def _run(console: Console, report: Report) -> None:
    """The run itself: the client host's load, how the requests ended (one line each)."""
    for line, warn in run_lines(report):
        console.print(line, style="bold yellow" if warn else "dim")


def print_terminal(report: Report, console: Console) -> None:
    """Print the report on `console`."""
    where = report.endpoint + (f" (model {report.model})" if report.model else "")
    if report.replayed:
        mode = "replayed measurements"
    else:
        mode = requests_line(report.requests_sent, report.request_budget)
        if report.raw_connections:
            plural = "" if report.raw_connections == 1 else "s"
            mode += f" + {report.raw_connections} bare TCP connection{plural}"
    elapsed = f" · {mode} · {report.duration_ms / 1000:.1f} s"
    console.print(Text.assemble(("llmdoctor ", "bold"), __version__, " — ", (where, "bold"), elapsed))
    if report.interrupted:
        console.print("Interrupted: partial report of what was measured so far.", style="bold yellow")
    _run(console, report)
    console.print()
    if report.breakdown is not None:
        _breakdown(console, report.breakdown)
        console.print()
    if report.diagnosis is not None:
        _diagnosis(console, report.diagnosis)
        console.print()
    if report.findings:
        console.print(Text(f"Diagnosis — {len(report.findings)} finding(s), most costly first", style="bold"))
        for i, f in enumerate(report.findings, 1):
            _finding(console, i, f)
    else:
        console.print(Text("Diagnosis — no findings: nothing in the checklist fired.", style="bold green"))
    console.print()
    counts: dict[str, int] = defaultdict(int)
    for o in report.checks:
        counts[o.status] += 1
    console.print(
        f"Checks: {counts[Status.FAILED]} with findings, {counts[Status.PASSED]} passed, "
        f"{counts[Status.SKIPPED]} skipped, {counts[Status.CRASHED]} crashed"
    )
    skipped: dict[str, list[str]] = defaultdict(list)
    for o in report.checks:
        if o.status == Status.SKIPPED:
            skipped[o.reason].append(o.check_id)
    for reason, ids in skipped.items():
        _indented(console, f"skipped {', '.join(ids)}: {reason}", indent=2, style="dim")
    for o in report.checks:
        if o.status == Status.CRASHED:
            _indented(console, f"crashed {o.check_id}: {o.reason}", indent=2, style="red")
    status = report.status
    console.print(Text.assemble("Result: ", (status.upper(), STATUS_STYLE[status]), f" (exit {report.exit_code})"))


def render_terminal(report: Report, *, color: bool = False, width: int = 110) -> str:
    """The terminal report as a string (no colour unless asked)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=width, highlight=False)
    print_terminal(report, console)
    # rich pads wrapped lines to the console width; a file or a pipe should not carry that padding
    return "\n".join(line.rstrip() for line in buffer.getvalue().split("\n"))
