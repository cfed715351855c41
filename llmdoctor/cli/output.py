"""What the commands print and save: the report in its format, the recording, progress on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import click

from llmdoctor.cli.specs import option_group
from llmdoctor.cli.usage import UsageProblem, split_ids

if TYPE_CHECKING:
    from llmdoctor.options import Options
    from llmdoctor.reporting.publish import ExportSettings
    from llmdoctor.target import Target

__all__ = ["Destination", "FORMATS", "FORMAT_OF_SUFFIX", "NO_COLOR_OPTION", "Presentation", "ReportArgs",
           "Selection", "check_destination", "emit", "output_format", "progress", "render_and_exit",
           "report_options", "report_text", "run_and_exit", "save_measurements", "write_file"]

FORMATS = ("text", "json", "markdown", "junit", "html", "prometheus")

#: The format ``-o FILE`` picks from its extension when neither --format nor --json says.
FORMAT_OF_SUFFIX = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown",
                    ".json": "json", ".xml": "junit", ".prom": "prometheus", ".txt": "text"}


def output_format(fmt: str | None, as_json: bool, output: str | None) -> str:
    """--format, else --json, else what -o's extension says (``-o report.html`` is an HTML page), else text."""
    if fmt is not None:
        return fmt
    if as_json:
        return "json"
    if output:
        import os.path

        return FORMAT_OF_SUFFIX.get(os.path.splitext(output)[1].lower(), "text")
    return "text"


def emit(text: str, output: str | None) -> None:
    """Write `text` (redacted: `llmdoctor.redact.redact_document`) to --output FILE, or to stdout.

    A file that cannot be written is a usage problem (exit 3); stdout that cannot be written
    (closed, full, a reader that left) is not: the run keeps its exit code
    (`llmdoctor.cli.streams` says why on stderr).
    """
    from llmdoctor.redact import redact_document

    text = redact_document(text)
    if output:
        write_file(output, "--output", text)
        return
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):  # not guarded (library use): the report cannot be shown, the code stands
        pass


def write_file(path: str, what: str, text: str) -> None:
    """Write `text` to `path` (`llmdoctor.inputs.bounded.open_output`: a FIFO nobody reads is refused); exit 3 if it
    fails."""
    from llmdoctor.inputs.bounded import InputError, open_output

    try:
        with open_output(path, what) as fh:
            fh.write(text)
    except InputError as exc:
        raise UsageProblem(str(exc)) from None
    except OSError as exc:
        raise UsageProblem(f"cannot write {what} {path}: {exc.strerror or exc}") from None


def progress(enabled: bool, color: bool = True) -> Any:
    """A callback showing progress on stderr when it is a terminal, else None; no colour with
    ``--no-color`` (`color` False) or ``NO_COLOR`` (rich reads it)."""
    if not enabled or sys.stderr is None or not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True, no_color=True if not color else None)
    status = console.status("starting…")
    status.start()

    def update(message: str) -> None:
        status.update(message)

    update.stop = status.stop  # type: ignore[attr-defined]
    return update


@dataclass(frozen=True)
class Presentation:
    """How a person asked to see the text report: ``--verbose`` lists the skipped checks, ``--no-color``."""

    verbose: bool = False
    no_color: bool = False


@dataclass(frozen=True)
class Selection:
    """Which checks run (``--select``/``--ignore`` id prefixes, as given) and the lowest severity that
    makes the exit code non-zero (``--fail-on``)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "warning"

    @property
    def selected(self) -> list[str]:
        """The --select prefixes, comma-separated values split."""
        return split_ids(self.select)

    @property
    def ignored(self) -> list[str]:
        """The --ignore prefixes, comma-separated values split."""
        return split_ids(self.ignore)


@dataclass(frozen=True)
class Destination:
    """Where a report goes: its format, stdout or `output`, the recordings to save, where its metrics
    are exported, and how the text is shown."""

    fmt: str = "text"
    output: str | None = None
    saves: tuple[str, ...] = ()
    export: ExportSettings | None = None
    presentation: Presentation = Presentation()


@dataclass(frozen=True)
class ReportArgs:
    """``--json``, ``--format``, ``--output``, ``--select``, ``--ignore``, ``--fail-on``, ``--no-color``
    (`report_options`), as given."""

    as_json: bool = False
    fmt: str | None = None
    output: str | None = None
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "warning"
    no_color: bool = False

    @property
    def format(self) -> str:
        """The format asked for (`output_format`)."""
        return output_format(self.fmt, self.as_json, self.output)

    @property
    def selection(self) -> Selection:
        """The checks asked for and the gate's severity."""
        return Selection(self.select, self.ignore, self.fail_on)


def check_destination(fmt: str, output: str | None) -> None:
    """Refuse (exit 3, before anything is sent) to pour an HTML page onto a terminal."""
    if fmt == "html" and not output and sys.stdout.isatty():
        raise UsageProblem("the HTML report is a file to open or attach: add -o report.html (or redirect stdout)")


def report_text(report: Any, fmt: str, presentation: Presentation | None = None) -> str:
    """The report in `fmt`; text is coloured and wrapped for stdout when it is a terminal.

    Colour only on a terminal, never with ``--no-color`` or ``NO_COLOR`` (any non-empty value,
    no-color.org); the width is ``COLUMNS``, else the terminal's, else 100 for a pipe or a file.
    """
    from llmdoctor.render import render

    if fmt != "text":
        return render(report, fmt)
    import os
    import shutil

    from llmdoctor.render.terminal import render_terminal

    shown = presentation or Presentation()
    tty = sys.stdout.isatty()
    color = tty and not shown.no_color and not os.environ.get("NO_COLOR")
    width = shutil.get_terminal_size().columns if tty else None
    return render_terminal(report, color=color, width=width, verbose=shown.verbose)


def render_and_exit(report: Any, ctx: Any, to: Destination) -> NoReturn:
    """Save the recordings asked for, print the report (or write it to `to.output`, saying where on
    stderr), deliver its metrics (--push-gateway, --textfile), exit with its code."""
    from llmdoctor.cli.export import deliver
    from llmdoctor.render.prometheus import result_for_report

    for path in to.saves:
        save_measurements(report, ctx, path)
    emit(report_text(report, to.fmt, to.presentation if to.output is None else None), to.output)
    if to.output:
        click.echo(f"llmdoctor: wrote the {to.fmt} report to {to.output}", err=True)
    sys.exit(deliver([result_for_report(report)], to.export, report.exit_code))


def save_measurements(report: Any, ctx: Any, path: str) -> None:
    """Write the recording of this run (`llmdoctor.inputs.recording`) to `path`."""
    import json

    from llmdoctor.inputs.recording import recording_dict
    from llmdoctor.redact import redact_output_obj

    data = redact_output_obj(recording_dict(report, ctx))
    write_file(path, "--save-measurements", json.dumps(data, indent=1, allow_nan=False))  # to_data wrote NaN as "NaN"


def run_and_exit(target: Target | None, options: Options, selection: Selection, to: Destination, *,
                 recorded: dict[str, Any] | None = None, deadline_at: float | None = None) -> NoReturn:
    """Diagnose (live, or on `recorded` measurements; `target` None: a recording that names no endpoint),
    then `render_and_exit`.

    `deadline_at`: the ``perf_counter()`` instant of ``--deadline``, counted from the command's start.
    """
    from llmdoctor.doctor import diagnose

    check_destination(to.fmt, to.output)
    shown = progress(to.fmt == "text" and to.output is None, color=not to.presentation.no_color)
    try:
        report, ctx = diagnose(target, options, selected=selection.selected, ignored=selection.ignored,
                               fail_on=selection.fail_on, recorded=recorded, progress=shown, deadline_at=deadline_at)
    finally:
        if shown is not None:
            shown.stop()
    render_and_exit(report, ctx, to)


NO_COLOR_OPTION = click.option("--no-color", is_flag=True,
                               help="Plain text even on a terminal (as does NO_COLOR set to anything).")


#: --json, --format, --output, --select, --ignore, --fail-on and --no-color (check and replay): a `ReportArgs`
#: named ``report``.
report_options = option_group(
    "report", ReportArgs,
    click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema_version'd)."),
    click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                 help="Output format (default text; --json is short for --format json)."),
    click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                 help="Write the report to FILE instead of stdout. Without --format or --json its "
                      "extension picks the format: .html, .md, .json, .xml (JUnit), .prom; else text."),
    click.option("--select", multiple=True, metavar="IDS",
                 help="Run only checks whose id starts with these prefixes (LD2, LD701; repeatable, "
                      "comma-separated)."),
    click.option("--ignore", multiple=True, metavar="IDS", help="Skip checks by id prefix (LD402)."),
    click.option("--fail-on", type=click.Choice(["warning", "critical"]), default="warning", show_default=True,
                 help="Lowest severity that makes the exit code non-zero (a CI gate tolerating warnings "
                      "uses critical)."),
    NO_COLOR_OPTION,
)
