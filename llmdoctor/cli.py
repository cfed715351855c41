"""Command-line interface: parse arguments, build the target, run, render, exit.

Exit codes follow the monitoring-plugin convention: 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN (the tool itself could not run: bad arguments or
input). Heavy modules are imported inside the commands so ``--help`` is fast.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import click

from llmdoctor import __version__
from llmdoctor.cli_gate import compare, gate_options, replay_gate_options

__all__ = ["main", "cli"]

EXIT_UNKNOWN = 3


class UsageProblem(click.ClickException):
    """A bad argument or input file: one line on stderr, exit 3."""

    exit_code = EXIT_UNKNOWN


def _split_ids(values: Sequence[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _require_known_ids(select: Sequence[str], ignore: Sequence[str]) -> None:
    """--select/--ignore: a prefix that matches no check is a typo, not an empty run that exits 0."""
    if not select and not ignore:
        return
    from llmdoctor.registry import load_registry
    from llmdoctor.registry import select as select_checks

    checks = load_registry().checks
    for flag, values in (("--select", select), ("--ignore", ignore)):
        for prefix in _split_ids(values):
            if not select_checks(checks, [prefix]):
                raise UsageProblem(f"{flag} {prefix}: no check id starts with it; `llmdoctor checks` lists them")


def _parse_headers(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    headers = []
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise UsageProblem("--header must look like 'Name: value' (got a value without a colon)")
        headers.append((name.strip(), value.strip()))
    return tuple(headers)


def _emit(text: str, output: str | None) -> None:
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageProblem(f"cannot write --output {output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _progress(enabled: bool) -> Any:
    """A callback showing progress on stderr when it is a terminal, else None."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True)
    status = console.status("starting…")
    status.start()

    def update(message: str) -> None:
        status.update(message)

    update.stop = status.stop  # type: ignore[attr-defined]
    return update


FORMATS = ("text", "json", "markdown", "junit", "html")


def _render_and_exit(report: Any, ctx: Any, fmt: str, output: str | None,
                     save: str | Sequence[str] | None) -> NoReturn:
    from llmdoctor.render import render

    for path in [save] if isinstance(save, str) else save or ():
        _save_measurements(report, ctx, path)
    _emit(render(report, fmt), output)
    sys.exit(report.exit_code)


def _save_measurements(report: Any, ctx: Any, path: str) -> None:
    import json

    from llmdoctor.recording import recording_dict

    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(recording_dict(report, ctx), fh, indent=1)
    except OSError as exc:
        raise UsageProblem(f"cannot write --save-measurements {path}: {exc.strerror}") from None


def _common_output_options(f: Any) -> Any:
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmdoctor")
def cli() -> None:
    """Diagnose where the latency of an LLM inference endpoint goes, and what to change.

    \b
    Start here:
      llmdoctor demo                                   # diagnose the built-in simulator
      llmdoctor check --endpoint http://localhost:8000 # vLLM, TGI, llama.cpp, Ollama, SGLang
      llmdoctor checks                                 # the checklist
      llmdoctor explain LD702                          # what a check means and how to fix it

    \b
    Exit codes: 0 OK · 1 WARNING · 2 CRITICAL · 3 UNKNOWN (bad arguments or input,
    or Ctrl-C before anything critical was found: the partial report is printed)
    """


@cli.command()
@click.option("--endpoint", "-e", default=None, metavar="URL",
              help="Base URL of the OpenAI-compatible API, with or without /v1 (http://host:8000). "
                   "Without it, the embedded demo simulator is diagnosed.")
@click.option("--model", "-m", default=None, help="Model to probe (default: the first one /v1/models lists).")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="NAME",
              help="Environment variable holding the API key (sent as a Bearer token, never printed).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="Extra request header (repeatable); values are never printed.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Per-request timeout in seconds (a wall-clock deadline, also for slow streams).")
@click.option("--max-requests", type=click.IntRange(1, 1000), default=30, show_default=True,
              help="Request budget: the doctor never sends more requests than this.")
@click.option("--samples", type=click.IntRange(1, 100), default=5, show_default=True,
              help='Warm "Say ok." samples for the baseline.')
@click.option("--typical-output-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Length of a typical answer, for the fixed-cost share (LD702).")
@click.option("--insecure", is_flag=True, help="Accept any TLS certificate (diagnosis only).")
@click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CA certificates for a private TLS endpoint.")
@click.option("--log", "logs", multiple=True, metavar="FILE",
              help="Server log to scan for OOM/CUDA errors, preemption, load times (repeatable; - for stdin).")
@click.option("--journal", "journal_unit", default=None, metavar="UNIT",
              help="Read the server log from journalctl -u UNIT.")
@click.option("--since", default=None, help="Only log lines since this time (journalctl syntax).")
@click.option("--metrics-url", default=None, metavar="URL",
              help="Prometheus metrics of the backend (default: try <server>/metrics).")
@click.option("--gpu-metrics-url", default=None, metavar="URL", help="DCGM exporter metrics URL.")
@click.option("--pid", type=int, default=None, help="PID of the server process (when it runs on this host).")
@click.option("--request", "request_files", multiple=True, metavar="FILE",
              help="Your application's request body, JSON or JSONL (repeatable; - for stdin).")
@click.option("--tokenizer", default=None, metavar="PATH", help="Local Hugging Face tokenizer directory (offline).")
@click.option("--context-window", type=click.IntRange(1), default=None, help="Model context window in tokens.")
@click.option("--dns-server", default=None, metavar="IP[:PORT]",
              help="DNS resolver to time (default: system resolvers).")
@click.option("--concurrency", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Opt-in concurrency probe: latency at 1 vs N parallel requests.")
@click.option("--idle-test", "idle_test_s", type=click.FloatRange(0, 3600), default=0.0, metavar="SECONDS",
              help="Opt-in: wait this long idle, then measure the after-idle penalty.")
@click.option("--budget", "followup_budget", default="requests=10,seconds=30", show_default=True,
              metavar="requests=N,seconds=S",
              help="What the follow-up tests of the differential diagnosis (LD720) may spend.")
@click.option("--no-followup", is_flag=True, help="Fixed checklist only: no hypotheses, no follow-up tests.")
@click.option("--save-measurements", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Save the raw measurements (no secrets) for `llmdoctor replay`.")
@click.option("--deadline", "deadline_s", type=click.FloatRange(0.5, 86400), default=None, metavar="SECONDS",
              help="Wall-clock limit for the whole run: no request starts after it, each gets at most the "
                   "time left; checks whose measurements could not run are skipped (\"deadline reached\").")
@click.option("--dry-run", is_flag=True,
              help="Print the requests the run would send (method, URL, body shape, upper bound) and send none.")
@click.option("--verbose", "-v", is_flag=True,
              help="Log every request on stderr (status, times, headers sent with secrets masked).")
@gate_options
@_common_output_options
def check(endpoint: str | None, model: str | None, api_key_env: str, headers: tuple[str, ...], timeout_s: float,
          max_requests: int, samples: int, typical_output_tokens: int, insecure: bool, ca_bundle: str | None,
          logs: tuple[str, ...], journal_unit: str | None, since: str | None, metrics_url: str | None,
          gpu_metrics_url: str | None, pid: int | None, request_files: tuple[str, ...], tokenizer: str | None,
          context_window: int | None, dns_server: str | None, concurrency: int, idle_test_s: float,
          followup_budget: str, no_followup: bool,
          save_measurements: str | None, deadline_s: float | None, dry_run: bool, verbose: bool, as_json: bool,
          fmt: str | None, output: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
          fail_on: str, **gate: Any) -> None:
    """Run the checklist against an endpoint and print a ranked diagnosis.

    \b
    The checklist runs in order: endpoint → input → server → cold start →
    network → client → parameters → baseline. Every request is timed
    (DNS, connect, TLS, first byte, first token, each token, total),
    counted against --max-requests and reported.

    \b
    Examples:
      llmdoctor check --endpoint http://localhost:8000 --model meta-llama/Llama-3.1-8B-Instruct
      llmdoctor check -e https://api.openai.com -m gpt-4o-mini --json -o report.json
      llmdoctor check -e http://gpu-box:8000 --log vllm.log --request req.json --fail-on critical
      llmdoctor check -e http://gpu-box:8000 --dry-run         # what would be sent, sending nothing
      llmdoctor check -e URL --slo ttft_p90=800ms --compare baseline.json --format junit -o llmdoctor.xml
      llmdoctor check --endpoints fleet.toml --json            # a fleet, one JSON report per line

    \b
    Failure modes (see the README's "Failure modes"): an endpoint that refuses, hangs, drips,
    redirects, rate-limits or answers garbage is a finding (LD001, exit 2), never a crash.
    Ctrl-C prints the partial report: exit 3, or 2 if something critical was already found.
    """
    from llmdoctor.cli_gate import apply_gate, require_format, run_modes
    from llmdoctor.target import Options, Target, TargetError, normalize_base_url

    if fmt is None:
        fmt = "json" if as_json else "text"
    options = Options(
        timeout_s=timeout_s, max_requests=max_requests, samples=samples,
        typical_output_tokens=typical_output_tokens, insecure=insecure, ca_bundle=ca_bundle,
        logs=logs, journal_unit=journal_unit, since=since, metrics_url=metrics_url,
        gpu_metrics_url=gpu_metrics_url, pid=pid, request_files=request_files, tokenizer=tokenizer,
        context_window=context_window, dns_server=dns_server, concurrency=concurrency, idle_test_s=idle_test_s,
        deadline_s=deadline_s, verbose=verbose, followup=not no_followup,
    )
    options = _with_budget(options, followup_budget)
    _validate_inputs(options)
    _require_known_ids(select, ignore)
    extra_headers = _parse_headers(headers)
    require_format(fmt)
    options = apply_gate(options, gate["slos"], gate["compare_file"])
    run_modes({"endpoint": endpoint, "model": model, "api_key_env": api_key_env, "headers": extra_headers},
              options, fmt, output, gate, select, ignore, fail_on)
    with contextlib.ExitStack() as stack:
        if endpoint is None:
            endpoint = stack.enter_context(_demo_server("demo", announce=fmt == "text"))
        try:
            base_url = normalize_base_url(endpoint)
        except TargetError as exc:
            raise UsageProblem(str(exc)) from None
        target = Target(base_url=base_url, model=model, api_key=os.environ.get(api_key_env) or None,
                        headers=extra_headers)
        if dry_run:
            _dry_run(target, options, select, ignore, output)
            return
        saves = [p for p in (save_measurements, gate["save_baseline"]) if p]
        if gate["save_baseline"] and select:  # a baseline needs the baseline and sweep probes measured
            select = (*select, "LD701", "LD702")
        _run(target, options, fmt, output, saves, select, ignore, fail_on)


def _dry_run(target: Any, options: Any, select: Sequence[str], ignore: Sequence[str], output: str | None) -> None:
    """--dry-run: print the plan of requests for the selected checks; nothing is sent."""
    from llmdoctor.plan import render_plan
    from llmdoctor.registry import load_registry
    from llmdoctor.registry import select as select_checks

    checks = select_checks(load_registry().checks, _split_ids(select), _split_ids(ignore))
    _emit(render_plan(target, options, checks), output)


@contextlib.contextmanager
def _demo_server(profile: str, *, announce: bool) -> Iterator[str]:
    """Run the embedded simulator for the duration of a command; yields its base URL."""
    from llmdoctor.sim.profiles import get_profile
    from llmdoctor.sim.server import SimServer

    try:
        sim_profile = get_profile(profile)
    except KeyError as exc:
        raise UsageProblem(str(exc.args[0]) if exc.args else f"unknown profile {profile!r}") from None
    with SimServer(sim_profile) as server:
        if announce:
            click.echo(f"Diagnosing the embedded simulator '{sim_profile.name}' on "
                       f"{server.base_url} ({sim_profile.description})\n", err=True)
        yield server.base_url


def _with_budget(options: Any, text: str) -> Any:
    """Options with the follow-up budget of ``--budget`` (a usage problem when unreadable)."""
    import dataclasses

    from llmdoctor.diagnosis.budget import BudgetError, parse_budget

    try:
        requests, seconds = parse_budget(text, options.followup_requests, options.followup_seconds)
    except BudgetError as exc:
        raise UsageProblem(str(exc)) from None
    return dataclasses.replace(options, followup_requests=requests, followup_seconds=seconds)


def _validate_inputs(options: Any) -> None:
    """Fail fast (exit 3) on input files that cannot be read, before sending anything."""
    for path in options.logs:
        if path != "-" and not os.path.isfile(path):
            raise UsageProblem(f"--log {path}: no such file")
    if options.request_files:
        from llmdoctor.request_files import RequestFileError, load_requests

        try:
            load_requests(options.request_files)
        except RequestFileError as exc:
            raise UsageProblem(str(exc)) from None


def _run(target: Any, options: Any, fmt: str, output: str | None, save: str | Sequence[str] | None,
         select: Sequence[str], ignore: Sequence[str], fail_on: str, recorded: Any = None) -> NoReturn:
    from llmdoctor.doctor import diagnose

    progress = _progress(fmt == "text" and output is None)
    try:
        report, ctx = diagnose(target, options, selected=_split_ids(select), ignored=_split_ids(ignore),
                               fail_on=fail_on, recorded=recorded, progress=progress)
    finally:
        if progress is not None:
            progress.stop()
    _render_and_exit(report, ctx, fmt, output, save)


@cli.command(name="checks")
@click.option("--json", "as_json", is_flag=True, help="List as JSON.")
def list_checks(as_json: bool) -> None:
    """List the checklist: ids, names, categories and titles, in the order they run."""
    from llmdoctor.registry import load_registry

    registry = load_registry()
    if as_json:
        import json

        rows = [{"id": c.id, "name": c.name, "category": c.category.value, "title": c.title,
                 "requires": [p.name for p in c.requires], "optional": [p.name for p in c.optional]}
                for c in registry.checks]
        click.echo(json.dumps(rows, indent=2))
        return
    for c in registry.checks:
        click.echo(f"{c.id:<7}{c.category.value:<12}{c.name:<28}{c.title}")
    for err in registry.errors:
        click.echo(f"(plugin {err.name} failed to load: {err.reason})", err=True)


@cli.command()
@click.argument("check_id")
def explain(check_id: str) -> None:
    """Print a check's documentation: what it checks, why it matters, how to fix it."""
    import inspect

    from llmdoctor.registry import load_registry

    check_cls = load_registry().by_id(check_id)
    if check_cls is None:
        raise UsageProblem(f"no check {check_id!r}; `llmdoctor checks` lists them")
    click.echo(f"{check_cls.id} {check_cls.name} — {check_cls.title}  [{check_cls.category.value}]\n")
    click.echo(inspect.cleandoc(check_cls.__doc__ or ""))
    if check_cls.declared():
        click.echo(f"\nMeasurements used: {', '.join(p.name for p in check_cls.declared())}")


@cli.command()
@click.argument("recording", type=click.Path(exists=True, dir_okay=False))
@replay_gate_options
@_common_output_options
def replay(recording: str, as_json: bool, fmt: str | None, output: str | None, select: tuple[str, ...],
           ignore: tuple[str, ...], fail_on: str, slos: tuple[str, ...], compare_file: str | None) -> None:
    """Re-run the checks offline on measurements saved with --save-measurements.

    With --slo / --compare, judge the recorded measurements by these objectives or this baseline.
    """
    from llmdoctor.cli_gate import apply_gate, inject_reference, require_format
    from llmdoctor.recording import RecordingError, load_recording

    try:
        target, options, measurements = load_recording(recording)
    except RecordingError as exc:
        raise UsageProblem(str(exc)) from None
    require_format(fmt or "text")
    _require_known_ids(select, ignore)
    if slos or compare_file:
        options = apply_gate(options, slos, compare_file or options.compare_file)
        measurements = inject_reference(measurements, compare_file)
    _run(target, options, fmt or ("json" if as_json else "text"), output, None, select, ignore, fail_on,
         recorded=measurements)


@cli.command()
@click.option("--profile", default="demo", show_default=True, help="Simulator profile (see serve-sim --list).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def demo(profile: str, as_json: bool) -> None:
    """Start the built-in simulator and diagnose it: a full run with no LLM server around.

    The default profile has a high fixed cost per request and a cold start;
    try --profile slow-decode, long-prefill, slow-floor or close-connections (queueing only shows
    under concurrent load: `serve-sim --profile queueing` and `check --concurrency 4`).
    Exits 0 when the diagnosis ran (whatever it found), 3 when it could not.
    """
    from llmdoctor.doctor import diagnose
    from llmdoctor.render import render
    from llmdoctor.target import Options, Target

    fmt = "json" if as_json else "text"
    with _demo_server(profile, announce=not as_json) as base_url:
        progress = _progress(not as_json)
        try:
            report, _ = diagnose(Target(base_url=base_url), Options(), progress=progress)
        finally:
            if progress is not None:
                progress.stop()
    _emit(render(report, fmt), None)
    sys.exit(0)


@cli.command(name="serve-sim")
@click.option("--profile", default="healthy", show_default=True, help="Latency/fault profile.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep it on loopback).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0 = any free).")
@click.option("--list", "list_profiles", is_flag=True, help="List the profiles and exit.")
def serve_sim(profile: str, host: str, port: int, list_profiles: bool) -> None:
    """Serve the OpenAI-compatible simulator (real SSE streaming, injectable latency and faults)."""
    from llmdoctor.sim.profiles import PROFILES, get_profile
    from llmdoctor.sim.server import SimServer, serve_forever

    if list_profiles:
        for name, p in PROFILES.items():
            click.echo(f"{name:<20}{p.description}")
        return
    try:
        sim_profile = get_profile(profile)
    except KeyError as exc:
        raise UsageProblem(str(exc.args[0]) if exc.args else f"unknown profile {profile!r}") from None

    def ready(server: SimServer) -> None:
        click.echo(f"llmdoctor simulator '{profile}' serving {server.base_url} (Ctrl-C to stop)", err=True)

    serve_forever(sim_profile, host, port, ready_callback=ready)


cli.add_command(compare)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point: run the CLI, mapping every usage problem to one line and exit 3."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="llmdoctor",
                        standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"llmdoctor: error: {exc.format_message()}", err=True)
        sys.exit(EXIT_UNKNOWN)
    except click.exceptions.Abort:
        click.echo("llmdoctor: aborted", err=True)
        sys.exit(EXIT_UNKNOWN)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(code if isinstance(code, int) else 0)
