"""The gate's and the fleet's command-line pieces: --slo, --compare, baselines, --endpoints, --watch.

Kept apart from the check command so it stays readable; ``check`` applies `gate_options` and
hands over to `run_modes`, ``replay`` applies `replay_gate_options`. Heavy imports stay inside
the functions so ``llmdoctor --help`` is fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from llmdoctor.cli.export import deliver, export_settings
from llmdoctor.cli.output import emit
from llmdoctor.cli.usage import UsageProblem, check_client, split_ids, target_from_args

if TYPE_CHECKING:
    from llmdoctor.deadline import Deadline
    from llmdoctor.fleet import FleetEntry
    from llmdoctor.target import Target, TargetSpec

__all__ = ["gate_options", "replay_gate_options", "apply_gate", "run_modes", "inject_reference"]


_SLO = click.option("--slo", "slos", multiple=True, metavar="METRIC=LIMIT",
                    help="Latency objective, e.g. ttft_p90=800ms, total_p50=2s, fixed_cost=300ms, per_token=20ms "
                         "(repeatable; also [slo] in llmdoctor.toml). A breach is a critical finding (LD710).")
_COMPARE = click.option("--compare", "compare_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="Report regressions against a baseline saved with --save-baseline (LD711).")


def gate_options(f: Any) -> Any:
    """Add the gate, fleet and watch options to ``check``."""
    options = [
        _SLO,
        click.option("--save-baseline", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Save this run's measurements as a baseline for a later --compare."),
        _COMPARE,
        click.option("--endpoints", "endpoints_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Check a fleet: one URL per line, or TOML [endpoints.NAME] tables with url, model, "
                          "api_key_env. Concurrent; --json prints one report per line (NDJSON)."),
        click.option("--rate", type=click.FloatRange(0.1, 1000), default=5.0, show_default=True,
                     help="With --endpoints: total requests per second across the whole fleet."),
        click.option("--watch", "watch_s", type=click.FloatRange(0.1, 86400), default=None, metavar="SECONDS",
                     help="Re-run the cheap probes (LD001, LD701) every SECONDS and show the breakdown live."),
        click.option("--watch-count", type=click.IntRange(0), default=0, show_default=True,
                     help="With --watch: stop after N rounds (0: until Ctrl-C)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def replay_gate_options(f: Any) -> Any:
    """Add --slo and --compare to ``replay`` (judge old measurements by new objectives)."""
    return _SLO(_COMPARE(f))


def apply_gate(options: Any, slos: Sequence[str], compare_file: str | None) -> Any:
    """Options with the SLOs (config file, overridden by flags) and the baseline file to compare with."""
    import dataclasses
    import os

    from llmdoctor.gate import SloError, load_config, merge_slos, parse_slo, slos_from_config

    try:
        config, source = load_config(".")
        merged = merge_slos(slos_from_config(config, source), [parse_slo(s) for s in slos])
    except SloError as exc:
        raise UsageProblem(str(exc)) from None
    if compare_file is not None:
        from llmdoctor.probes.reference import reference_from_recording
        from llmdoctor.recording import RecordingError

        if not os.path.isfile(compare_file):
            raise UsageProblem(f"--compare {compare_file}: no such file")
        try:
            reference_from_recording(compare_file)
        except RecordingError as exc:
            raise UsageProblem(str(exc)) from None
    return dataclasses.replace(options, gate=dataclasses.replace(options.gate, slos=merged, compare_file=compare_file))


def inject_reference(measurements: dict[str, Any], compare_file: str | None) -> dict[str, Any]:
    """For a replay with --compare: put the baseline file's reference into the recorded measurements."""
    if not compare_file:
        return measurements
    from llmdoctor.probes.reference import reference_from_recording
    from llmdoctor.serde import to_data

    return {**measurements, "reference": to_data(reference_from_recording(compare_file))}


def run_modes(spec: TargetSpec, options: Any, fmt: str, output: str | None, gate: dict[str, Any],
              select: Sequence[str], ignore: Sequence[str], fail_on: str, dry_run: bool = False,
              deadline: Deadline | None = None) -> None:
    """Run --endpoints (fleet) or --watch when asked (never returns then); otherwise return.

    With --dry-run a fleet prints each endpoint's plan and sends nothing; --watch refuses it.
    `deadline` (``--deadline``, started with the command) bounds the whole fleet, or the whole watch.
    """
    if dry_run and gate["watch_s"] is not None:
        raise UsageProblem("--dry-run lists the requests of one run: use it without --watch")
    if output and gate["watch_s"] is not None:  # it was ignored: every round went to stdout anyway
        raise UsageProblem("--watch prints each round on standard output (redirect it); -o is for single runs "
                           "and fleets")
    if dry_run and gate["endpoints_file"]:
        _fleet_dry_run(spec, options, gate, select, ignore, output)
    at = deadline.at if deadline is not None else None
    if gate["endpoints_file"]:
        _fleet(spec, options, fmt, output, gate, select, ignore, fail_on, at)
    if gate["watch_s"] is not None:
        _watch(spec, options, fmt, gate, fail_on, at)


def _fleet_entries(spec: TargetSpec, gate: dict[str, Any], options: Any) -> list[tuple[FleetEntry, Target]]:
    """The fleet's endpoints and their targets, each checked as a target and a probe client: exit 3
    before any probing."""
    from llmdoctor.fleet import FleetError, entry_spec, load_endpoints

    if spec.url is not None:
        raise UsageProblem("give either --endpoint or --endpoints, not both")
    try:
        entries = load_endpoints(gate["endpoints_file"])
    except FleetError as exc:
        raise UsageProblem(str(exc)) from None
    targets = []
    for entry in entries:
        try:
            target = target_from_args(entry_spec(entry, spec))
            check_client(target, options)
        except UsageProblem as exc:
            raise UsageProblem(f"--endpoints {gate['endpoints_file']}: {entry.name}: {exc.message}") from None
        targets.append((entry, target))
    return targets


def _fleet_dry_run(spec: TargetSpec, options: Any, gate: dict[str, Any], select: Sequence[str],
                   ignore: Sequence[str], output: str | None) -> NoReturn:
    """--endpoints with --dry-run: each endpoint's plan, one after the other; nothing is sent."""
    from llmdoctor.plan import render_plan
    from llmdoctor.registry import load_registry
    from llmdoctor.registry import select as select_checks

    checks = select_checks(load_registry().checks, split_ids(select), split_ids(ignore))
    entries = _fleet_entries(spec, gate, options)
    parts = [f"llmdoctor dry run — a fleet of {len(entries)} endpoint{'s' if len(entries) != 1 else ''}, "
             f"at most {gate['rate']:g} requests per second in all: nothing is sent.\n"]
    for entry, target in entries:
        parts.append(f"[{entry.name}]\n" + render_plan(target, options, checks))
    emit("\n".join(parts), output)
    sys.exit(0)


def _fleet(spec: TargetSpec, options: Any, fmt: str, output: str | None, gate: dict[str, Any],
           select: Sequence[str], ignore: Sequence[str], fail_on: str, deadline_at: float | None) -> NoReturn:
    from llmdoctor.fleet import fleet_table, run_fleet, worst_exit_code

    if fmt not in ("text", "json", "prometheus"):
        raise UsageProblem("--endpoints prints text (a summary table), --json (NDJSON) or --format prometheus, "
                           "not " + fmt)
    settings = export_settings(gate)
    entries = [entry for entry, _ in _fleet_entries(spec, gate, options)]
    from llmdoctor.render.json import report_to_dict
    from llmdoctor.target import display_url

    results = run_fleet(entries, options, defaults=spec, rate=gate["rate"], selected=split_ids(select),
                        ignored=split_ids(ignore), fail_on=fail_on, deadline_at=deadline_at)
    codes = [r.exit_code if r is not None else 3 for _, r, _ in results]
    from llmdoctor.render.prometheus import EndpointResult, render_exposition

    metrics = [EndpointResult(entry.name, display_url(entry.url), report) for entry, report, _ in results]
    if fmt == "prometheus":
        text = render_exposition(metrics)
    elif fmt == "json":
        import json

        lines = []
        for entry, report, error in results:
            if report is not None:
                lines.append(json.dumps({**report_to_dict(report), "name": entry.name}, ensure_ascii=False))
            else:
                lines.append(json.dumps({"name": entry.name, "endpoint": display_url(entry.url), "status": "unknown",
                                         "exit_code": 3, "error": error}, ensure_ascii=False))
        text = "\n".join(lines) + "\n"
    else:
        import io

        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, width=140, no_color=True, highlight=False).print(fleet_table(results))
        text = buf.getvalue() + f"Result: exit {worst_exit_code(codes)} (the worst of {len(codes)} endpoints)\n"
    emit(text, output)
    sys.exit(deliver(metrics, settings, worst_exit_code(codes)))


def _watch(spec: TargetSpec, options: Any, fmt: str, gate: dict[str, Any], fail_on: str,
           deadline_at: float | None) -> NoReturn:
    from llmdoctor.watch import watch

    if spec.url is None:
        raise UsageProblem("--watch needs --endpoint")
    if gate.get("push_gateway") or gate.get("textfile_dir"):
        raise UsageProblem("--push-gateway and --textfile export single runs and --endpoints fleets, not --watch")
    if fmt not in ("text", "json"):
        raise UsageProblem("--watch shows text (live) or --json (one report per round, NDJSON), not " + fmt)
    target = target_from_args(spec)
    check_client(target, options)

    def emit_round(report: Any) -> None:
        import json

        from llmdoctor.render.json import report_to_dict

        emit(json.dumps(report_to_dict(report), ensure_ascii=False) + "\n", None)

    code = watch(target, options, interval_s=gate["watch_s"], count=gate["watch_count"], fail_on=fail_on,
                 emit_json=emit_round if fmt == "json" else None, deadline_at=deadline_at)
    sys.exit(code)
