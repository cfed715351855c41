"""The options of one `check` run, by concern (request policy, server evidence, workload, network,
gate, diagnosis), with the defaults the CLI documents."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DiagnosisOptions",
    "GateOptions",
    "NetworkOptions",
    "OPTION_GROUPS",
    "OPTION_GROUP_OF",
    "Options",
    "RequestPolicy",
    "ServerEvidence",
    "Workload",
]


@dataclass(frozen=True)
class RequestPolicy:
    """What the doctor may send and how: timeouts, the request budget, samples, warm-up, the sweep."""

    timeout_s: float = 30.0
    max_requests: int = 30
    samples: int = 5
    warmup: int = 1
    sweep_max_tokens: tuple[int, ...] = (1, 16, 64)
    sweep_repeats: int = 2
    # Opt-in after-idle test: wait this long idle, then send one request (0: off).
    idle_test_s: float = 0.0
    # A wall-clock bound for the whole run (None: none), per-request log on stderr.
    deadline_s: float | None = None
    verbose: bool = False


@dataclass(frozen=True)
class ServerEvidence:
    """Server-side evidence: local log files, the journal, backend and DCGM metrics, the server process."""

    logs: tuple[str, ...] = ()
    journal_unit: str | None = None
    since: str | None = None
    metrics_url: str | None = None
    gpu_metrics_url: str | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Workload:
    """The application's own requests: request files, how to count their tokens, a typical answer."""

    request_files: tuple[str, ...] = ()
    tokenizer: str | None = None
    context_window: int | None = None
    # Length of a typical answer, for the fixed-cost share (LD702) and the parameter checks.
    typical_output_tokens: int = 64


@dataclass(frozen=True)
class NetworkOptions:
    """The network and the client: DNS server to time, TLS verification, the concurrency probe, and how
    many endpoints this process diagnoses at once (``fleet_size``: a fleet run, 0 or 1: one endpoint)."""

    dns_server: str | None = None
    insecure: bool = False
    ca_bundle: str | None = None
    concurrency: int = 0
    fleet_size: int = 0


@dataclass(frozen=True)
class GateOptions:
    """The pre-deploy gate: SLOs as canonical "metric=LIMITms" specs, and a baseline file to compare with."""

    slos: tuple[str, ...] = ()
    compare_file: str | None = None


@dataclass(frozen=True)
class DiagnosisOptions:
    """The differential diagnosis (probe ``diagnosis``, check LD720): follow-up tests within this budget."""

    followup: bool = True
    followup_requests: int = 10
    followup_seconds: float = 30.0


@dataclass(frozen=True)
class Options:
    """Knobs of one `check` run, by concern, with the defaults the CLI documents.

    Read them by group (``options.request.timeout_s``, ``options.evidence.logs``). Field names are
    unique across the groups, so `Options.of` and `with_fields` can take them flat
    (``Options.of(samples=3, logs=("vllm.log",))``), which tests and old recordings use.
    """

    request: RequestPolicy = field(default_factory=RequestPolicy)
    evidence: ServerEvidence = field(default_factory=ServerEvidence)
    workload: Workload = field(default_factory=Workload)
    network: NetworkOptions = field(default_factory=NetworkOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    diagnosis: DiagnosisOptions = field(default_factory=DiagnosisOptions)

    @classmethod
    def of(cls, **fields: Any) -> Options:
        """Options with these fields (flat names, each put in its group) and defaults elsewhere."""
        return cls().with_fields(**fields)

    def with_fields(self, **fields: Any) -> Options:
        """A copy with these fields changed (flat names, each put in its group); TypeError for an unknown one."""
        by_group: dict[str, dict[str, Any]] = {}
        for name, value in fields.items():
            group = OPTION_GROUP_OF.get(name)
            if group is None:
                raise TypeError(f"Options has no field {name!r}")
            by_group.setdefault(group, {})[name] = value
        changes = {g: dataclasses.replace(getattr(self, g), **values) for g, values in by_group.items()}
        return dataclasses.replace(self, **changes)


#: The groups of `Options`: field name -> its dataclass.
OPTION_GROUPS: dict[str, type[Any]] = {
    "request": RequestPolicy,
    "evidence": ServerEvidence,
    "workload": Workload,
    "network": NetworkOptions,
    "gate": GateOptions,
    "diagnosis": DiagnosisOptions,
}
#: The group of every option, by the option's (unique) name.
OPTION_GROUP_OF: dict[str, str] = {
    f.name: group for group, kind in OPTION_GROUPS.items() for f in dataclasses.fields(kind)
}
