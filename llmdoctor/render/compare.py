"""`llmdoctor compare` output: the side-by-side comparison as a text table or as JSON.

The JSON is a versioned contract of its own (``format: llmdoctor-compare``, described by
``llmdoctor/schema/compare.schema.json``), spelled out field by field like the report's.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from llmdoctor.analysis.regress import Verdict

if TYPE_CHECKING:
    from llmdoctor.sidebyside import Side, SideBySide

__all__ = ["FORMAT", "VERSION", "compare_to_dict", "render_compare_json", "render_compare_text"]

FORMAT = "llmdoctor-compare"
VERSION = "1.0"

_VERDICTS = {Verdict.REGRESSION: "B SLOWER", Verdict.IMPROVEMENT: "B FASTER",
             Verdict.NO_CHANGE: "same (within noise)", Verdict.INSUFFICIENT: "too few samples"}


def _r(v: float | None, d: int = 2) -> float | None:
    return None if v is None else round(v, d)


def _side(s: Side) -> dict[str, Any]:
    return {"label": s.label, "endpoint": s.endpoint, "model": s.model, "samples": len(s.ok),
            "requests_sent": s.requests_sent, "error": s.error}


def compare_to_dict(result: SideBySide) -> dict[str, Any]:
    """The comparison as JSON data (``format: llmdoctor-compare``; schema in schema/compare.schema.json)."""
    from llmdoctor import __version__

    return {
        "format": FORMAT,
        "version": VERSION,
        "tool": {"name": "llmdoctor", "version": __version__},
        "exit_code": result.exit_code,
        "a": _side(result.a),
        "b": _side(result.b),
        "comparisons": [
            {"metric": c.metric, "verdict": c.verdict, "a_ms": _r(c.before_ms), "b_ms": _r(c.after_ms),
             "diff_ms": _r(c.diff_ms), "ci_low_ms": _r(c.ci_low_ms), "ci_high_ms": _r(c.ci_high_ms),
             "level": c.level, "p_value": None if c.p_value is None else float(f"{c.p_value:.3g}"),
             "min_effect_ms": _r(c.min_effect_ms), "n_a": c.n_before, "n_b": c.n_after, "test": c.test}
            for c in result.comparisons
        ],
    }


def render_compare_json(result: SideBySide) -> str:
    """The comparison as indented JSON, ending in a newline."""
    return json.dumps(compare_to_dict(result), indent=2) + "\n"


def render_compare_text(result: SideBySide) -> str:
    """A rich table of the comparison, as plain text (120 columns)."""
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=120, no_color=True, highlight=False)
    for s in (result.a, result.b):
        console.print(f"{s.label}: {s.endpoint}" + (f" (model {s.model})" if s.model else "")
                      + (f" — {len(s.ok)} samples" if not s.error else f" — ERROR: {s.error}"))
    if result.comparisons:
        table = Table(title="Side by side, interleaved A, B, A, B … (B relative to A)")
        for col in ("phase", "A median", "B median", "B − A", "95% interval", "p", "verdict"):
            table.add_column(col, justify="left" if col in ("phase", "verdict") else "right")
        for c in result.comparisons:
            interval = "—" if c.ci_low_ms is None else f"{c.ci_low_ms:+,.1f}..{c.ci_high_ms:+,.1f} ms"
            table.add_row(c.metric, f"{c.before_ms:,.1f} ms" if c.before_ms is not None else "—",
                          f"{c.after_ms:,.1f} ms" if c.after_ms is not None else "—",
                          f"{c.diff_ms:+,.1f} ms" if c.diff_ms is not None else "—", interval,
                          "—" if c.p_value is None else f"{c.p_value:.2g}", _VERDICTS[c.verdict])
        console.print(table)
    differs = [c.metric for c in result.comparisons if c.significant]
    console.print(f"Result: {'differs in ' + ', '.join(differs) if differs else 'no difference beyond noise'}"
                  f" (exit {result.exit_code})")
    return buf.getvalue()
