"""HTML rendering: one small, self-contained page to attach to a ticket.

The same sections as the Markdown report (`llmdoctor.render.view`): the verdict, the findings table
with coloured severity, where the time goes (a waterfall drawn as inline SVG, and the phases with
their shares as a table), p50/p90 and the new-connection cost, the flat-latency curve (SVG), each
finding's details with the symptoms its cause explains, the differential diagnosis, the checks' tally
and the skipped checks grouped by reason. No script and no external resource: the page opens
offline, prints, and stays a few tens of kB.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from llmdoctor.render import view
from llmdoctor.render.common import format_ms
from llmdoctor.reporting.report import Report

__all__ = ["render_html"]

_SEVERITY_COLOR = {"critical": "#c0392b", "warning": "#b7791f", "info": "#2b6cb0"}
_STATUS_COLOR = {"ok": "#2f855a", "warning": "#b7791f", "critical": "#c0392b", "unknown": "#805ad5"}
_PHASE_COLORS = ("#4c78a8", "#72b7b2", "#f58518", "#e45756", "#54a24b", "#b279a2", "#9d755d", "#bab0ac")
_SPAN_TAG = {"bold": "b", "code": "code", "ok": "b", "critical": "b", "warning": "b"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _inline(spans: view.Spans) -> str:
    out = []
    for span in spans:
        tag = _SPAN_TAG.get(span.style)
        out.append(f"<{tag}>{_e(span.text)}</{tag}>" if tag else _e(span.text))
    return "".join(out)


def _sev(severity: str) -> str:
    return f'<span class=sev style="background:{_SEVERITY_COLOR[severity]}">{_e(severity.upper())}</span>'


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: tuple[int, ...] = (),
           cls: str = "") -> str:
    def cell(tag: str, i: int, value: str) -> str:
        return f"<{tag} class=num>{value}</{tag}>" if i in right else f"<{tag}>{value}</{tag}>"

    head = "".join(cell("th", i, _e(h)) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f'<table{f" class={cls}" if cls else ""}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _summary(block: view.SummaryList) -> str:
    rows = [(str(s.rank), _sev(s.severity), _e(s.title), _e(s.cost), _e(s.fix)) for s in block.items]
    more = f"<p class=dim>… and {block.more} more in the details below.</p>" if block.more else ""
    return _table(("#", "Severity", "Finding", "Cost", "Fix"), rows, right=(0,), cls="findings") + more


def _waterfall_svg(block: view.Waterfall) -> str:
    """The phases as a waterfall: each bar starts where the previous one ended."""
    label_w, chart_w, row_h, top = 170, 520, 26, 8
    total = block.total_ms if block.total_ms > 0 else 1.0
    height = top + row_h * len(block.phases) + 24
    parts = [f'<svg class=chart id=waterfall-chart role=img aria-label="waterfall of one request" '
             f'viewBox="0 0 {label_w + chart_w + 90} {height}" width="100%">']
    start = 0.0
    for i, p in enumerate(block.phases):
        y = top + i * row_h
        x = label_w + start / total * chart_w
        w = max(1.0, p.ms / total * chart_w)
        parts.append(f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end">{_e(p.name)}</text>'
                     f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" '
                     f'fill="{_PHASE_COLORS[i % len(_PHASE_COLORS)]}"><title>{_e(p.note)}</title></rect>'
                     f'<text x="{x + w + 6:.1f}" y="{y + 17}">{_e(format_ms(p.ms))}</text>')
        start += p.ms
    axis_y = top + row_h * len(block.phases) + 4
    parts.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + chart_w}" y2="{axis_y}" stroke="#a0aec0"/>'
                 f'<text x="{label_w}" y="{axis_y + 16}">0</text>'
                 f'<text x="{label_w + chart_w}" y="{axis_y + 16}" text-anchor="end">'
                 f'{_e(format_ms(block.total_ms))}</text></svg>')
    return "".join(parts)


def _waterfall(block: view.Waterfall) -> str:
    rows = [(_e(p.name), _e(format_ms(p.ms)), f"{p.share:.0%}", _e(p.note)) for p in block.phases]
    rows.append(("<b>total</b>", f"<b>{_e(format_ms(block.total_ms))}</b>", "100%", ""))
    return _waterfall_svg(block) + _table(("Phase", "Time", "Share", "Note"), rows, right=(1, 2), cls="phases")


def _ticks(top: float) -> list[float]:
    """About five round tick values from 0 to `top`."""
    raw = top / 5 if top > 0 else 1.0
    magnitude = 10 ** len(str(int(raw))) / 10
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top / step) + 2)]


def _curve(block: view.Curve) -> str:
    """Total latency against output tokens: the sweep's requests and the fitted line."""
    if not block.points:
        return ""
    w, h, left, bottom = 640, 300, 64, 40
    xs = [float(n) for n, _ in block.points]
    ys = [ms for _, ms in block.points]
    x_top = max([*xs, float(block.typical_tokens or 0), 1.0])
    y_top = max([*ys, 1.0]) * 1.1
    x_ticks, y_ticks = _ticks(x_top), _ticks(y_top)
    x_top, y_top = x_ticks[-1], y_ticks[-1]

    def px(x: float) -> float:
        return left + x / x_top * (w - left - 16)

    def py(y: float) -> float:
        return h - bottom - y / y_top * (h - bottom - 12)

    parts = [f'<svg class=chart id=flat-latency-chart role=img aria-label="total latency against output tokens" '
             f'viewBox="0 0 {w} {h}" width="100%">']
    for t in y_ticks:
        parts.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{w - 16}" y2="{py(t):.1f}" stroke="#edf2f7"/>'
                     f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:,.0f}</text>')
    for t in x_ticks:
        parts.append(f'<text x="{px(t):.1f}" y="{h - bottom + 16}" text-anchor="middle">{t:,.0f}</text>')
    parts.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - 16}" y2="{h - bottom}" stroke="#a0aec0"/>'
                 f'<text x="{(left + w) / 2:.0f}" y="{h - 6}" text-anchor="middle">output tokens</text>'
                 f'<text x="14" y="{(h - bottom) / 2:.0f}" transform="rotate(-90 14 {(h - bottom) / 2:.0f})" '
                 f'text-anchor="middle">total latency (ms)</text>')
    if block.fixed_ms is not None and block.per_token_ms is not None:
        y0, y1 = block.fixed_ms, block.fixed_ms + block.per_token_ms * x_top
        parts.append(f'<line class=fit x1="{px(0):.1f}" y1="{py(max(0.0, y0)):.1f}" x2="{px(x_top):.1f}" '
                     f'y2="{py(max(0.0, y1)):.1f}" stroke="#e45756" stroke-width="2">'
                     f'<title>fit: {block.fixed_ms:,.0f} ms + {block.per_token_ms:.2f} ms/token</title></line>')
    for x, y in zip(xs, ys):
        parts.append(f'<circle class=point cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="#4c78a8">'
                     f'<title>{x:,.0f} tokens: {y:,.0f} ms</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _bullets(block: view.Bullets) -> str:
    items = "".join(f"<li>{_inline(item)}</li>" for item in block.items)
    tag = "ol" if block.ordered else "ul"
    cls = " class=chain" if block.ordered else " class=dim" if block.dim else ""
    return f"<{tag}{cls}>{items}</{tag}>"


def _detail(d: view.Detail) -> str:
    rank = f"{d.rank}. " if d.rank is not None else ""
    body = "".join(_bullets(b) if isinstance(b, view.Bullets) else _para(b) for b in d.blocks)
    return (f'<article class=finding id="finding-{_e(d.check_id)}"><h3>{_sev(d.severity)} {rank}{_e(d.heading)} · '
            f'{_e(d.check_id)} <span class=dim>· {_e(d.status)}</span></h3>{body}</article>')


def _para(block: view.Para) -> str:
    return f'<p{" class=dim" if block.dim else ""}>{_inline(block.spans)}</p>'


def _plain_table(block: view.Table) -> str:
    return _table(block.headers, [tuple(_e(c) for c in row) for row in block.rows], block.right)


_BLOCKS: dict[type, Callable[[Any], str]] = {
    view.Para: _para, view.Bullets: _bullets, view.SummaryList: _summary, view.Waterfall: _waterfall,
    view.Curve: _curve, view.Detail: _detail, view.Table: _plain_table,
}


def _section(section: view.Section) -> str:
    note = f"<p class=note>{_e(section.note)}</p>" if section.note else ""
    body = "".join(_BLOCKS[type(b)](b) for b in section.blocks)
    return f'<section id="{_e(section.id)}"><h2>{_e(section.title)}</h2>{note}{body}</section>'


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1000px;
color:#1a202c;padding:0 16px;line-height:1.45}
h1{font-size:1.45em} h2{font-size:1.2em;border-bottom:1px solid #e2e8f0;padding-bottom:4px;margin-top:28px}
h3{font-size:1.02em} .status{color:#fff;padding:2px 10px;border-radius:4px}
.dim,.note{color:#4a5568;font-size:.92em} .sev{color:#fff;padding:1px 6px;border-radius:3px;font-size:.78em}
table{border-collapse:collapse;width:100%;margin:8px 0} td,th{border-bottom:1px solid #e2e8f0;padding:4px 8px;
text-align:left;vertical-align:top} .num{text-align:right;white-space:nowrap}
.finding{border-left:3px solid #cbd5e0;padding-left:12px;margin:14px 0}
svg.chart{max-width:760px;display:block;margin:10px 0;font-size:12px;fill:#2d3748}
code{background:#edf2f7;padding:0 4px;border-radius:3px}
"""


def html_of(doc: view.View) -> str:
    """A built `View` as a self-contained HTML page."""
    product, _, where = doc.heading.partition(" — ")
    color = _STATUS_COLOR.get(doc.status, "#4a5568")
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>llmdoctor — {_e(doc.status.upper())} — {_e(where)}</title><style>{_CSS}</style></head>"
        f'<body><header id=verdict><h1>llmdoctor <span class=status style="background:{color}">'
        f"{_e(doc.status.upper())}</span> {_e(where)}</h1>"
        f"<p><b>{_e(doc.verdict)}</b> · {_e(product)} · {_e(doc.started_at)} · fail on {_e(doc.fail_on)}</p>"
        + ("<p><b>Interrupted:</b> partial report of what was measured so far.</p>" if doc.interrupted else "")
        + "</header>"
        + "".join(_section(s) for s in doc.sections)
        + f"<footer><p class=dim>{_e(doc.run_line)}</p></footer></body></html>\n"
    )


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline SVG charts, no script)."""
    return html_of(view.build_view(report, view.ViewOptions(document=True)))
