"""Where the Prometheus metrics of a run go: --push-gateway, --push-job, --textfile.

The destinations are checked before anything is measured (a bad URL, job or directory is a
usage error, exit 3, with nothing sent); the metrics are delivered after the report is out,
and a failed delivery is one line on stderr (`llmdoctor.reporting.publish.exit_code_after_export`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from llmdoctor.cli.specs import option_group
from llmdoctor.cli.usage import UsageProblem

if TYPE_CHECKING:
    from llmdoctor.render.prometheus import EndpointResult
    from llmdoctor.reporting.publish import ExportSettings

__all__ = ["ExportArgs", "export_options", "export_settings", "deliver"]


@dataclass(frozen=True)
class ExportArgs:
    """``--push-gateway``, ``--push-job`` and ``--textfile`` as given (`export_options`)."""

    push_gateway: str | None = None
    push_job: str = "llmdoctor"
    textfile_dir: str | None = None


#: --push-gateway, --push-job and --textfile (the Prometheus metrics' destinations): an `ExportArgs` named ``export``.
export_options = option_group(
    "export", ExportArgs,
    click.option("--push-gateway", default=None, metavar="URL",
                 help="Push the metrics to this Prometheus Pushgateway (job --push-job, instance = the "
                      "endpoint); a failed push is one line on stderr and exit 3 unless critical."),
    click.option("--push-job", default="llmdoctor", show_default=True, metavar="NAME",
                 help="Job name of the pushed metrics; with --textfile also the file name (NAME.prom)."),
    click.option("--textfile", "textfile_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
                 help="Write the metrics to DIR/NAME.prom atomically, for node-exporter's textfile collector."),
)


def export_settings(args: ExportArgs) -> ExportSettings:
    """The export destinations of the parsed options, checked before anything is measured."""
    from llmdoctor.reporting.publish import (
        ExportError,
        ExportSettings,
        check_job,
        check_push_gateway,
        check_textfile_dir,
    )

    settings = ExportSettings(push_gateway=args.push_gateway, job=args.push_job or "llmdoctor",
                              textfile_dir=args.textfile_dir)
    try:
        check_job(settings.job)
        if settings.push_gateway:
            check_push_gateway(settings.push_gateway)
        if settings.textfile_dir:
            check_textfile_dir(settings.textfile_dir)
    except ExportError as exc:
        raise UsageProblem(str(exc)) from None
    return settings


def deliver(results: Sequence[EndpointResult], settings: ExportSettings | None, code: int) -> int:
    """Push / write the metrics of `results` (after the report is out); returns the exit code to use."""
    if settings is None or not settings.wanted:
        return code
    from llmdoctor.reporting.publish import exit_code_after_export, export

    errors = export(results, settings)
    for error in errors:
        click.echo(f"llmdoctor: error: {error}", err=True)
    return exit_code_after_export(code, errors)
