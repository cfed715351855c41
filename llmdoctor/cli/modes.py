"""The modes of ``check`` beside one run: --dry-run, --endpoints (a fleet) and --watch.

``check`` applies `mode_options` (a `ModeArgs`) and hands over to `run_modes`, which returns
only when neither a fleet nor a watch was asked for; their output is `llmdoctor.render`'s. Heavy
imports stay inside the functions so ``llmdoctor --help`` is fast.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import click

from llmdoctor.cli.export import deliver
from llmdoctor.cli.output import Destination, Selection, emit
from llmdoctor.cli.specs import option_group
from llmdoctor.cli.usage import UsageProblem, check_client, target_from_args

if TYPE_CHECKING:
    from llmdoctor.deadline import Deadline
    from llmdoctor.fleet import FleetEntry
    from llmdoctor.options import Options
    from llmdoctor.reporting.report import Report
    from llmdoctor.target import Target, TargetSpec

__all__ = ["ModeArgs", "mode_options", "run_modes"]


@dataclass(frozen=True)
class ModeArgs:
    """``--dry-run``, ``--endpoints``, ``--rate``, ``--watch``, ``--watch-count`` as given."""

    dry_run: bool = False
    endpoints_file: str | None = None
    rate: float = 5.0
    watch_s: float | None = None
    watch_count: int = 0


#: --dry-run, and the fleet's and watch's options: a `ModeArgs` named ``mode``.
mode_options = option_group(
    "mode", ModeArgs,
    click.option("--dry-run", is_flag=True,
                 help="Print the requests the run would send (method, URL, body shape, upper bound) and send none."),
    click.option("--endpoints", "endpoints_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                 help="Check a fleet: one URL per line, or TOML [endpoints.NAME] tables with url, model, "
                      "api_key_env. Concurrent; --json prints one report per line (NDJSON)."),
    click.option("--rate", type=click.FloatRange(0.1, 1000), default=5.0, show_default=True,
                 help="With --endpoints: total requests per second across the whole fleet."),
    click.option("--watch", "watch_s", type=click.FloatRange(0.1, 86400), default=None, metavar="SECONDS",
                 help="Re-run the cheap probes (LD001, LD701) every SECONDS and show the breakdown live."),
    click.option("--watch-count", type=click.IntRange(0), default=0, show_default=True,
                 help="With --watch: stop after N rounds (0: until Ctrl-C)."),
)


def run_modes(spec: TargetSpec, options: Options, mode: ModeArgs, selection: Selection, to: Destination,
              deadline: Deadline | None = None) -> None:
    """Run --endpoints (fleet) or --watch when asked (never returns then); otherwise return.

    With --dry-run a fleet prints each endpoint's plan and sends nothing; --watch refuses it.
    `deadline` (``--deadline``, started with the command) bounds the whole fleet, or the whole watch.
    """
    if mode.dry_run and mode.watch_s is not None:
        raise UsageProblem("--dry-run lists the requests of one run: use it without --watch")
    if to.output and mode.watch_s is not None:  # it was ignored: every round went to stdout anyway
        raise UsageProblem("--watch prints each round on standard output (redirect it); -o is for single runs "
                           "and fleets")
    if mode.dry_run and mode.endpoints_file:
        _fleet_dry_run(spec, options, mode, selection, to.output)
    at = deadline.at if deadline is not None else None
    if mode.endpoints_file:
        _fleet(spec, options, mode, selection, to, at)
    if mode.watch_s is not None:
        _watch(spec, options, mode, selection, to, at)


def _fleet_entries(spec: TargetSpec, endpoints_file: str, options: Options) -> list[tuple[FleetEntry, Target]]:
    """The fleet's endpoints and their targets, each checked as a target and a probe client: exit 3
    before any probing."""
    from llmdoctor.fleet import FleetError, entry_spec, load_endpoints

    if spec.url is not None:
        raise UsageProblem("give either --endpoint or --endpoints, not both")
    try:
        entries = load_endpoints(endpoints_file)
    except FleetError as exc:
        raise UsageProblem(str(exc)) from None
    targets = []
    for entry in entries:
        try:
            target = target_from_args(entry_spec(entry, spec))
            check_client(target, options)
        except UsageProblem as exc:
            raise UsageProblem(f"--endpoints {endpoints_file}: {entry.name}: {exc.message}") from None
        targets.append((entry, target))
    return targets


def _fleet_dry_run(spec: TargetSpec, options: Options, mode: ModeArgs, selection: Selection,
                   output: str | None) -> NoReturn:
    """--endpoints with --dry-run: each endpoint's plan, one after the other; nothing is sent."""
    from llmdoctor.checklist.registry import load_registry
    from llmdoctor.checklist.registry import select as select_checks
    from llmdoctor.plan import render_plan

    assert mode.endpoints_file is not None
    checks = select_checks(load_registry().checks, selection.selected, selection.ignored)
    entries = _fleet_entries(spec, mode.endpoints_file, options)
    parts = [f"llmdoctor dry run — a fleet of {len(entries)} endpoint{'s' if len(entries) != 1 else ''}, "
             f"at most {mode.rate:g} requests per second in all: nothing is sent.\n"]
    for entry, target in entries:
        parts.append(f"[{entry.name}]\n" + render_plan(target, options, checks))
    emit("\n".join(parts), output)
    sys.exit(0)


def _fleet(spec: TargetSpec, options: Options, mode: ModeArgs, selection: Selection, to: Destination,
           deadline_at: float | None) -> NoReturn:
    from llmdoctor.fleet import run_fleet, worst_exit_code
    from llmdoctor.render.fleet import render_fleet_ndjson, render_fleet_text
    from llmdoctor.render.prometheus import EndpointResult, render_exposition
    from llmdoctor.target import display_url

    fmt, output = to.fmt, to.output
    if fmt not in ("text", "json", "prometheus"):
        raise UsageProblem("--endpoints prints text (a summary table), --json (NDJSON) or --format prometheus, "
                           "not " + fmt)
    assert mode.endpoints_file is not None
    fleet = _fleet_entries(spec, mode.endpoints_file, options)  # built and checked once, then diagnosed
    results = run_fleet(fleet, options, rate=mode.rate, selected=selection.selected,
                        ignored=selection.ignored, fail_on=selection.fail_on, deadline_at=deadline_at)
    codes = [r.exit_code if r is not None else 3 for _, r, _ in results]
    metrics = [EndpointResult(entry.name, display_url(entry.url), report) for entry, report, _ in results]
    if fmt == "prometheus":
        text = render_exposition(metrics)
    elif fmt == "json":
        text = render_fleet_ndjson(results)
    else:
        text = render_fleet_text(results, worst=worst_exit_code(codes))
    emit(text, output)
    sys.exit(deliver(metrics, to.export, worst_exit_code(codes)))


def _watch(spec: TargetSpec, options: Options, mode: ModeArgs, selection: Selection, to: Destination,
           deadline_at: float | None) -> NoReturn:
    from llmdoctor.watch import watch

    if spec.url is None:
        raise UsageProblem("--watch needs --endpoint")
    if to.export is not None and (to.export.push_gateway or to.export.textfile_dir):
        raise UsageProblem("--push-gateway and --textfile export single runs and --endpoints fleets, not --watch")
    if to.fmt not in ("text", "json"):
        raise UsageProblem("--watch shows text (live) or --json (one report per round, NDJSON), not " + to.fmt)
    target = target_from_args(spec)
    check_client(target, options)

    def emit_round(report: Report) -> None:
        from llmdoctor.render.watch import render_round_ndjson

        emit(render_round_ndjson(report), None)

    assert mode.watch_s is not None
    code = watch(target, options, interval_s=mode.watch_s, count=mode.watch_count, fail_on=selection.fail_on,
                 emit_json=emit_round if to.fmt == "json" else None, deadline_at=deadline_at)
    sys.exit(code)
