"""The gate's command-line pieces: --slo, baselines, fleets, watch mode and `compare`.

Kept apart from ``cli.py`` so the core command stays readable; ``cli.py``
applies `gate_options` to ``check`` and registers `compare`. Heavy imports stay
inside the functions so ``llmdoctor --help`` is fast.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

__all__ = ["gate_options", "replay_gate_options", "apply_gate", "require_format", "run_modes", "compare",
           "inject_reference"]


def _problem(message: str) -> click.ClickException:
    from llmdoctor.cli import UsageProblem

    return UsageProblem(message)


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


def require_format(fmt: str) -> None:
    """Fail fast (exit 3) when the format's optional library is missing."""
    if fmt == "html":
        from llmdoctor.render.html import HtmlUnavailable, require_plotly

        try:
            require_plotly()
        except HtmlUnavailable as exc:
            raise _problem(str(exc)) from None


def apply_gate(options: Any, slos: Sequence[str], compare_file: str | None) -> Any:
    """Options with the SLOs (config file, overridden by flags) and the baseline file to compare with."""
    import os

    from llmdoctor.gate import SloError, load_config, merge_slos, parse_slo, slos_from_config

    try:
        config, source = load_config(".")
        merged = merge_slos(slos_from_config(config, source), [parse_slo(s) for s in slos])
    except SloError as exc:
        raise _problem(str(exc)) from None
    if compare_file is not None:
        from llmdoctor.probes.reference import reference_from_recording
        from llmdoctor.recording import RecordingError

        if not os.path.isfile(compare_file):
            raise _problem(f"--compare {compare_file}: no such file")
        try:
            reference_from_recording(compare_file)
        except RecordingError as exc:
            raise _problem(str(exc)) from None
    return dataclasses.replace(options, slos=merged, compare_file=compare_file)


def inject_reference(measurements: dict[str, Any], compare_file: str | None) -> dict[str, Any]:
    """For a replay with --compare: put the baseline file's reference into the recorded measurements."""
    if not compare_file:
        return measurements
    from llmdoctor.probes.reference import reference_from_recording
    from llmdoctor.serde import to_data

    return {**measurements, "reference": to_data(reference_from_recording(compare_file))}


def run_modes(target_args: dict[str, Any], options: Any, fmt: str, output: str | None, gate: dict[str, Any],
              select: Sequence[str], ignore: Sequence[str], fail_on: str) -> None:
    """Run --endpoints (fleet) or --watch when asked (never returns then); otherwise return."""
    if gate["endpoints_file"]:
        _fleet(target_args, options, fmt, output, gate, select, ignore, fail_on)
    if gate["watch_s"] is not None:
        _watch(target_args, options, fmt, gate, fail_on)


def _split(values: Sequence[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _fleet(target_args: dict[str, Any], options: Any, fmt: str, output: str | None, gate: dict[str, Any],
           select: Sequence[str], ignore: Sequence[str], fail_on: str) -> NoReturn:
    from llmdoctor.fleet import FleetError, fleet_table, load_endpoints, run_fleet, worst_exit_code

    if target_args["endpoint"] is not None:
        raise _problem("give either --endpoint or --endpoints, not both")
    if fmt not in ("text", "json"):
        raise _problem("--endpoints prints text (a summary table) or --json (NDJSON), not " + fmt)
    try:
        entries = load_endpoints(gate["endpoints_file"])
    except FleetError as exc:
        raise _problem(str(exc)) from None
    from llmdoctor.render.json import report_to_dict
    from llmdoctor.target import display_url

    results = run_fleet(entries, options, default_model=target_args["model"],
                        default_key_env=target_args["api_key_env"], headers=target_args["headers"],
                        rate=gate["rate"], selected=_split(select), ignored=_split(ignore), fail_on=fail_on)
    codes = [r.exit_code if r is not None else 3 for _, r, _ in results]
    if fmt == "json":
        lines = []
        for entry, report, error in results:
            if report is not None:
                lines.append(json.dumps({**report_to_dict(report), "name": entry.name}, ensure_ascii=False))
            else:
                lines.append(json.dumps({"name": entry.name, "endpoint": display_url(entry.url), "status": "unknown",
                                         "exit_code": 3, "error": error}))
        text = "\n".join(lines) + "\n"
    else:
        import io

        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, width=140, no_color=True, highlight=False).print(fleet_table(results))
        text = buf.getvalue() + f"Result: exit {worst_exit_code(codes)} (the worst of {len(codes)} endpoints)\n"
    from llmdoctor.cli import _emit

    _emit(text, output)
    sys.exit(worst_exit_code(codes))


def _watch(target_args: dict[str, Any], options: Any, fmt: str, gate: dict[str, Any], fail_on: str) -> NoReturn:
    from llmdoctor.target import Target, TargetError, normalize_base_url
    from llmdoctor.watch import watch

    if target_args["endpoint"] is None:
        raise _problem("--watch needs --endpoint")
    if fmt not in ("text", "json"):
        raise _problem("--watch shows text (live) or --json (one report per round, NDJSON), not " + fmt)
    try:
        base_url = normalize_base_url(target_args["endpoint"])
    except TargetError as exc:
        raise _problem(str(exc)) from None
    import os

    target = Target(base_url=base_url, model=target_args["model"],
                    api_key=os.environ.get(target_args["api_key_env"]) or None, headers=target_args["headers"])

    def emit(report: Any) -> None:
        from llmdoctor.render.json import report_to_dict

        sys.stdout.write(json.dumps(report_to_dict(report), ensure_ascii=False) + "\n")
        sys.stdout.flush()

    code = watch(target, options, interval_s=gate["watch_s"], count=gate["watch_count"], fail_on=fail_on,
                 emit_json=emit if fmt == "json" else None)
    sys.exit(code)


@click.command()
@click.option("--endpoint", "-e", "endpoints", multiple=True, required=True, metavar="URL",
              help="Give exactly two: A (e.g. production) and B (e.g. the same model in a clean environment).")
@click.option("--model", "-m", "models", multiple=True, metavar="NAME",
              help="Model to probe; once for both, or twice (A then B). Default: each endpoint's first model.")
@click.option("--api-key-env", "key_envs", multiple=True, metavar="NAME",
              help="Environment variable with the API key; once for both, or twice (A then B).")
@click.option("--samples", type=click.IntRange(5, 200), default=10, show_default=True,
              help="Interleaved samples per endpoint (at least 5 for the rank test).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Per-request timeout in seconds.")
@click.option("--insecure", is_flag=True, help="Accept any TLS certificate.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (schema/compare.schema.json).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to FILE.")
def compare(endpoints: tuple[str, ...], models: tuple[str, ...], key_envs: tuple[str, ...], samples: int,
            timeout_s: float, insecure: bool, as_json: bool, output: str | None) -> NoReturn:
    """Compare two endpoints phase by phase, requests interleaved A, B, A, B … so drift hits both alike.

    \b
    Each phase of the waterfall, TTFT and total are compared with a
    Mann-Whitney U test and a bootstrap interval of the difference of
    medians (a difference must exceed 10% and 5 ms to count).
    Exit: 0 no difference beyond noise · 1 a phase differs · 3 could not measure.

    \b
    Example:
      llmdoctor compare -e https://llm.prod.internal -e http://clean-box:8000 --samples 20
    """
    import os

    from llmdoctor.sidebyside import render_text, run_side_by_side, to_dict
    from llmdoctor.target import Options, Target, TargetError, normalize_base_url

    if len(endpoints) != 2:
        raise _problem("compare needs exactly two --endpoint values (A and B)")
    for name, values in (("--model", models), ("--api-key-env", key_envs)):
        if len(values) > 2:
            raise _problem(f"{name} takes one value (both) or two (A then B)")

    def pick(values: tuple[str, ...], i: int, default: str | None) -> str | None:
        return values[min(i, len(values) - 1)] if values else default

    targets = []
    for i, url in enumerate(endpoints):
        try:
            base = normalize_base_url(url)
        except TargetError as exc:
            raise _problem(str(exc)) from None
        key_env = pick(key_envs, i, "OPENAI_API_KEY") or "OPENAI_API_KEY"
        targets.append(Target(base_url=base, model=pick(models, i, None), api_key=os.environ.get(key_env) or None))
    options = Options(timeout_s=timeout_s, samples=samples, insecure=insecure, max_requests=samples + 10)
    result = run_side_by_side(targets, options)
    text = json.dumps(to_dict(result), indent=2) + "\n" if as_json else render_text(result)
    from llmdoctor.cli import _emit

    _emit(text, output)
    sys.exit(result.exit_code)
