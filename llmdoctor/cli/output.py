"""What the commands print and save: the report in its format, the recording, progress on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from llmdoctor.cli.usage import UsageProblem, split_ids

if TYPE_CHECKING:
    from llmdoctor.export import ExportSettings

__all__ = ["FORMATS", "common_output_options", "emit", "progress", "render_and_exit", "run_and_exit",
           "save_measurements", "write_file"]

FORMATS = ("text", "json", "markdown", "junit", "html", "prometheus")


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


def progress(enabled: bool) -> Any:
    """A callback showing progress on stderr when it is a terminal, else None."""
    if not enabled or sys.stderr is None or not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True)
    status = console.status("starting…")
    status.start()

    def update(message: str) -> None:
        status.update(message)

    update.stop = status.stop  # type: ignore[attr-defined]
    return update


def render_and_exit(report: Any, ctx: Any, fmt: str, output: str | None,
                    save: str | Sequence[str] | None, export: ExportSettings | None = None) -> NoReturn:
    """Save the recordings asked for, print the report, deliver its metrics (--push-gateway,
    --textfile), exit with its code."""
    from llmdoctor.cli.export import deliver
    from llmdoctor.render import render
    from llmdoctor.render.prometheus import result_for_report

    for path in [save] if isinstance(save, str) else save or ():
        save_measurements(report, ctx, path)
    emit(render(report, fmt), output)
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
                 export: ExportSettings | None = None, deadline_at: float | None = None) -> NoReturn:
    """Diagnose (live, or on `recorded` measurements), then `render_and_exit`.

    `deadline_at`: the ``perf_counter()`` instant of ``--deadline``, counted from the command's start.
    """
    from llmdoctor.doctor import diagnose

    shown = progress(fmt == "text" and output is None)
    try:
        report, ctx = diagnose(target, options, selected=split_ids(select), ignored=split_ids(ignore),
                               fail_on=fail_on, recorded=recorded, progress=shown, deadline_at=deadline_at)
    finally:
        if shown is not None:
            shown.stop()
    render_and_exit(report, ctx, fmt, output, save, export)


def common_output_options(f: Any) -> Any:
    """--json, --format, --output, --select, --ignore and --fail-on (check and replay)."""
    options = [
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema_version'd)."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                     help="Output format (default text; --json is short for --format json)."),
        click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                     help="Write the report to FILE instead of stdout."),
        click.option("--select", multiple=True, metavar="IDS",
                     help="Run only checks whose id starts with these prefixes (LD2, LD701; repeatable, "
                          "comma-separated)."),
        click.option("--ignore", multiple=True, metavar="IDS", help="Skip checks by id prefix (LD402)."),
        click.option("--fail-on", type=click.Choice(["warning", "critical"]), default="warning", show_default=True,
                     help="Lowest severity that makes the exit code non-zero (a CI gate tolerating warnings "
                          "uses critical)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f
