"""What the commands print and save: the report in its format, the recording, progress on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import click

from llmdoctor.cli.usage import UsageProblem, split_ids

if TYPE_CHECKING:
    from llmdoctor.export import ExportSettings

__all__ = ["FORMATS", "FORMAT_OF_SUFFIX", "NO_COLOR_OPTION", "Presentation", "check_destination",
           "common_output_options", "emit", "output_format", "progress", "render_and_exit", "report_text",
           "run_and_exit", "save_measurements", "write_file"]

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
    """Write `text` to `path` (`llmdoctor.inputs.open_output`: a FIFO nobody reads is refused); exit 3 if it fails."""
    from llmdoctor.inputs import InputError, open_output

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


def render_and_exit(report: Any, ctx: Any, fmt: str, output: str | None,
                    save: str | Sequence[str] | None, export: ExportSettings | None = None,
                    presentation: Presentation | None = None) -> NoReturn:
    """Save the recordings asked for, print the report (or write it to `output`, saying where on
    stderr), deliver its metrics (--push-gateway, --textfile), exit with its code."""
    from llmdoctor.cli.export import deliver
    from llmdoctor.render.prometheus import result_for_report

    for path in [save] if isinstance(save, str) else save or ():
        save_measurements(report, ctx, path)
    emit(report_text(report, fmt, presentation if output is None else None), output)
    if output:
        click.echo(f"llmdoctor: wrote the {fmt} report to {output}", err=True)
    sys.exit(deliver([result_for_report(report)], export, report.exit_code))


def save_measurements(report: Any, ctx: Any, path: str) -> None:
    """Write the recording of this run (`llmdoctor.recording`) to `path`."""
    import json

    from llmdoctor.recording import recording_dict
    from llmdoctor.redact import redact_output_obj

    data = redact_output_obj(recording_dict(report, ctx))
    write_file(path, "--save-measurements", json.dumps(data, indent=1, allow_nan=False))  # to_data wrote NaN as "NaN"


def run_and_exit(target: Any, options: Any, fmt: str, output: str | None, save: str | Sequence[str] | None,
                 select: Sequence[str], ignore: Sequence[str], fail_on: str, recorded: Any = None,
                 export: ExportSettings | None = None, presentation: Presentation | None = None,
                 deadline_at: float | None = None) -> NoReturn:
    """Diagnose (live, or on `recorded` measurements), then `render_and_exit`.

    `deadline_at`: the ``perf_counter()`` instant of ``--deadline``, counted from the command's start.
    """
    from llmdoctor.doctor import diagnose

    check_destination(fmt, output)
    shown = progress(fmt == "text" and output is None,
                     color=not (presentation is not None and presentation.no_color))
    try:
        report, ctx = diagnose(target, options, selected=split_ids(select), ignored=split_ids(ignore),
                               fail_on=fail_on, recorded=recorded, progress=shown, deadline_at=deadline_at)
    finally:
        if shown is not None:
            shown.stop()
    render_and_exit(report, ctx, fmt, output, save, export, presentation)


NO_COLOR_OPTION = click.option("--no-color", is_flag=True,
                               help="Plain text even on a terminal (as does NO_COLOR set to anything).")


def common_output_options(f: Any) -> Any:
    """--json, --format, --output, --select, --ignore, --fail-on and --no-color (check and replay)."""
    options = [
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
    ]
    for option in reversed(options):
        f = option(f)
    return f
