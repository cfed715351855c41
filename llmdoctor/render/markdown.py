"""Markdown rendering: for an incident ticket or a CI job summary ($GITHUB_STEP_SUMMARY).

The same sections, in the same order and words, as the terminal report (`llmdoctor.render.view`):
the verdict, the findings most costly first (a table), where the time of a request goes (a table
with each phase's share), the details of each finding, the differential diagnosis, the checks'
tally with the skipped ones grouped by reason. Valid CommonMark: a blank line around every block,
text escaped, so no list swallows the paragraph after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from llmdoctor.render import view
from llmdoctor.render.common import format_ms
from llmdoctor.reporting.report import Report

__all__ = ["render_markdown"]

_STATUS_ICON = {"ok": "✅", "warning": "⚠️", "critical": "❌", "unknown": "❔"}
_SEVERITY_ICON = {"critical": "❌", "warning": "⚠️", "info": "ℹ️"}
# Characters CommonMark could read as markup; an underscore inside a word (max_tokens) never is.
_SPECIAL = re.compile(r"([\\`*\[\]<>|]|(?<!\w)_|_(?!\w))")


def _esc(text: object) -> str:
    """Text as CommonMark that reads as itself: special characters escaped, one line, no list marker."""
    s = _SPECIAL.sub(r"\\\1", str(text).replace("\n", " "))
    return re.sub(r"^(\s*)([+\-#]|\d+[.)])(\s)", r"\1\\\2\3", s)


def _inline(spans: view.Spans) -> str:
    out = []
    for span in spans:
        text = _esc(span.text)
        if span.style == "code":
            out.append(f"`{span.text.replace('`', '')}`")
        elif span.style in ("bold", "critical", "warning", "ok") and text.strip():
            lead, body, trail = re.match(r"^(\s*)(.*?)(\s*)$", text).groups()  # type: ignore[union-attr]
            out.append(f"{lead}**{body}**{trail}")
        else:
            out.append(text)
    return "".join(out)


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    rule = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(cell for cell in row) + " |" for row in rows]
    return lines + [""]


def _bullets(block: view.Bullets, indent: str = "") -> list[str]:
    return [f"{indent}- {_inline(item)}" for item in block.items] + [""]


def _summary(block: view.SummaryList) -> list[str]:
    rows = [(str(s.rank), f"{_SEVERITY_ICON[s.severity]} {s.severity}", _esc(s.title), _esc(s.cost), _esc(s.fix))
            for s in block.items]
    lines = _table(("#", "Severity", "Finding", "Cost", "Fix"), rows, right=(0,))
    if block.more:
        lines += [f"… and {block.more} more in the details below.", ""]
    return lines


def _waterfall(block: view.Waterfall) -> list[str]:
    rows = [(_esc(p.name), format_ms(p.ms), f"{p.share:.0%}", _esc(p.note)) for p in block.phases]
    rows.append(("**total**", f"**{format_ms(block.total_ms)}**", "100%", ""))
    return _table(("Phase", "Time", "Share", "Note"), rows, right=(1, 2))


def _detail(d: view.Detail) -> list[str]:
    rank = f"{d.rank}. " if d.rank is not None else ""
    lines = [f"### {rank}{_esc(d.heading)} · {d.check_id} · {_SEVERITY_ICON[d.severity]} {d.severity} · "
             f"{_esc(d.status)}", ""]
    for block in d.blocks:
        lines += _bullets(block) if isinstance(block, view.Bullets) else [_inline(block.spans), ""]
    return lines


def _para(block: view.Para) -> list[str]:
    return [_inline(block.spans), ""]


def _plain_table(block: view.Table) -> list[str]:
    return _table(block.headers, [tuple(_esc(c) for c in row) for row in block.rows], block.right)


def _nothing(block: view.Curve) -> list[str]:
    return []  # the fit line says it in words; the HTML report draws the curve


_BLOCKS: dict[type, Callable[[Any], list[str]]] = {
    view.Para: _para, view.Bullets: _bullets, view.SummaryList: _summary, view.Waterfall: _waterfall,
    view.Detail: _detail, view.Table: _plain_table, view.Curve: _nothing,
}


def _section(section: view.Section) -> list[str]:
    lines = [f"## {_esc(section.title)}", ""]
    if section.note:
        lines += [f"*{_esc(section.note)}*", ""]
    for block in section.blocks:
        lines += _BLOCKS[type(block)](block)
    return lines


def markdown_of(doc: view.View) -> str:
    """A built `View` as CommonMark."""
    where = doc.heading.split(" — ", 1)[1] if " — " in doc.heading else doc.heading
    lines = [f"# llmdoctor {_STATUS_ICON.get(doc.status, '')} {doc.status.upper()} — {_esc(where)}", "",
             f"**{_esc(doc.verdict)}** · {_esc(doc.heading.split(' — ')[0])} · {_esc(doc.started_at)} · "
             f"fail on {doc.fail_on}", ""]
    if doc.interrupted:
        lines += ["> **Interrupted:** partial report of what was measured so far.", ""]
    for section in doc.sections:
        lines += _section(section)
    lines += [_esc(doc.run_line), ""]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(report: Report) -> str:
    """The report as CommonMark (GitHub renders it as is)."""
    return markdown_of(view.build_view(report, view.ViewOptions(document=True)))
