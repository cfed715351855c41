"""Wording shared by the human-readable renderers (terminal, Markdown, HTML)."""

from __future__ import annotations

import re

from llmdoctor.findings import Finding
from llmdoctor.render.json import MASK
from llmdoctor.reporting.report import Breakdown, Report

__all__ = ["MASK", "accounting_line", "client_host_line", "cost_amount", "cost_phrase", "fix_short", "format_ms",
           "fit_summary", "format_evidence", "lower_first", "names_line", "phase_clock", "plural", "requests_line",
           "run_lines", "split_summary", "supporting_line"]


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 request``, ``12 requests`` (``many`` for an irregular plural)."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"


def requests_line(sent: int, budget: int) -> str:
    """``1 request sent (budget 30)`` / ``15 requests sent (budget 30)``."""
    return f"{plural(sent, 'request')} sent (budget {budget})"


def cost_phrase(f: Finding, *, said: str | None = None) -> str:
    """What a finding costs and how often: ``~353 ms on every request``, ``once per cold start``.

    The number is left out when `said` (default: the finding's title) already says it: each number
    shown once. ``cost not estimated`` when the check could not put a number on it.
    """
    amount = cost_amount(f, said=said)
    if f.impact_ms is None:
        return "cost not estimated"
    return f"{amount} {f.paid.label}" if amount else f.paid.label


def cost_amount(f: Finding, *, said: str | None = None) -> str:
    """``~353 ms``, or ``""`` when there is no estimate or `said` (default: the title) already gives it."""
    if f.impact_ms is None:
        return ""
    number = f"{f.impact_ms:,.0f}" if abs(f.impact_ms) >= 10 else f"{f.impact_ms:,.1f}"
    if re.search(rf"(?<![\d.,]){re.escape(number)}(?!\d)", f.title if said is None else said):
        return ""
    return f"~{format_ms(f.impact_ms)}"


def lower_first(text: str) -> str:
    """``Keep the instance warm`` → ``keep the instance warm``; an acronym (``GPU saturated``) stays."""
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        return text[0].lower() + text[1:]
    return text


def fix_short(summary: str) -> str:
    """The fix in a few words, to follow ``fix:``: ``keep the instance warm``."""
    return lower_first(summary.strip().rstrip("."))


def format_ms(value: float | None) -> str:
    """Milliseconds for people: ``1,234 ms``, ``12 ms``, ``0.4 ms``; an em dash for unknown."""
    if value is None:
        return "—"
    return f"{value:,.0f} ms" if abs(value) >= 10 else f"{value:,.1f} ms"


def format_evidence(label: str, value: object, unit: str) -> str:
    """One evidence item for people: ``first request TTFT 1,557.3 ms``, ``ignore_eos honoured yes``.

    Times get thousands separators and one decimal, as in the messages (the JSON keeps every digit);
    flags read yes/no rather than Python's True/False.
    """
    if isinstance(value, bool):
        shown = "yes" if value else "no"
    elif unit in ("ms", "ms/token") and isinstance(value, int | float):
        shown = f"{value:,.1f}"
    elif isinstance(value, float):
        shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    else:
        shown = str(value)
    return f"{label} {shown}{(' ' + unit) if unit and value is not None else ''}"


def _interval(interval: tuple[float, float] | None, unit: str = " ms") -> str:
    return f" ({interval[0]:,.1f} to {interval[1]:,.1f}{unit})" if interval is not None else ""


def fit_summary(b: Breakdown) -> str | None:
    """One line on the flat-latency fit (``Fixed 353 ms + 4.99 ms/token: …``), or None without one.

    Each coefficient comes with its interval (Theil–Sen fits); one the fit does not determine (its
    interval wider than itself, or not positive) is said to be "not determined", never shown as a
    negative cost. Older recordings' least-squares intercepts below zero read "≈ 0 ms".
    """
    if not b.typical_output_tokens or (b.fixed_ms is None and b.per_token_ms is None and not b.fit_note):
        return None
    n = b.typical_output_tokens
    if b.fixed_ms is None:
        fixed_text = "fixed cost not determined" + _interval(b.fixed_interval_ms, " ms interval")
    elif b.fixed_ms < 0:
        fixed_text = f"fixed ≈ 0 ms (fitted intercept {format_ms(b.fixed_ms)})"
    else:
        fixed_text = f"fixed {format_ms(b.fixed_ms)}{_interval(b.fixed_interval_ms)}"
    if b.per_token_ms is None:
        return f"Flat-latency fit: {fixed_text}; cost per token not determined" + _interval(
            b.per_token_interval_ms, " ms/token interval")
    token_text = f"{b.per_token_ms:.2f} ms/token{_interval(b.per_token_interval_ms, '')}"
    if b.fixed_ms is None:
        return f"Flat-latency fit: {fixed_text} + {token_text}"
    fixed = max(0.0, b.fixed_ms)
    predicted = fixed + b.per_token_ms * n
    share = fixed / predicted if predicted > 0 else 0.0
    return (f"{fixed_text[:1].upper()}{fixed_text[1:]} + {token_text}: a {n}-token answer takes ≈ "
            f"{format_ms(predicted)} ({share:.0%} fixed)")


def accounting_line(report: Report) -> str | None:
    """``Requests: 24 of 26 answered (92%); generation 12 of 14 (2 × HTTP 429); 1 retried`` (None without one)."""
    a = report.accounting
    if a is None or not a.overall.sent:
        return None
    text = f"Requests: {a.overall.ok} of {a.overall.sent} succeeded ({a.overall.success_ratio or 0:.0%})"
    g = a.generation
    if g.sent:
        text += f"; generation {g.ok} of {g.sent}" + (f" ({g.failures_text()})" if g.failed else "")
    if a.overall.retried:
        text += f"; {a.overall.retried} retried"
    failing = [t for t in a.by_probe if t.failed]
    if failing:
        text += " · by probe: " + ", ".join(f"{t.probe} {t.ok}/{t.sent}" for t in failing)
    return text


def client_host_line(report: Report) -> str | None:
    """The client host's load in one line, or None when not measured."""
    return report.client_host.line() if report.client_host is not None else None


def run_lines(report: Report) -> list[tuple[str, bool]]:
    """The lines near the top of every report on the run itself, each with whether it is a warning:
    a saturated client host, and how the requests ended (failed generation requests)."""
    out = []
    host = report.client_host
    if host is not None:
        out.append((host.line(), host.saturated))
    requests = accounting_line(report)
    if requests is not None:
        out.append((requests, bool(report.accounting and report.accounting.troubled)))
    return out


def split_summary(b: Breakdown) -> str | None:
    """One line on the split by the server's own clock (in front of it / in it / held), or None without one."""
    if b.in_front_ms is None:
        return None
    sources = "; ".join(b.split_sources) or "its report"
    line = (f"By the server's own clock ({sources}): {format_ms(b.in_front_ms)} in front of the model server "
            f"(gateways, balancers, auth, distance), {format_ms(b.server_ms)} in the server")
    if b.held_ms:
        line += f", {format_ms(b.held_ms)} held on the way"
    return line


def phase_clock(clock: str, source: str) -> str:
    """Which clock measured a phase, for people: ``""`` for the client's, else ``clock: source``."""
    if clock == "client":
        return ""
    return f"{clock}: {source}" if source else clock


def names_line(f: Finding) -> str:
    """What a listed finding names: ``Cause: Queueing at the server — explains …``, or its symptom, or ``""``.

    The ``Cause:`` line appears once per cause in a report: the findings folded under it do not repeat it.
    """
    if f.cause is not None:
        explained = list(dict.fromkeys(s.symptom.label for s in f.supporting if s.symptom))
        return f"Cause: {f.cause.label}" + (f" — explains {', '.join(explained)}" if explained else "")
    if f.symptom is not None:
        return f"Symptom: {f.symptom.label} — no cause found in this run explains it"
    return ""


def supporting_line(s: Finding) -> str:
    """One folded finding: ``LD701 warning: High latency floor … · ~550 ms`` (``· same cause`` for a
    finding of the cause it is folded under; the symptoms are named on the cause's line)."""
    impact = f" · ~{format_ms(s.impact_ms)}" if s.impact_ms is not None else ""
    return f"{s.check_id} {s.severity.value}: {s.title}{impact}" + (" · same cause" if s.cause else "")
