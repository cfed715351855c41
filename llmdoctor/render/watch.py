"""Watch output: the live view of the last rounds and the latest waterfall, or one JSON line a round.

A round is ``(time shown, report)``; `llmdoctor.watch.watch` keeps the last rounds and hands them
here after each one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llmdoctor.render.json import report_to_dict
from llmdoctor.reporting.report import Report

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["render_round_ndjson", "watch_view"]

#: Width of the longest phase's bar in the waterfall.
BAR_WIDTH = 30


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f} ms"


def watch_view(rounds: Sequence[tuple[str, Report]], interval: float, *, keep: int = 15) -> RenderableType:
    """The last `keep` rounds as a table, the latest round's waterfall and its top finding (rich)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"llmdoctor watch — every {interval:g} s (Ctrl-C to stop)")
    for col in ("time", "status", "TTFT p50", "TTFT p90", "total p50", "first token", "decode", "requests"):
        table.add_column(col, justify="left" if col in ("time", "status") else "right")
    for stamp, r in list(rounds)[-keep:]:
        b = r.breakdown
        phases = {p.name: p.ms for p in b.phases} if b is not None else {}
        ttft50, ttft90, total50 = (b.ttft_p50_ms, b.ttft_p90_ms, b.total_p50_ms) if b is not None else (None,) * 3
        table.add_row(stamp, r.status.upper(), _ms(ttft50), _ms(ttft90), _ms(total50),
                      _ms(phases.get("wait for first token")), _ms(phases.get("decode")), str(r.requests_sent))
    parts: list[RenderableType] = [table]
    last = rounds[-1][1] if rounds else None
    if last is not None and last.breakdown is not None:
        b = last.breakdown
        longest = max((p.ms for p in b.phases), default=0.0) or 1.0
        for p in b.phases:
            parts.append(Text(f"  {p.name:<22}{_ms(p.ms):>10} {'█' * int(p.ms / longest * BAR_WIDTH)}"))
    if last is not None and last.findings:
        parts.append(Text(f"  {last.findings[0].check_id} {last.findings[0].title}", style="yellow"))
    return Group(*parts)


def render_round_ndjson(report: Report) -> str:
    """One round as one JSON line (the report, schema ``report.schema.json``)."""
    return json.dumps(report_to_dict(report), ensure_ascii=False) + "\n"
