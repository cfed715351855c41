"""The report as people read it: one document model that the text, Markdown and HTML renderers share.

`build_view` turns a `Report` into a `View`: a header, the verdict, then sections of plain blocks
(paragraphs, lists, tables, the ranked summary, the finding details, the waterfall, the flat-latency
curve). The wording is decided here, once, so every format says the same thing: answer first (the
verdict and the most costly findings, one line each, then where the time goes), details below, no
p-values or likelihood ratios (the JSON keeps them), each number shown once where it can be.

Adding a section is one function: append a ``(Report, ViewOptions) -> Section | None`` builder to
`SECTIONS`; the renderers draw any section from its blocks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmdoctor import __version__
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState, HypothesisStatus
from llmdoctor.findings import Confidence, Evidence, Finding
from llmdoctor.render.common import (
    MASK,
    cost_amount,
    cost_phrase,
    fit_summary,
    fix_short,
    format_evidence,
    format_ms,
    lower_first,
    phase_clock,
    plural,
    requests_line,
    run_lines,
    split_summary,
)
from llmdoctor.reporting.report import Breakdown, Phase, Report
from llmdoctor.runner import Status

__all__ = [
    "Block", "Bullets", "Curve", "Detail", "Para", "PhaseRow", "SECTIONS", "Section", "Span", "Summary",
    "SummaryList", "Table", "View", "ViewOptions", "Waterfall", "build_view",
]

#: How many findings the summary at the top lists; the others are in the details.
SUMMARY_LIMIT = 5


@dataclass(frozen=True)
class Span:
    """A run of text with a style: ``""``, ``bold``, ``dim``, ``code`` or a severity/status name."""

    text: str
    style: str = ""


Spans = tuple[Span, ...]


@dataclass(frozen=True)
class Para:
    """A paragraph."""

    spans: Spans
    dim: bool = False

    @property
    def text(self) -> str:
        """Its plain text."""
        return "".join(s.text for s in self.spans)


@dataclass(frozen=True)
class Bullets:
    """A list of items (each a paragraph's spans); `ordered` when their order is the point (a chain)."""

    items: tuple[Spans, ...]
    dim: bool = False
    ordered: bool = False


@dataclass(frozen=True)
class Table:
    """A table; `right` are the right-aligned columns, `styles` an optional style per row's first cell."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    right: tuple[int, ...] = ()
    styles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    """One line of the ranked summary: what, what it costs and how often, the fix in a few words."""

    rank: int
    severity: str
    check_id: str
    title: str
    cost: str
    fix: str


@dataclass(frozen=True)
class SummaryList:
    """The ranked summary at the top, and how many more findings the details list."""

    items: tuple[Summary, ...]
    more: int = 0


@dataclass(frozen=True)
class Detail:
    """One finding in full: a heading, then its paragraphs and lists."""

    rank: int | None
    severity: str
    check_id: str
    heading: str
    status: str
    blocks: tuple[Para | Bullets, ...]


@dataclass(frozen=True)
class PhaseRow:
    """One phase of the waterfall with its share of the total."""

    name: str
    ms: float
    share: float
    note: str


@dataclass(frozen=True)
class Waterfall:
    """The phases of one typical request (they add up to its total)."""

    total_ms: float
    phases: tuple[PhaseRow, ...]


@dataclass(frozen=True)
class Curve:
    """The flat-latency curve: the sweep's (output tokens, total ms) points and the fitted line."""

    points: tuple[tuple[int, float], ...]
    fixed_ms: float | None
    per_token_ms: float | None
    typical_tokens: int | None


Block = Para | Bullets | Table | SummaryList | Detail | Waterfall | Curve


@dataclass(frozen=True)
class Section:
    """A titled part of the report; `note` follows the title (text: on its line; documents: below it)."""

    id: str
    title: str
    blocks: tuple[Block, ...]
    note: str = ""


@dataclass(frozen=True)
class View:
    """The whole report: who was diagnosed, the verdict, the sections."""

    heading: str
    status: str
    exit_code: int
    verdict: str
    sections: tuple[Section, ...]
    run_line: str
    interrupted: bool = False
    started_at: str = ""
    fail_on: str = "warning"

    def section(self, section_id: str) -> Section | None:
        """The section with this id, if the report has it."""
        return next((s for s in self.sections if s.id == section_id), None)


@dataclass(frozen=True)
class ViewOptions:
    """What the reader asked for: ``verbose`` lists the skipped checks in the text report."""

    verbose: bool = False
    #: Text lists skipped checks only with ``--verbose``; documents (Markdown, HTML) always list them.
    document: bool = False


# -- wording of one finding ---------------------------------------------------------------------------
_STATUS = {Confidence.HIGH: "confirmed", Confidence.MEDIUM: "likely", Confidence.LOW: "possible"}


def _confirmed_by_diagnosis(f: Finding) -> bool:
    return f.restatement or any(s.restatement and s.cause == f.cause for s in f.supporting)


def _status(f: Finding) -> str:
    """``confirmed (differential diagnosis)`` / ``confirmed`` / ``likely`` / ``possible``."""
    if _confirmed_by_diagnosis(f):
        return "confirmed (differential diagnosis)"
    return _STATUS[f.confidence]


def _heading(f: Finding, check_titles: dict[str, str]) -> str:
    """What a finding is about, in words without its numbers: its cause, its symptom or its check's title."""
    if f.cause is not None:
        return f.cause.label
    if f.symptom is not None:
        return f.symptom.label[:1].upper() + f.symptom.label[1:]
    return check_titles.get(f.check_id, f.title)


_NUMBER = r"(?<![\d.,]){}(?![\d])"


def _shown(e: Evidence, text: str) -> bool:
    """True when the evidence's value already appears in `text` (a message says it in words)."""
    value = e.value
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        forms = {f"{value:,.0f}", f"{value:,.1f}", f"{value:g}"}
        return any(re.search(_NUMBER.format(re.escape(form)), text) for form in forms)
    return len(str(value)) > 3 and str(value) in text


def evidence_shown(f: Finding) -> list[str]:
    """The evidence people read: no statistics, nothing the title or the message already says."""
    said = f"{f.title} {f.message}"
    return [format_evidence(e.label, MASK if e.sensitive else e.value, e.unit)
            for e in f.evidence if not e.statistic and (e.sensitive or not _shown(e, said))]


def _chain(d: Diagnosis | None, f: Finding) -> list[str]:
    """What the differential diagnosis saw for this finding's cause: the evidence of its confirmation."""
    if d is None or f.cause is None:
        return []
    h = d.get(f.cause)
    if h is None or h.status is not HypothesisStatus.CONFIRMED:
        return []
    return _evidence_of(d, h)


def _evidence_of(d: Diagnosis, h: HypothesisState) -> list[str]:
    return [o.text for o in h.evidence if o.source.startswith("first pass")] + _followup_evidence(d, h)


def _followup_evidence(d: Diagnosis, h: HypothesisState) -> list[str]:
    """What the follow-up tests found about `h`, each with what it cost."""
    lines = []
    for step in d.steps:
        for u in step.updates:
            if u.hypothesis is h.id:
                cost = f" ({plural(step.cost_requests, 'request')})" if step.cost_requests else ""
                lines.append(f"{step.title}{cost}: {u.text}")
    return lines


def _detail(rank: int | None, f: Finding, report: Report, titles: dict[str, str]) -> Detail:
    blocks: list[Para | Bullets] = []
    if f.restatement and report.diagnosis is not None and _chain(report.diagnosis, f):
        # the diagnosis's own finding restates the whole diagnosis: its evidence is the chain, shown once
        blocks.append(Para((Span("What the tests saw is under “Differential diagnosis” below."),)))
    else:
        blocks.append(Para((Span(f.message),)))
    shown = evidence_shown(f)
    if shown:
        blocks.append(Para((Span("Evidence: ", "bold"), Span("; ".join(shown))), dim=True))
    if f.impact_ms is not None:
        basis = f" ({f.impact_basis})" if f.impact_basis else ""
        amount = cost_amount(f, said=f.message)
        cost = f"{amount}, {f.paid.label}" if amount else f"paid {f.paid.label}"
        blocks.append(Para((Span("Cost: ", "bold"), Span(f"{cost}{basis}.")), dim=True))
    else:
        blocks.append(Para((Span("Cost: ", "bold"), Span("not estimated"
                                                         + (f" ({f.impact_basis})." if f.impact_basis else "."))),
                           dim=True))
    # what it explains: its symptoms, and the causes it brings about (KV pressure: a queue, prefill again)
    symptoms = [s for s in f.supporting if s.symptom is not None or (s.cause is not None and s.cause != f.cause)]
    others = [s for s in f.supporting if s not in symptoms]
    if symptoms:
        blocks.append(Para((Span("It explains:"),)))
        blocks.append(Bullets(tuple((Span(f"{s.check_id} ", "bold"), Span(s.title)) for s in symptoms)))
    if others:
        blocks.append(Para((Span("Also found by:"),)))
        blocks.append(Bullets(tuple((Span(f"{s.check_id} ", "bold"), Span(s.title)) for s in others)))
    if f.symptom is not None and f.cause is None:
        blocks.append(Para((Span("No cause found in this run explains it."),), dim=True))
    blocks.append(Para((Span("Fix: ", "ok"), Span(f.fix.summary))))
    if f.fix.steps:
        blocks.append(Bullets(tuple((Span(step),) for step in f.fix.steps)))
    blocks.append(Para((Span("More: "), Span(f.docs, "code")), dim=True))
    return Detail(rank, f.severity.value, f.check_id, _heading(f, titles), _status(f), tuple(blocks))


# -- the sections ---------------------------------------------------------------------------------------
def _ranked(report: Report) -> list[Finding]:
    return [f for f in report.findings if not (f.negligible and f.severity.value == "info")]


def _noted(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.negligible and f.severity.value == "info"]


def _findings(report: Report, options: ViewOptions) -> Section:
    ranked = _ranked(report)
    if not ranked:
        noted = _noted(report)
        text = "No findings: nothing in the checklist fired." if not noted else \
            f"No costly findings; {plural(len(noted), 'note')} below."
        return Section("findings", "Findings", (Para((Span(text, "ok"),)), *_run_paras(report)))
    items = tuple(
        Summary(i, f.severity.value, f.check_id, f.title, cost_phrase(f), fix_short(f.fix.summary))
        for i, f in enumerate(ranked[:SUMMARY_LIMIT], 1)
    )
    return Section("findings", "Findings", (SummaryList(items, max(0, len(ranked) - SUMMARY_LIMIT)),
                                            *_run_paras(report)),
                   note="most costly per request first")


def _run_paras(report: Report) -> tuple[Para, ...]:
    """The run itself, under the answer: a saturated client host, how the requests ended (a warning
    when generation requests failed)."""
    return tuple(Para((Span(text, "warning"),)) if warn else Para((Span(text),), dim=True)
                 for text, warn in run_lines(report))


def _waterfall(report: Report, options: ViewOptions) -> Section | None:
    b = report.breakdown
    if b is None:
        return None
    rows = tuple(PhaseRow(p.name, p.ms, p.ms / b.total_ms if b.total_ms > 0 else 0.0, _phase_note(p.note, p))
                 for p in b.phases)
    # The split first: at 80 columns the table's wrapped notes would push it off the first screen.
    split = split_summary(b)
    blocks: list[Block] = [Para((Span(split, "bold"),))] if split is not None else []
    if b.clock_hint:
        blocks.append(Para((Span(b.clock_hint + "."),), dim=True))
    blocks.append(Waterfall(b.total_ms, rows))
    blocks.append(Para((Span(_percentiles(b)),), dim=True))
    fit = fit_summary(b)
    if fit is not None:
        blocks.append(Para((Span(fit),), dim=True))
    if b.sweep_points:
        blocks.append(Curve(tuple(b.sweep_points), b.fixed_ms, b.per_token_ms, b.typical_output_tokens))
    return Section("waterfall", "Where the time goes", tuple(blocks), note=f"{format_ms(b.total_ms)}, {b.label}")


def _phase_note(note: str, phase: Phase) -> str:
    """A phase's note with the clock that measured it (``[server_header: openai-processing-ms]``); the
    client's own clock is not named."""
    clock = phase_clock(phase.clock, phase.source)
    if not clock:
        return note
    return f"{note} [{clock}]" if note else f"[{clock}]"


def _percentiles(b: Breakdown) -> str:
    line = (f"Time to first token p50 {format_ms(b.ttft_p50_ms)}, p90 {format_ms(b.ttft_p90_ms)} · "
            f"total p50 {format_ms(b.total_p50_ms)}, p90 {format_ms(b.total_p90_ms)}")
    if b.new_connection_ms is not None:
        line += f" · a new connection adds {format_ms(b.new_connection_ms)}"
    return line


def _details(report: Report, options: ViewOptions) -> Section | None:
    ranked = _ranked(report)
    if not ranked:
        return None
    titles = {o.check_id: o.title for o in report.checks}
    return Section("details", "Details", tuple(_detail(i, f, report, titles) for i, f in enumerate(ranked, 1)))


def _also_noted(report: Report, options: ViewOptions) -> Section | None:
    noted = _noted(report)
    if not noted:
        return None
    titles = {o.check_id: o.title for o in report.checks}
    return Section("noted", "Also noted", tuple(_detail(None, f, report, titles) for f in noted),
                   note="no measurable cost")


def _diagnosis(report: Report, options: ViewOptions) -> Section | None:
    d = report.diagnosis
    if d is None:
        return None
    blocks: list[Block] = []
    # (the diagnosis's own finding is no such place: its details point here for the evidence)
    rank_of = {f.cause.value: i for i, f in reversed(list(enumerate(_ranked(report), 1)))
               if f.cause is not None and not f.restatement}
    for h in d.confirmed:
        rank = rank_of.get(h.id)
        # a cause the details already show with its numbers: only what the follow-up tests added is new here
        evidence = _evidence_of(d, h) if rank is None else _followup_evidence(d, h)
        tests = sum(1 for s in d.steps if s.ran and any(u.hypothesis == h.id for u in s.updates))
        where = f" (finding {rank} above)" if rank is not None else ""
        blocks.append(Para((Span("Confirmed: ", "bold"), Span(h.title + where))))
        items = [(Span("seen: ", "dim"), Span(text)) for text in evidence]
        how = "the first measurements" if not tests else plural(tests, "follow-up test")
        items.append((Span("conclusion: ", "dim"), Span(f"confirmed by {how}")))
        blocks.append(Bullets(tuple(items), ordered=True))
    if not d.confirmed:
        likely = [lower_first(h.title) for h in d.open[:3]]
        blocks.append(Para((Span("Not confirmed: ", "bold"),
                            Span(("most likely " + ", ".join(likely)) if likely else "no cause stood out"))))
    if d.refuted:
        refuted = ", ".join(lower_first(h.title) for h in d.refuted)
        blocks.append(Para((Span("Ruled out: ", "bold"), Span(refuted + "."))))
    ran = sum(1 for s in d.steps if s.ran)
    budget = plural(d.budget_requests, "request")
    spent = (f"{plural(ran, 'follow-up test')}: {d.spent_requests} of a budget of {budget}" if ran
             else f"no follow-up test was needed (budget {budget})")
    blocks.append(Para((Span(spent[:1].upper() + spent[1:] + "."),), dim=True))
    return Section("diagnosis", "Differential diagnosis", tuple(blocks))


def _checks(report: Report, options: ViewOptions) -> Section:
    counts: dict[str, int] = defaultdict(int)
    for o in report.checks:
        counts[o.status] += 1
    tally = (f"{counts[Status.FAILED]} with findings, {counts[Status.PASSED]} passed, "
             f"{counts[Status.SKIPPED]} skipped, {counts[Status.CRASHED]} crashed")
    skipped: dict[str, list[str]] = defaultdict(list)
    for o in report.checks:
        if o.status == Status.SKIPPED:
            skipped[o.reason].append(o.check_id)
    listed = options.verbose or options.document
    if skipped and not listed:
        tally = tally.replace(" skipped,", " skipped (--verbose says why),")
    blocks: list[Block] = [Para((Span(tally),))]
    if skipped and listed:
        blocks.append(Bullets(tuple((Span(f"skipped {', '.join(ids)}: "), Span(reason))
                                    for reason, ids in skipped.items()), dim=True))
    crashed = [o for o in report.checks if o.status == Status.CRASHED]
    if crashed:
        blocks.append(Bullets(tuple((Span("crashed ", "critical"), Span(f"{o.check_id}: {o.reason}"))
                                    for o in crashed)))
    return Section("checks", "Checks", tuple(blocks))


Builder = Callable[[Report, ViewOptions], "Section | None"]

#: The sections in reading order: the answer first, details below.
SECTIONS: tuple[Builder, ...] = (_findings, _waterfall, _details, _also_noted, _diagnosis, _checks)


def build_view(report: Report, options: ViewOptions | None = None,
               sections: Sequence[Builder] = SECTIONS) -> View:
    """The report as a `View` for the human-readable renderers."""
    options = options or ViewOptions()
    where = report.endpoint + (f" (model {report.model})" if report.model else "")
    built = tuple(s for s in (build(report, options) for build in sections) if s is not None)
    return View(
        heading=f"llmdoctor {__version__} — {where}",
        status=report.status,
        exit_code=report.exit_code,
        verdict=f"Result: {report.status.upper()} (exit {report.exit_code})",
        sections=built,
        run_line=_run_line(report),
        interrupted=report.interrupted,
        started_at=report.started_at,
        fail_on=report.fail_on,
    )


def _run_line(report: Report) -> str:
    if report.replayed:
        mode = "Replayed recorded measurements (nothing sent)"
    else:
        mode = "Sent " + requests_line(report.requests_sent, report.request_budget).replace(" sent", "", 1)
        if report.raw_connections:
            mode += f" and {plural(report.raw_connections, 'bare TCP connection')}"
    return f"{mode} in {report.duration_ms / 1000:.1f} s."
