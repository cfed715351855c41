"""Usage problems (one line on stderr, exit 3) and the checks of arguments made before anything is sent."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # imported where used: `llmdoctor --help` does not need them
    from llmdoctor.deadline import Deadline
    from llmdoctor.options import Options
    from llmdoctor.target import Target, TargetSpec

__all__ = [
    "EXIT_UNKNOWN",
    "UsageProblem",
    "check_client",
    "header_args",
    "require_finite",
    "require_format",
    "require_known_ids",
    "split_ids",
    "target_from_args",
    "validate_inputs",
    "with_budget",
]

EXIT_UNKNOWN = 3


class UsageProblem(click.ClickException):
    """A bad argument or input file: one line on stderr, exit 3."""

    exit_code = EXIT_UNKNOWN


def split_ids(values: Sequence[str]) -> list[str]:
    """Check-id prefixes from repeatable, comma-separated --select/--ignore values."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def require_known_ids(select: Sequence[str], ignore: Sequence[str]) -> None:
    """--select/--ignore: a prefix that matches no check is a typo, not an empty run that exits 0."""
    if not select and not ignore:
        return
    from llmdoctor.checklist.registry import load_registry
    from llmdoctor.checklist.registry import select as select_checks

    checks = load_registry().checks
    for flag, values in (("--select", select), ("--ignore", ignore)):
        for prefix in split_ids(values):
            if not select_checks(checks, [prefix]):
                raise UsageProblem(f"{flag} {prefix}: no check id starts with it; `llmdoctor checks` lists them")


def header_args(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The --header values as pairs (a usage problem when one has no colon)."""
    from llmdoctor.target import TargetError, parse_headers

    try:
        return parse_headers(values)
    except TargetError as exc:
        raise UsageProblem(str(exc)) from None


def target_from_args(spec: TargetSpec) -> Target:
    """The target of --endpoint/--model/--api-key-env/--header (`llmdoctor.target.TargetSpec.build`)."""
    from llmdoctor.target import TargetError

    try:
        return spec.build()
    except TargetError as exc:
        raise UsageProblem(str(exc)) from None


def with_budget(options: Options, text: str) -> Options:
    """Options with the follow-up budget of ``--budget`` (a usage problem when unreadable)."""
    import dataclasses

    from llmdoctor.diagnosis.budget import BudgetError, parse_budget

    try:
        requests, seconds = parse_budget(text, options.diagnosis.followup_requests, options.diagnosis.followup_seconds)
    except BudgetError as exc:
        raise UsageProblem(str(exc)) from None
    diagnosis = dataclasses.replace(options.diagnosis, followup_requests=requests, followup_seconds=seconds)
    return dataclasses.replace(options, diagnosis=diagnosis)


def require_finite() -> None:
    """Every number option of the running command is finite: ``nan`` and ``inf`` are usage errors.

    Click's ranges let NaN through (every comparison with NaN is false), and a NaN deadline or
    timeout would turn every bound off.
    """
    ctx = click.get_current_context()
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                flag = max(param.opts, key=len) if param.opts else param.name
                raise UsageProblem(f"{flag} {v}: not a finite number")


def _log_path(path: str) -> None:
    """A --log file must be a file (a FIFO or device never ends: pipe it into ``--log -``)."""
    import stat

    try:
        st = os.stat(path)
    except OSError:
        raise UsageProblem(f"--log {path}: no such file") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageProblem(f"--log {path}: is a directory, not a log file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageProblem(f"--log {path}: not a regular file (for a pipe or a stream, use --log - and pipe it in)")


def validate_inputs(options: Options, deadline: Deadline | None = None) -> None:
    """Fail fast (exit 3) on input files that cannot be read, before sending anything.

    The request files are read here within the run's deadline (the clock started with the
    command): a deadline that passes while reading them is exit 3, nothing having been sent.
    """
    from llmdoctor.deadline import DeadlineExceeded
    from llmdoctor.redact import register_url_secrets
    from llmdoctor.target import TargetError, check_url

    for path in options.evidence.logs:
        if path != "-":
            _log_path(path)
    for flag, url in (("--metrics-url", options.evidence.metrics_url),
                      ("--gpu-metrics-url", options.evidence.gpu_metrics_url)):
        register_url_secrets(url)
        if url and "://" in url:
            try:
                check_url(url, flag)
            except TargetError as exc:
                raise UsageProblem(str(exc)) from None
    if options.workload.request_files:
        from llmdoctor.inputs.request_files import RequestFileError, load_requests

        try:
            load_requests(options.workload.request_files, deadline=deadline)
        except RequestFileError as exc:
            raise UsageProblem(str(exc)) from None
        except DeadlineExceeded as exc:
            raise UsageProblem(f"{exc}: nothing was sent") from None


def check_client(target: Target, options: Options) -> None:
    """Build the probe client the run will use (and close it): exit 3 when it cannot be built.

    A CA bundle that does not load, a proxy from the environment that the client cannot use
    (SOCKS without socksio, ``ftp://``, ``::::x``), a header it cannot encode: one line, before
    any probing, never a skipped LD001 and exit 0.
    """
    from llmdoctor.probes.client import ProbeClient
    from llmdoctor.target import TargetError

    try:
        client = ProbeClient.for_run(target, options, max_requests=1)
    except TargetError as exc:
        raise UsageProblem(str(exc)) from None
    client.close()


def require_format(fmt: str) -> None:
    """Fail fast (exit 3) when a format cannot be produced here (every built-in one can: the HTML
    report draws its charts as inline SVG and needs no optional library)."""
    from llmdoctor.render import RENDERERS

    if fmt not in RENDERERS:
        raise UsageProblem(f"unknown format {fmt!r}; one of {', '.join(RENDERERS)}")
