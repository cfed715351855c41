"""Usage problems (one line on stderr, exit 3) and the checks of arguments made before anything is sent."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # imported where used: `llmdoctor --help` does not need them
    from llmdoctor.target import Options, Target

__all__ = [
    "EXIT_UNKNOWN",
    "UsageProblem",
    "header_args",
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
    from llmdoctor.registry import load_registry
    from llmdoctor.registry import select as select_checks

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


def target_from_args(
    url: str, *, model: str | None, api_key_env: str | None, headers: tuple[tuple[str, str], ...] = ()
) -> Target:
    """The target of --endpoint/--model/--api-key-env/--header (`llmdoctor.target.build_target`)."""
    from llmdoctor.target import TargetError, build_target

    try:
        return build_target(url, model=model, api_key_env=api_key_env, headers=headers)
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


def validate_inputs(options: Options) -> None:
    """Fail fast (exit 3) on input files that cannot be read, before sending anything."""
    for path in options.evidence.logs:
        if path != "-" and not os.path.isfile(path):
            raise UsageProblem(f"--log {path}: no such file")
    if options.workload.request_files:
        from llmdoctor.request_files import RequestFileError, load_requests

        try:
            load_requests(options.workload.request_files)
        except RequestFileError as exc:
            raise UsageProblem(str(exc)) from None


def require_format(fmt: str) -> None:
    """Fail fast (exit 3) when a format cannot be produced here (every built-in one can: the HTML
    report draws its charts as inline SVG and needs no optional library)."""
    from llmdoctor.render import RENDERERS

    if fmt not in RENDERERS:
        raise UsageProblem(f"unknown format {fmt!r}; one of {', '.join(RENDERERS)}")
