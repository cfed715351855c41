"""The option groups of ``check``, each collected into one typed spec (`llmdoctor.cli.specs`).

``check`` receives an `EndpointArgs` (which endpoint), a `RunArgs` (the request budget, the
network, the server evidence and the workload: the `Options` of the run), the gate's `GateArgs`,
the modes' `ModeArgs` and an `OutputArgs` (where the report goes). Values are kept as given; the
command checks them in its order (bad input: one line, exit 3) and builds the run from them.
The help lists the options by `llmdoctor.cli.check.OPTION_GROUPS`, not by these groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from llmdoctor.cli.export import ExportArgs, export_options
from llmdoctor.cli.output import Presentation, ReportArgs, report_options
from llmdoctor.cli.specs import option_group, stack
from llmdoctor.options import NetworkOptions, ServerEvidence, Workload

if TYPE_CHECKING:
    from llmdoctor.options import Options
    from llmdoctor.target import TargetSpec

__all__ = ["BudgetArgs", "EndpointArgs", "OutputArgs", "RunArgs", "output_options", "run_options", "target_options"]


@dataclass(frozen=True)
class EndpointArgs:
    """``--endpoint``, ``--model``, ``--api-key-env``, ``--header`` as given (headers not parsed yet)."""

    endpoint: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    headers: tuple[str, ...] = ()

    def spec(self) -> TargetSpec:
        """The target spec (a usage problem when a header has no colon)."""
        from llmdoctor.cli.usage import header_args
        from llmdoctor.target import TargetSpec

        return TargetSpec(self.endpoint, model=self.model, api_key_env=self.api_key_env,
                          headers=header_args(self.headers))


@dataclass(frozen=True)
class BudgetArgs:
    """What the run may spend: per-request timeout, request budget, samples, the idle test, the deadline,
    and the follow-up tests' budget (``--budget``, unparsed) or none (``--no-followup``)."""

    timeout_s: float = 30.0
    max_requests: int = 30
    samples: int = 5
    idle_test_s: float = 0.0
    deadline_s: float | None = None
    followup_budget: str = "requests=10,seconds=30"
    no_followup: bool = False


@dataclass(frozen=True)
class RunArgs:
    """The options of one run by concern: the budget, the network, the server evidence, the workload."""

    budget: BudgetArgs
    network: NetworkOptions
    evidence: ServerEvidence
    workload: Workload

    def options(self, *, verbose: bool = False) -> Options:
        """The run's `Options` (the follow-up budget and the gate are added by the command, which checks them)."""
        from llmdoctor.options import DiagnosisOptions, Options, RequestPolicy

        b = self.budget
        return Options(
            request=RequestPolicy(timeout_s=b.timeout_s, max_requests=b.max_requests, samples=b.samples,
                                  idle_test_s=b.idle_test_s, deadline_s=b.deadline_s, verbose=verbose),
            evidence=self.evidence, workload=self.workload, network=self.network,
            diagnosis=DiagnosisOptions(followup=not b.no_followup),
        )


@dataclass(frozen=True)
class OutputArgs:
    """Where the report goes and how it is shown: format, file, checks, gate severity (`ReportArgs`),
    the metrics' export, ``--verbose`` and ``--save-measurements``."""

    report: ReportArgs
    export: ExportArgs
    verbose: bool = False
    save_measurements: str | None = None

    @property
    def presentation(self) -> Presentation:
        """How the text report is shown."""
        return Presentation(verbose=self.verbose, no_color=self.report.no_color)


#: --endpoint, --model, --api-key-env, --header: an `EndpointArgs` named ``target``.
target_options = option_group(
    "target", EndpointArgs,
    click.option("--endpoint", "-e", default=None, metavar="URL",
                 help="Base URL of the OpenAI-compatible API, with or without /v1 (http://host:8000). "
                      "Without it, the embedded demo simulator is diagnosed."),
    click.option("--model", "-m", default=None, help="Model to probe (default: the first one /v1/models lists)."),
    click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="NAME",
                 help="Environment variable holding the API key (sent as a Bearer token, never printed)."),
    click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
                 help="Extra request header (repeatable); values are never printed."),
)

_budget_options = option_group(
    "budget", BudgetArgs,
    click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
                 help="Per-request timeout in seconds (a wall-clock deadline, also for slow streams)."),
    click.option("--max-requests", type=click.IntRange(1, 1000), default=30, show_default=True,
                 help="Request budget: the doctor never sends more requests than this."),
    click.option("--samples", type=click.IntRange(1, 100), default=5, show_default=True,
                 help='Warm "Say ok." samples for the baseline.'),
    click.option("--idle-test", "idle_test_s", type=click.FloatRange(0, 3600), default=0.0, metavar="SECONDS",
                 help="Opt-in: wait this long idle, then measure the after-idle penalty."),
    click.option("--deadline", "deadline_s", type=click.FloatRange(0.5, 86400), default=None, metavar="SECONDS",
                 help="Wall-clock limit for the whole run: no request starts after it, each gets at most the "
                      "time left; checks whose measurements could not run are skipped (\"deadline reached\")."),
    click.option("--budget", "followup_budget", default="requests=10,seconds=30", show_default=True,
                 metavar="requests=N,seconds=S",
                 help="What the follow-up tests of the differential diagnosis (LD720) may spend."),
    click.option("--no-followup", is_flag=True, help="Fixed checklist only: no hypotheses, no follow-up tests."),
)

_network_options = option_group(
    "network", NetworkOptions,
    click.option("--dns-server", default=None, metavar="IP[:PORT]",
                 help="DNS resolver to time; the transport probe connects where its answers point "
                      "(default: the system resolvers)."),
    click.option("--insecure", is_flag=True, help="Accept any TLS certificate (diagnosis only)."),
    click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="CA certificates for a private TLS endpoint."),
    click.option("--concurrency", type=click.IntRange(0, 64), default=0, show_default=True,
                 help="Opt-in concurrency probe: latency at 1 vs N parallel requests."),
)

_evidence_options = option_group(
    "evidence", ServerEvidence,
    click.option("--log", "logs", multiple=True, metavar="FILE",
                 help="Server log to scan for OOM/CUDA errors, preemption, load times (repeatable; - for stdin)."),
    click.option("--journal", "journal_unit", default=None, metavar="UNIT",
                 help="Read the server log from journalctl -u UNIT."),
    click.option("--since", default=None, help="Only log lines since this time (journalctl syntax)."),
    click.option("--metrics-url", default=None, metavar="URL",
                 help="Prometheus metrics of the backend (default: try <server>/metrics)."),
    click.option("--gpu-metrics-url", default=None, metavar="URL", help="DCGM exporter metrics URL."),
    click.option("--pid", type=int, default=None, help="PID of the server process (when it runs on this host)."),
)

_workload_options = option_group(
    "workload", Workload,
    click.option("--request", "request_files", multiple=True, metavar="FILE",
                 help="Your application's request body, JSON or JSONL (repeatable; - for stdin)."),
    click.option("--tokenizer", default=None, metavar="PATH", help="Local Hugging Face tokenizer directory (offline)."),
    click.option("--context-window", type=click.IntRange(1), default=None, help="Model context window in tokens."),
    click.option("--typical-output-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True,
                 help="Length of a typical answer, for the fixed-cost share (LD702)."),
)

#: The budget, network, evidence and workload options: a `RunArgs` named ``run`` (built below its parts).
run_options = stack(_budget_options, _network_options, _evidence_options, _workload_options,
                    option_group("run", RunArgs))

#: The report's, the export's, --verbose and --save-measurements: an `OutputArgs` named ``output``.
output_options = stack(report_options, export_options, option_group(
    "output", OutputArgs,
    click.option("--verbose", "-v", is_flag=True,
                 help="Log every request on stderr (status, times, headers sent with secrets masked), and list "
                      "the skipped checks with their reasons in the report."),
    click.option("--save-measurements", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                 help="Save the raw measurements (no secrets) for `llmdoctor replay`."),
))
