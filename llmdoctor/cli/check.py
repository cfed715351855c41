"""`llmdoctor check`: run the checklist against an endpoint (or the embedded demo simulator).

Its options build the `Target` and the `Options` of the run; --endpoints and --watch hand over to
`llmdoctor.cli.modes`, --dry-run prints the request plan and sends nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

import click

from llmdoctor.cli.export import export_options, export_settings
from llmdoctor.cli.helpgroups import GroupedCommand
from llmdoctor.cli.modes import apply_gate, gate_options, run_modes
from llmdoctor.cli.output import Presentation, common_output_options, emit, output_format, run_and_exit
from llmdoctor.cli.simulator import demo_server
from llmdoctor.cli.usage import (
    check_client,
    header_args,
    require_finite,
    require_format,
    require_known_ids,
    split_ids,
    target_from_args,
    validate_inputs,
    with_budget,
)

__all__ = ["check"]


#: check --help, by what the options are for.
OPTION_GROUPS = (
    ("Target", ("endpoint", "model", "api_key_env", "headers", "timeout_s", "insecure", "ca_bundle", "dns_server")),
    ("Request budget", ("max_requests", "samples", "typical_output_tokens", "concurrency", "idle_test_s",
                        "followup_budget", "no_followup", "deadline_s", "dry_run")),
    ("Evidence sources", ("logs", "journal_unit", "since", "metrics_url", "gpu_metrics_url", "pid")),
    ("Request lint", ("request_files", "tokenizer", "context_window")),
    ("Gate", ("fail_on", "slos", "compare_file", "save_baseline", "select", "ignore")),
    ("Output", ("as_json", "fmt", "output", "verbose", "no_color", "save_measurements", "push_gateway", "push_job",
                "textfile_dir")),
    ("Fleet", ("endpoints_file", "rate", "watch_s", "watch_count")),
)


@click.command(cls=GroupedCommand, option_groups=OPTION_GROUPS)
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
              help="DNS resolver to time; the transport probe connects where its answers point "
                   "(default: the system resolvers).")
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
              help="Log every request on stderr (status, times, headers sent with secrets masked), and list "
                   "the skipped checks with their reasons in the report.")
@gate_options
@export_options
@common_output_options
def check(endpoint: str | None, model: str | None, api_key_env: str, headers: tuple[str, ...], timeout_s: float,
          max_requests: int, samples: int, typical_output_tokens: int, insecure: bool, ca_bundle: str | None,
          logs: tuple[str, ...], journal_unit: str | None, since: str | None, metrics_url: str | None,
          gpu_metrics_url: str | None, pid: int | None, request_files: tuple[str, ...], tokenizer: str | None,
          context_window: int | None, dns_server: str | None, concurrency: int, idle_test_s: float,
          followup_budget: str, no_followup: bool,
          save_measurements: str | None, deadline_s: float | None, dry_run: bool, verbose: bool, as_json: bool,
          fmt: str | None, output: str | None, select: tuple[str, ...], ignore: tuple[str, ...],
          fail_on: str, no_color: bool, **gate: Any) -> None:
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
      llmdoctor check --endpoints fleet.toml --push-gateway http://pushgateway:9091   # into Prometheus

    \b
    Failure modes (see the README's "Failure modes"): an endpoint that refuses, hangs, drips,
    redirects, rate-limits or answers garbage is a finding (LD001, exit 2), never a crash.
    Ctrl-C prints the partial report: exit 3, or 2 if something critical was already found.
    """
    from llmdoctor.deadline import Deadline
    from llmdoctor.options import DiagnosisOptions, NetworkOptions, Options, RequestPolicy, ServerEvidence, Workload
    from llmdoctor.target import TargetSpec

    require_finite()
    deadline = Deadline(deadline_s)  # the whole run counts, from here: reading the inputs too
    fmt = output_format(fmt, as_json, output)
    options = Options(
        request=RequestPolicy(timeout_s=timeout_s, max_requests=max_requests, samples=samples,
                              idle_test_s=idle_test_s, deadline_s=deadline_s, verbose=verbose),
        evidence=ServerEvidence(logs=logs, journal_unit=journal_unit, since=since, metrics_url=metrics_url,
                                gpu_metrics_url=gpu_metrics_url, pid=pid),
        workload=Workload(request_files=request_files, tokenizer=tokenizer, context_window=context_window,
                          typical_output_tokens=typical_output_tokens),
        network=NetworkOptions(dns_server=dns_server, insecure=insecure, ca_bundle=ca_bundle, concurrency=concurrency),
        diagnosis=DiagnosisOptions(followup=not no_followup),
    )
    options = with_budget(options, followup_budget)
    validate_inputs(options, deadline)
    require_known_ids(select, ignore)
    spec = TargetSpec(endpoint, model=model, api_key_env=api_key_env, headers=header_args(headers))
    require_format(fmt)
    export = export_settings(gate)
    options = apply_gate(options, gate["slos"], gate["compare_file"])
    run_modes(spec, options, fmt, output, gate, select, ignore, fail_on, dry_run=dry_run, deadline=deadline)
    with contextlib.ExitStack() as stack:
        if spec.url is None:
            spec = dataclasses.replace(spec, url=stack.enter_context(demo_server("demo", announce=fmt == "text")))
        target = target_from_args(spec)
        check_client(target, options)
        if dry_run:
            _dry_run(target, options, select, ignore, output)
            return
        saves = [p for p in (save_measurements, gate["save_baseline"]) if p]
        if gate["save_baseline"] and select:  # a baseline needs the baseline and sweep probes measured
            select = (*select, "LD701", "LD702")
        run_and_exit(target, options, fmt, output, saves, select, ignore, fail_on, export=export,
                     presentation=Presentation(verbose=verbose, no_color=no_color), deadline_at=deadline.at)


def _dry_run(target: Any, options: Any, select: Sequence[str], ignore: Sequence[str], output: str | None) -> None:
    """--dry-run: print the plan of requests for the selected checks; nothing is sent."""
    from llmdoctor.plan import render_plan
    from llmdoctor.registry import load_registry
    from llmdoctor.registry import select as select_checks

    checks = select_checks(load_registry().checks, split_ids(select), split_ids(ignore))
    emit(render_plan(target, options, checks), output)
