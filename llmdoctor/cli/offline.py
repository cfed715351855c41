"""The commands that need no endpoint: `replay` (recorded measurements), `checks` and `explain`."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import TYPE_CHECKING

import click

from llmdoctor.cli.export import ExportArgs, export_options, export_settings
from llmdoctor.cli.gate import SloArgs, apply_gate, inject_reference, replay_gate_options
from llmdoctor.cli.output import NO_COLOR_OPTION, Destination, Presentation, ReportArgs, report_options, run_and_exit
from llmdoctor.cli.usage import UsageProblem, require_format, require_known_ids

if TYPE_CHECKING:
    from llmdoctor.check import Check

__all__ = ["docs_as_text", "explain", "list_checks", "replay"]


@click.command(name="checks")
@click.option("--json", "as_json", is_flag=True, help="List as JSON.")
def list_checks(as_json: bool) -> None:
    """List the checklist: ids, names, categories and titles, in the order they run.

    A check that is not stable says so after its title (``[preview]``: runs only when --select
    names it; ``[deprecated]``); the JSON gives every check's ``state``.
    """
    from llmdoctor.checklist.check_table import CheckState
    from llmdoctor.checklist.registry import available_checks

    registry = available_checks()  # from the generated index: no check module is imported
    if as_json:
        import json

        rows = [{"id": c.id, "name": c.name, "category": c.category, "title": c.title,
                 "requires": list(c.requires), "optional": list(c.optional), "state": c.state}
                for c in registry.checks]
        click.echo(json.dumps(rows, indent=2))
        return
    for c in registry.checks:
        state = "" if c.state == CheckState.STABLE else f"  [{c.state}]"
        click.echo(f"{c.id:<7}{c.category:<12}{c.name:<28}{c.title}{state}")
    if registry.errors:
        from llmdoctor.redact import redact_output

        for err in registry.errors:  # a plugin's error may quote anything, a credential included
            click.echo(redact_output(f"(plugin {err.name} failed to load: {err.reason})"), err=True)


@click.command()
@click.argument("check_id")
@NO_COLOR_OPTION
def explain(check_id: str, no_color: bool) -> None:
    """Print a check's documentation: what it checks, why it matters, how to fix it."""
    from llmdoctor.checklist.registry import find_check

    check_cls = find_check(check_id)
    if check_cls is None:
        raise UsageProblem(f"no check {check_id!r}; `llmdoctor checks` lists them")
    color = sys.stdout.isatty() and not no_color and not os.environ.get("NO_COLOR")
    width = min(shutil.get_terminal_size().columns, 100)
    click.echo(docs_as_text(check_cls, width=width, color=color))


def docs_as_text(check_cls: type[Check], *, width: int = 80, color: bool = False) -> str:
    """A check's docstring as terminal text: headings, paragraphs reflowed to `width`, no markup
    (````max_tokens```` reads max_tokens), and what it measures in the user's words."""
    import inspect

    def bold(text: str) -> str:
        return click.style(text, bold=True) if color else text

    doc = inspect.cleandoc(check_cls.__doc__ or "")
    out = [bold(f"{check_cls.id} {check_cls.name} — {check_cls.title}") + f"  [{check_cls.category.value}]", ""]
    for block in re.split(r"\n\s*\n", doc):
        heading = re.match(r"^## +(.+?)\s*$", block.split("\n", 1)[0])
        if heading:
            out.append(bold(heading.group(1)))
            block = block.split("\n", 1)[1] if "\n" in block else ""
            if not block.strip():
                continue
        out += _paragraphs(_plain(block), width) + [""]
    probes = check_cls.declared()
    if probes:
        measures = "Measures: " + "; ".join(p.label for p in probes) + "."
        out += textwrap.wrap(measures, width=width, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False)
    return "\n".join(out).rstrip() + "\n"


def _plain(text: str) -> str:
    """Docstring markup as plain text: ``code`` and `code` lose their backquotes, **bold** its stars."""
    text = re.sub(r"``(.+?)``", r"\1", text, flags=re.S)
    text = re.sub(r"(?<!\w)`([^`]+?)`(?!\w)", r"\1", text)
    return re.sub(r"\*\*(.+?)\*\*", r"\1", text, flags=re.S)


def _paragraphs(block: str, width: int) -> list[str]:
    """Reflow a paragraph; list items (``- `` / ``1. ``) each reflowed with a hanging indent."""
    items: list[list[str]] = []
    for line in block.split("\n"):
        if re.match(r"^\s*(?:[-*]|\d+\.) ", line) or not items:
            items.append([line.strip()])
        else:
            items[-1].append(line.strip())
    lines: list[str] = []
    for item in items:
        text = " ".join(item)
        marker = re.match(r"^((?:[-*]|\d+\.) )", text)
        indent = " " * len(marker.group(1)) if marker else ""
        lines += textwrap.wrap(text, width=width, subsequent_indent=indent, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return lines


@click.command()
@click.argument("recording", type=click.Path(exists=True, dir_okay=False))
@click.option("--verbose", "-v", is_flag=True, help="List the skipped checks with their reasons in the report.")
@replay_gate_options
@export_options
@report_options
def replay(recording: str, verbose: bool, gate: SloArgs, export: ExportArgs, report: ReportArgs) -> None:
    """Re-run the checks offline on measurements saved with --save-measurements.

    Without --select/--ignore it runs the checks the recorded run used, so it gives that run's
    diagnosis; with --slo / --compare, judge the recorded measurements by these objectives or this
    baseline.
    """
    import dataclasses

    from llmdoctor.inputs.recording import RecordingError, load_recorded_run

    try:
        run = load_recorded_run(recording)
    except RecordingError as exc:
        raise UsageProblem(str(exc)) from None
    target, options, measurements = run.target, run.options, run.measurements
    fmt = report.format
    require_format(fmt)
    require_known_ids(report.select, report.ignore)
    selection = report.selection
    if not report.select and not report.ignore and run.checks:  # the recorded run's checklist (a plugin gone
        # since: skipped), and the gate's checks when it judges by new objectives
        judged = (*(("LD710",) if gate.slos else ()), *(("LD711",) if gate.compare_file else ()))
        selection = dataclasses.replace(selection, select=(",".join(dict.fromkeys((*run.checks, *judged))),))
    settings = export_settings(export)
    if gate.slos or gate.compare_file:
        options = apply_gate(options, dataclasses.replace(gate, compare_file=gate.compare_file
                                                          or options.gate.compare_file))
        measurements = inject_reference(measurements, gate.compare_file)
    to = Destination(fmt, report.output, export=settings,
                     presentation=Presentation(verbose=verbose, no_color=report.no_color))
    run_and_exit(target, options, selection, to, recorded=measurements)
