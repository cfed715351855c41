"""Terminal rendering with rich: the answer first, coloured by severity on a terminal, wrapped to its width.

The first screen is the verdict and the most costly findings, one line each (what, what it costs
and how often, the fix in a few words), then where the time of a request goes; the details follow.
Colour only on a terminal, and never with ``NO_COLOR`` set or ``--no-color`` (rich honours
``NO_COLOR`` itself); lines wrap between words at the console's width (the terminal's, or
``COLUMNS``); a pipe or a file gets plain text.
"""

from __future__ import annotations

import io
import os
import shutil
from typing import IO

from rich.console import Console
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from llmdoctor.render import view
from llmdoctor.render.common import format_ms
from llmdoctor.reporting.report import Report

__all__ = ["render_terminal", "print_terminal", "make_console", "STYLES", "PIPE_WIDTH"]

STYLES = {
    "critical": "bold red", "warning": "bold yellow", "info": "cyan", "ok": "bold green",
    "unknown": "bold magenta", "bold": "bold", "dim": "dim", "code": "", "": "",
}
#: Width of a report written to a pipe or a file when ``COLUMNS`` does not say.
PIPE_WIDTH = 100
_INDENT = 4


def make_console(file: IO[str] | None = None, *, color: bool | None = None, width: int | None = None,
                 stderr: bool = False) -> Console:
    """A console for the report: colour on a terminal unless `color` is False or ``NO_COLOR`` is set.

    The width is `width`, else ``COLUMNS``, else the terminal's, else `PIPE_WIDTH` for a pipe or a file.
    """
    stream = file if file is not None else None
    probe = Console(file=stream, stderr=stderr)
    terminal = probe.is_terminal
    if width is None:
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            width = int(columns)
        elif terminal:
            width = shutil.get_terminal_size((PIPE_WIDTH, 24)).columns
        else:
            width = PIPE_WIDTH
    no_color = True if color is False else None  # None: rich reads NO_COLOR (any non-empty value)
    return Console(file=stream, stderr=stderr, width=width, no_color=no_color, highlight=False,
                   force_terminal=True if color else None, soft_wrap=False, emoji=False)


def _text(spans: view.Spans, dim: bool = False) -> Text:
    text = Text(style="dim" if dim else "")
    for span in spans:
        text.append(span.text, style=STYLES.get(span.style, ""))
    return text


def _indented(console: Console, renderable: Text | RichTable, indent: int = _INDENT) -> None:
    console.print(Padding(renderable, (0, 0, 0, indent)))


def _bullets(console: Console, block: view.Bullets, indent: int) -> None:
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for item in block.items:
        grid.add_row(Text("-", style="dim" if block.dim else ""), _text(item, block.dim))
    _indented(console, grid, indent)


def _summary(console: Console, block: view.SummaryList) -> None:
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column()
    for s in block.items:
        line = Text(s.title)
        line.append(" — ")
        line.append(s.cost, style="bold")
        line.append(" · fix: ", style="dim")
        line.append(s.fix)
        grid.add_row(f"{s.rank}.", Text(s.severity.upper(), style=STYLES[s.severity]), line)
    console.print(Padding(grid, (0, 0, 0, 1)))
    if block.more:
        _indented(console, Text(f"… and {block.more} more in the details below.", style="dim"))


def _waterfall(console: Console, block: view.Waterfall) -> None:
    # name, time and share take ~36 columns: the bar gets what the longest note leaves, 8 to 32 cells
    longest_note = max((len(p.note) for p in block.phases), default=0)
    bar_width = max(8, min(32, console.width - 39 - longest_note))
    table = RichTable.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(no_wrap=True, width=bar_width)
    table.add_column(style="dim")
    longest = max((p.ms for p in block.phases), default=0.0) or 1.0
    for p in block.phases:
        cells = p.ms / longest * bar_width
        bar = "█" * int(cells) + ("▌" if cells - int(cells) >= 0.5 else "")
        table.add_row(p.name, format_ms(p.ms), f"{p.share:.0%}", Text(bar or "▏", style="magenta"), p.note)
    console.print(Padding(table, (0, 0, 0, 2)))


def _detail(console: Console, d: view.Detail) -> None:
    head = Text()
    head.append(d.heading, style="bold")
    head.append(" · ")
    head.append(d.check_id, style="bold")
    head.append(" · ")
    head.append(d.severity, style=STYLES[d.severity])
    head.append(f" · {d.status}", style="dim")
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    grid.add_row(f"{d.rank}." if d.rank is not None else "-", head)
    console.print(Padding(grid, (0, 0, 0, 1)))
    for block in d.blocks:
        if isinstance(block, view.Para):
            _indented(console, _text(block.spans, block.dim))
        else:
            _bullets(console, block, _INDENT + 2)


def _table(console: Console, block: view.Table) -> None:
    table = RichTable(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for i, header in enumerate(block.headers):
        table.add_column(header, justify="right" if i in block.right else "left")
    for row in block.rows:
        table.add_row(*row)
    console.print(Padding(table, (0, 0, 0, 2)))


def _block(console: Console, block: view.Block) -> None:
    if isinstance(block, view.Para):
        _indented(console, _text(block.spans, block.dim), 2)
    elif isinstance(block, view.Bullets):
        _bullets(console, block, 2)
    elif isinstance(block, view.SummaryList):
        _summary(console, block)
    elif isinstance(block, view.Waterfall):
        _waterfall(console, block)
    elif isinstance(block, view.Detail):
        _detail(console, block)
    elif isinstance(block, view.Table):
        _table(console, block)
    elif isinstance(block, view.Curve):
        pass  # the fit line above says it in words; the HTML report draws the curve


def _section(console: Console, section: view.Section) -> None:
    title = Text(section.title, style="bold")
    if section.note:
        title.append(f" — {section.note}")
    console.print(title)
    for block in section.blocks:
        _block(console, block)


def print_view(doc: view.View, console: Console) -> None:
    """Print a built `View` on `console`."""
    console.print(Text(doc.heading, style="bold"))
    console.print(_verdict(doc))
    if doc.interrupted:
        console.print(Text("Interrupted: partial report of what was measured so far.", style="bold yellow"))
    for section in doc.sections:
        console.print()
        _section(console, section)
    console.print(Text(doc.run_line, style="dim"))
    console.print(_verdict(doc))


def _verdict(doc: view.View) -> Text:
    text = Text("Result: ")
    text.append(doc.status.upper(), style=STYLES.get(doc.status, "bold"))
    text.append(f" (exit {doc.exit_code})")
    return text


def print_terminal(report: Report, console: Console, *, verbose: bool = False) -> None:
    """Print the report on `console` (its colour and width decide how it looks)."""
    print_view(view.build_view(report, view.ViewOptions(verbose=verbose)), console)


def render_terminal(report: Report, *, color: bool = False, width: int | None = None, verbose: bool = False) -> str:
    """The terminal report as a string: plain unless `color`, `width` wide (default ``COLUMNS`` or 100)."""
    buffer = io.StringIO()
    console = make_console(buffer, color=color, width=width)
    print_terminal(report, console, verbose=verbose)
    # rich pads wrapped lines to the console width; a file or a pipe should not carry that padding
    return "\n".join(line.rstrip() for line in buffer.getvalue().split("\n"))
