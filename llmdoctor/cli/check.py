"""`llmdoctor check`: run the checklist against an endpoint (or the embedded demo simulator).

Its options arrive as five typed specs (`llmdoctor.cli.check_args`: the endpoint, the run's options,
the gate, the modes, the output), checked in one order before anything is sent, and build the
`Target` and the `Options` of the run; --endpoints and --watch hand over to `llmdoctor.cli.modes`,
--dry-run prints the request plan and sends nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING

import click

from llmdoctor.cli.check_args import EndpointArgs, OutputArgs, RunArgs, output_options, run_options, target_options
from llmdoctor.cli.export import export_settings
from llmdoctor.cli.gate import GateArgs, apply_gate, gate_options
from llmdoctor.cli.helpgroups import GroupedCommand
from llmdoctor.cli.modes import ModeArgs, mode_options, run_modes
from llmdoctor.cli.output import Destination, Selection, emit, run_and_exit
from llmdoctor.cli.simulator import demo_server
from llmdoctor.cli.usage import (
    check_client,
    require_finite,
    require_format,
    require_known_ids,
    target_from_args,
    validate_inputs,
    with_budget,
)

if TYPE_CHECKING:
    from llmdoctor.options import Options
    from llmdoctor.target import Target

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
@target_options
@run_options
@gate_options
@mode_options
@output_options
def check(target: EndpointArgs, run: RunArgs, gate: GateArgs, mode: ModeArgs, output: OutputArgs) -> None:
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

    require_finite()
    deadline = Deadline(run.budget.deadline_s)  # the whole run counts, from here: reading the inputs too
    report = output.report
    fmt = report.format
    options = with_budget(run.options(verbose=output.verbose), run.budget.followup_budget)
    validate_inputs(options, deadline)
    require_known_ids(report.select, report.ignore)
    spec = target.spec()
    require_format(fmt)
    export = export_settings(output.export)
    options = apply_gate(options, gate)
    selection = report.selection
    if gate.save_baseline and selection.select:  # a baseline needs the baseline and sweep probes measured
        selection = dataclasses.replace(selection, select=(*selection.select, "LD701", "LD702"))
    to = Destination(fmt, report.output, tuple(p for p in (output.save_measurements, gate.save_baseline) if p),
                     export, output.presentation)
    run_modes(spec, options, mode, report.selection, to, deadline=deadline)
    with contextlib.ExitStack() as stack:
        if spec.url is None:
            spec = dataclasses.replace(spec, url=stack.enter_context(demo_server("demo", announce=fmt == "text")))
        built = target_from_args(spec)
        check_client(built, options)
        if mode.dry_run:
            _dry_run(built, options, report.selection, report.output)
            return
        run_and_exit(built, options, selection, to, deadline_at=deadline.at)


def _dry_run(target: Target, options: Options, selection: Selection, output: str | None) -> None:
    """--dry-run: print the plan of requests for the selected checks; nothing is sent."""
    from llmdoctor.checklist.registry import load_registry
    from llmdoctor.checklist.registry import select as select_checks
    from llmdoctor.plan import render_plan

    checks = select_checks(load_registry().checks, selection.selected, selection.ignored)
    emit(render_plan(target, options, checks), output)
