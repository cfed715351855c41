"""HTML rendering: one self-contained file with the two charts an incident needs.

The latency waterfall of a typical request and the flat-latency curve
(latency vs output tokens, the sweep's points and the fitted line) are drawn
by Plotly; its JavaScript is inlined, so the file opens offline and can be
attached to a ticket. Plotly is an optional extra: ``pip install 'llm-latency-doctor[html]'``.
"""

from __future__ import annotations

import html
from typing import Any

from llmdoctor import __version__
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.findings import Finding
from llmdoctor.render.common import (
    format_evidence,
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

__all__ = ["render_html", "HtmlUnavailable", "require_plotly"]

INSTALL_HINT = "the html format needs Plotly: pip install 'llm-latency-doctor[html]'"
_SEVERITY_COLOR = {"critical": "#c0392b", "warning": "#b7791f", "info": "#2b6cb0"}
_STATUS_COLOR = {"ok": "#2f855a", "warning": "#b7791f", "critical": "#c0392b", "unknown": "#805ad5"}
_PHASE_COLORS = ["#4c78a8", "#72b7b2", "#f58518", "#e45756", "#54a24b", "#b279a2"]


class HtmlUnavailable(RuntimeError):
    """Plotly is not installed (one-line message telling how to install it)."""


def require_plotly() -> Any:
    """Import Plotly's graph objects, or raise `HtmlUnavailable` with the install command."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise HtmlUnavailable(INSTALL_HINT) from None
    return go


def _waterfall(go: Any, b: Breakdown) -> Any:
    names = [p.name for p in b.phases]
    starts, t = [], 0.0
    for p in b.phases:
        starts.append(t)
        t += p.ms
    fig = go.Figure(
        go.Bar(
            y=names, x=[p.ms for p in b.phases], base=starts, orientation="h",
            marker_color=[_PHASE_COLORS[i % len(_PHASE_COLORS)] for i in range(len(names))],
            text=[f"{p.ms:,.1f} ms" for p in b.phases], textposition="auto",
            hovertext=[" · ".join(x for x in (p.note, phase_clock(p.clock, p.source)) if x) for p in b.phases],
            hovertemplate="%{y}: %{x:.1f} ms<br>%{hovertext}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Where the time of a request goes — {b.label}: {b.total_ms:,.0f} ms",
        xaxis_title="milliseconds since the request started", yaxis={"autorange": "reversed"},
        height=360, margin={"l": 170, "r": 30, "t": 60, "b": 50}, template="plotly_white",
    )
    return fig


def _flat_latency(go: Any, b: Breakdown) -> Any | None:
    points = list(getattr(b, "sweep_points", None) or [])
    if not points:
        return None
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="markers", name="sweep requests", marker={"size": 9}))
    if b.fixed_ms is not None and b.per_token_ms is not None:
        top = max([*xs, float(b.typical_output_tokens or 0)])
        fig.add_trace(go.Scatter(
            x=[0.0, top], y=[b.fixed_ms, b.fixed_ms + b.per_token_ms * top], mode="lines",
            name=f"fit: {b.fixed_ms:,.0f} ms + {b.per_token_ms:.2f} ms/token",
        ))
    fig.update_layout(
        title="Flat latency: total latency vs output tokens", xaxis_title="output tokens",
        yaxis_title="total latency (ms)", yaxis_rangemode="tozero", xaxis_rangemode="tozero",
        height=400, margin={"l": 70, "r": 30, "t": 60, "b": 50}, template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _finding(rank: int, f: Finding) -> str:
    impact = f"~{f.impact_ms:,.0f} ms ({_e(f.impact_basis)})" if f.impact_ms is not None else "not estimated"
    evidence = "; ".join(
        _e(format_evidence(e.label, MASK if e.sensitive else e.value, e.unit))
        for e in f.evidence
    )
    steps = "".join(f"<li>{_e(s)}</li>" for s in f.fix.steps)
    color = _SEVERITY_COLOR[f.severity.value]
    named = names_line(f)
    supporting = "".join(f"<li>{_e(supporting_line(s))}</li>" for s in f.supporting)
    return (
        f'<section class="finding"><h3><span class="sev" style="background:{color}">'
        f"{_e(f.severity.value.upper())}</span> {rank}. {_e(f.check_id)} — {_e(f.title)}</h3>"
        + (f'<p class="{"cause" if f.cause else "symptom"}">{_e(named)}</p>' if named else "")
        + f"<p>{_e(f.message)}</p><p class=dim>Impact {impact} · confidence {_e(f.confidence.value)}</p>"
        + (f"<p class=dim>Evidence: {evidence}</p>" if evidence else "")
        + (f"<p>Supporting findings, folded under this one:</p><ul class=supporting>{supporting}</ul>"
           if supporting else "")
        + f"<p><b>Fix:</b> {_e(f.fix.summary)}</p>"
        + (f"<ul>{steps}</ul>" if steps else "")
        + f"<p class=dim>Docs: <code>{_e(f.docs)}</code></p></section>"
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1a202c}
h1{font-size:1.5em} .status{color:#fff;padding:2px 10px;border-radius:4px}
.dim{color:#4a5568;font-size:.92em} .sev{color:#fff;padding:1px 6px;border-radius:3px;font-size:.8em}
table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #e2e8f0;padding:4px 8px;text-align:left}
.finding{border-left:3px solid #cbd5e0;padding-left:12px;margin:14px 0} .chart{margin:18px 0}
.cause{font-weight:600} .supporting{color:#4a5568;font-size:.92em}
"""


def _diagnosis(d: Diagnosis) -> str:
    from llmdoctor.render.diagnosis import diagnosis_lines

    out = [f"<h2>Differential diagnosis</h2><p><b>Symptom:</b> {_e(d.symptom)}</p>"]
    chain: list[str] = []
    for kind, text in diagnosis_lines(d) + [("end", "")]:
        if kind != "link" and chain:
            out.append("<ol class=chain>" + "".join(chain) + "</ol>")
            chain = []
        if kind == "cause":
            out.append(f"<h3>{_e(text)}</h3>")
        elif kind == "link":
            chain.append(f"<li>{_e(text)}</li>")
        elif kind == "note":
            out.append(f"<p class=dim>{_e(text)}</p>")
    return "".join(out)


def _run(report: Report) -> str:
    """The run itself: the client host's load, how the requests ended."""
    return "".join(f"<p><b>{_e(text)}</b></p>" if warn else f"<p class=dim>{_e(text)}</p>"
                   for text, warn in run_lines(report))


def render_html(report: Report) -> str:
    """The report as a self-contained HTML page (Plotly inlined)."""
    go = require_plotly()
    from plotly.offline import get_plotlyjs

    status = report.status
    parts: list[str] = []
    charts = 0
    b = report.breakdown
    if b is not None:
        for fig, div_id in ((_waterfall(go, b), "waterfall"), (_flat_latency(go, b), "flat-latency")):
            if fig is None:
                continue
            parts.append(f'<div class="chart" id="chart-{div_id}">'
                         + fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                                       config={"displaylogo": False, "responsive": True})
                         + "</div>")
            charts += 1
        split = split_summary(b)
        if split is not None:
            parts.append(f'<p class="split"><b>{_e(split)}</b></p>')
        if not getattr(b, "sweep_points", None):
            parts.append("<p class=dim>No flat-latency curve: the output-length sweep did not run "
                         "(LD702 not selected, or it could not fit).</p>")
    else:
        parts.append("<p class=dim>No latency breakdown: the baseline probe did not run or failed.</p>")
    rows = "".join(
        f"<tr><td>{i}</td><td>{_e(f.severity.value)}</td><td>{_e(f.check_id)}</td><td>{_e(f.title)}</td>"
        f"<td>{'' if f.impact_ms is None else f'{f.impact_ms:,.0f} ms'}</td><td>{_e(f.confidence.value)}</td>"
        f"<td>{_e(f.cause.value if f.cause else '')}</td></tr>"
        for i, f in enumerate(report.findings, 1)
    )
    findings = (
        f"<h2>Diagnosis — {len(report.findings)} finding(s), most costly first</h2>"
        f"<table><tr><th>#</th><th>Severity</th><th>Check</th><th>Finding</th><th>Impact</th><th>Confidence</th><th>Cause</th></tr>"
        f"{rows}</table>" + "".join(_finding(i, f) for i, f in enumerate(report.findings, 1))
        if report.findings else "<h2>Diagnosis — no findings: nothing in the checklist fired.</h2>"
    )
    if report.diagnosis is not None:
        findings = _diagnosis(report.diagnosis) + findings
    skipped = "".join(
        f"<li>{_e(o.check_id)} {_e(o.status)}: {_e(o.reason)}</li>"
        for o in report.checks if o.status in (Status.SKIPPED, Status.CRASHED)
    )
    mode = ("replayed measurements" if report.replayed
            else requests_line(report.requests_sent, report.request_budget))
    where = _e(report.endpoint) + (f" (model {_e(report.model)})" if report.model else "")
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>llmdoctor — {_e(status.upper())} — {_e(report.endpoint)}</title>"
        f"<style>{_CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f'<body data-charts="{charts}"><h1>llmdoctor <span class=status style="background:'
        f'{_STATUS_COLOR.get(status, "#4a5568")}">{_e(status.upper())}</span> {where}</h1>'
        f"<p class=dim>llmdoctor {_e(__version__)} · {_e(report.started_at)} · {mode} · "
        f"{report.duration_ms / 1000:.1f} s · exit {report.exit_code} (fail on {_e(report.fail_on)})</p>"
        + ("<p><b>Interrupted:</b> partial report.</p>" if report.interrupted else "")
        + _run(report) + "".join(parts) + findings
        + (f"<h2>Skipped or crashed checks</h2><ul class=dim>{skipped}</ul>" if skipped else "")
        + "</body></html>\n"
    )
