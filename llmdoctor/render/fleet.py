"""Fleet output: the summary table (text) and one JSON report per endpoint (NDJSON).

A fleet's result is one ``(entry, report or None, error)`` per endpoint, in the endpoints file's
order (`llmdoctor.fleet.run_fleet`); an entry is anything with a ``name`` and a ``url``. The
Prometheus exposition of a fleet is `llmdoctor.render.prometheus.render_exposition`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from llmdoctor.render.json import report_to_dict
from llmdoctor.reporting.report import Report
from llmdoctor.target import display_url

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["FleetRow", "Labelled", "fleet_table", "render_fleet_ndjson", "render_fleet_text"]


class Labelled(Protocol):
    """An endpoint of the fleet as its output names it."""

    @property
    def name(self) -> str:
        """The name the endpoints file gives it (its display URL for a plain list)."""

    @property
    def url(self) -> str:
        """Its URL as given (shown through `display_url`: credentials and query masked)."""


#: One endpoint's outcome: its entry, its report (None when it could not be diagnosed) and why not.
FleetRow = tuple[Labelled, Report | None, str]


def fleet_table(results: Sequence[FleetRow]) -> Table:
    """A rich table summarising the fleet, one row per endpoint."""
    from rich.table import Table

    table = Table(title="llmdoctor fleet", show_lines=False)
    for col, justify in (("endpoint", "left"), ("status", "left"), ("exit", "right"), ("findings", "right"),
                         ("TTFT p50", "right"), ("total p50", "right"), ("requests", "right"),
                         ("top finding", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for entry, report, error in results:
        shown = display_url(entry.url)
        label = entry.name if entry.name == shown else f"{entry.name} ({shown})"
        if report is None:
            table.add_row(label, "UNKNOWN", "3", "—", "—", "—", "—", error)
            continue
        b = report.breakdown
        ttft = "—" if b is None or b.ttft_p50_ms is None else f"{b.ttft_p50_ms:,.0f} ms"
        total = "—" if b is None or b.total_p50_ms is None else f"{b.total_p50_ms:,.0f} ms"
        top = f"{report.findings[0].check_id} {report.findings[0].title}" if report.findings else ""
        table.add_row(label, report.status.upper(), str(report.exit_code), str(len(report.findings)), ttft, total,
                      str(report.requests_sent), top)
    return table


def render_fleet_text(results: Sequence[FleetRow], *, worst: int) -> str:
    """The summary table as plain text (140 columns) and the fleet's verdict, `worst` of its exit codes."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=140, no_color=True, highlight=False).print(fleet_table(results))
    return buf.getvalue() + f"Result: exit {worst} (the worst of {len(results)} endpoints)\n"


def render_fleet_ndjson(results: Sequence[FleetRow]) -> str:
    """One JSON line per endpoint: its report with its ``name``, or an ``unknown`` line with the error."""
    lines = []
    for entry, report, error in results:
        if report is not None:
            lines.append(json.dumps({**report_to_dict(report), "name": entry.name}, ensure_ascii=False))
        else:
            lines.append(json.dumps({"name": entry.name, "endpoint": display_url(entry.url), "status": "unknown",
                                     "exit_code": 3, "error": error}, ensure_ascii=False))
    return "\n".join(lines) + "\n"
