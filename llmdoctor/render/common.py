"""Wording shared by the human-readable renderers (terminal, Markdown, HTML)."""

from __future__ import annotations

import re

from llmdoctor.findings import Finding
from llmdoctor.render.json import MASK
from llmdoctor.report import Breakdown

__all__ = ["MASK", "cost_amount", "cost_phrase", "fix_short", "format_ms", "fit_summary", "format_evidence",
           "lower_first", "names_line", "plural", "requests_line", "supporting_line"]


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


def fit_summary(b: Breakdown) -> str | None:
    """One line on the flat-latency fit (``Fixed 353 ms + 4.99 ms/token: …``), or None without one.

    A negative intercept (per-token cost growing with length, as on llama.cpp) is shown as a
    fixed cost of about 0 ms with the intercept in brackets, never as a negative cost.
    """
    if b.fixed_ms is None or b.per_token_ms is None or not b.typical_output_tokens:
        return None
    n = b.typical_output_tokens
    fixed = max(0.0, b.fixed_ms)
    predicted = b.fixed_ms + b.per_token_ms * n
    share = fixed / predicted if predicted > 0 else 0.0
    shown = format_ms(fixed) if b.fixed_ms >= 0 else f"≈ 0 ms (fitted intercept {format_ms(b.fixed_ms)})"
    return f"Fixed {shown} + {b.per_token_ms:.2f} ms/token: a {n}-token answer takes ≈ {format_ms(predicted)} " \
           f"({share:.0%} fixed)"


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
