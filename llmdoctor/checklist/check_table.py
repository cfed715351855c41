"""The built-in checks: one line each (id, module in ``checks/``, class, state). The one source.

Modelled on ruff's ``codes.rs``. Everything else that names a built-in check is derived from this
table: the ``[project.entry-points."llmdoctor.checks"]`` block of ``pyproject.toml`` and the
generated index ``llmdoctor/checklist/check_index.py`` are both written by ``python -m llmdoctor.checklist.indexgen``
(``--check`` says whether they are stale; ``tests/test_check_index.py`` fails while they are), and
a run loads the built-in checks from this table, so a new check runs before the package is
reinstalled. Adding a check: its module in ``checks/``, its line here, then that command.
Third-party checks are not listed here: they register through the ``llmdoctor.checks``
entry-point group of their own distribution and are always stable.

A check's state (`CheckState`):

- **stable**: runs by default; its id, name and findings follow the report's compatibility rules.
- **preview**: new, its thresholds still being measured. It does not run by default, nor when a
  ``--select`` prefix merely covers it (``--select LD4``): it runs only when ``--select`` names it
  exactly, by id or name (``--select LD412``), the way ruff's ``explicit-preview-rules`` works. So
  a preview check never changes the outcome of a run that did not ask for it.
  ``llmdoctor checks`` lists it with its state.
- **deprecated**: still runs as a stable check does (its id stays in reports, a contract), and
  ``llmdoctor checks`` marks it; it is removed only in a later minor version, with a changelog
  entry.

Moving a check from preview to stable is a one-word change on its line here (and regenerating).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = ["BUILTIN_CHECKS", "PACKAGE", "STATES", "BuiltinCheck", "CheckState", "state_of"]

#: The package the top-level ``checks/`` folder is installed as (pyproject.toml's package-dir).
PACKAGE = "llmdoctor.checks"


class CheckState(str, Enum):
    """How far a check is along: see the module docstring for what each state means for a run."""

    STABLE = "stable"
    PREVIEW = "preview"
    DEPRECATED = "deprecated"


STABLE, PREVIEW, DEPRECATED = CheckState.STABLE, CheckState.PREVIEW, CheckState.DEPRECATED


class BuiltinCheck(NamedTuple):
    """One line of the table: a check's id, its module under ``checks/``, its class and its state."""

    id: str
    module: str
    cls: str
    state: CheckState

    @property
    def entry_point(self) -> str:
        """The entry-point value, ``llmdoctor.checks.<module>:<class>``."""
        return f"{PACKAGE}.{self.module}:{self.cls}"


BUILTIN_CHECKS: tuple[BuiltinCheck, ...] = (
    BuiltinCheck("LD001", "ld001_reachability", "Reachability", STABLE),
    BuiltinCheck("LD002", "ld002_generation_failures", "GenerationFailures", STABLE),
    BuiltinCheck("LD101", "ld101_prompt_tokens", "PromptTokenCount", STABLE),
    BuiltinCheck("LD102", "ld102_message_format", "MessageFormat", STABLE),
    BuiltinCheck("LD103", "ld103_odd_characters", "OddCharacters", STABLE),
    BuiltinCheck("LD201", "ld201_gpu_saturation", "GpuSaturation", STABLE),
    BuiltinCheck("LD202", "ld202_gpu_memory", "GpuMemoryFull", STABLE),
    BuiltinCheck("LD203", "ld203_queue_building", "QueueBuilding", STABLE),
    BuiltinCheck("LD204", "ld204_kv_cache_pressure", "KvCachePressure", STABLE),
    BuiltinCheck("LD205", "ld205_preemptions", "Preemptions", STABLE),
    BuiltinCheck("LD206", "ld206_log_errors", "LogErrors", STABLE),
    BuiltinCheck("LD207", "ld207_loaded_models", "LoadedModels", STABLE),
    BuiltinCheck("LD208", "ld208_host_pressure", "HostPressure", STABLE),
    BuiltinCheck("LD209", "ld209_log_context_overflow", "LogContextOverflow", STABLE),
    BuiltinCheck("LD210", "ld210_log_preemption", "LogPreemption", STABLE),
    BuiltinCheck("LD211", "ld211_slow_replica", "SlowReplica", STABLE),
    BuiltinCheck("LD212", "ld212_prefix_reuse", "PrefixReuse", STABLE),
    BuiltinCheck("LD301", "ld301_cold_start", "ColdStart", STABLE),
    BuiltinCheck("LD302", "ld302_recent_restart", "RecentRestart", STABLE),
    BuiltinCheck("LD303", "ld303_log_model_load", "LogModelLoad", STABLE),
    BuiltinCheck("LD304", "ld304_after_idle", "AfterIdlePenalty", STABLE),
    BuiltinCheck("LD305", "ld305_loading_responses", "LoadingResponses", STABLE),
    BuiltinCheck("LD401", "ld401_network_share", "NetworkShare", STABLE),
    BuiltinCheck("LD402", "ld402_slow_dns", "SlowDns", STABLE),
    BuiltinCheck("LD403", "ld403_dns_fallback", "DnsFallback", STABLE),
    BuiltinCheck("LD404", "ld404_ipv6_unreachable", "Ipv6Unreachable", STABLE),
    BuiltinCheck("LD405", "ld405_short_dns_ttl", "ShortDnsTtl", STABLE),
    BuiltinCheck("LD406", "ld406_rtt_share", "RttShare", STABLE),
    BuiltinCheck("LD407", "ld407_no_connection_reuse", "NoConnectionReuse", STABLE),
    BuiltinCheck("LD408", "ld408_slow_tls", "SlowTls", STABLE),
    BuiltinCheck("LD409", "ld409_proxy_in_path", "ProxyInPath", STABLE),
    BuiltinCheck("LD410", "ld410_held_back_stream", "HeldBackStream", STABLE),
    BuiltinCheck("LD411", "ld411_in_front_of_server", "InFrontOfServer", STABLE),
    BuiltinCheck("LD501", "ld501_fd_limit", "FdLimit", STABLE),
    BuiltinCheck("LD502", "ld502_port_pressure", "PortPressure", STABLE),
    BuiltinCheck("LD503", "ld503_concurrency_queueing", "ConcurrencyQueueing", STABLE),
    BuiltinCheck("LD601", "ld601_max_tokens", "MaxTokens", STABLE),
    BuiltinCheck("LD602", "ld602_streaming_off", "StreamingOff", STABLE),
    BuiltinCheck("LD603", "ld603_multiple_choices", "MultipleChoices", STABLE),
    BuiltinCheck("LD604", "ld604_logprobs", "Logprobs", STABLE),
    BuiltinCheck("LD605", "ld605_sampling", "Sampling", STABLE),
    BuiltinCheck("LD606", "ld606_missing_stop", "MissingStop", STABLE),
    BuiltinCheck("LD607", "ld607_reasoning_effort", "ReasoningEffort", STABLE),
    BuiltinCheck("LD608", "ld608_tool_schemas", "ToolSchemas", STABLE),
    BuiltinCheck("LD701", "ld701_baseline_floor", "BaselineFloor", STABLE),
    BuiltinCheck("LD702", "ld702_flat_latency", "FlatLatency", STABLE),
    BuiltinCheck("LD703", "ld703_decode_speed", "DecodeSpeed", STABLE),
    BuiltinCheck("LD710", "ld710_slo", "SloBreached", STABLE),
    BuiltinCheck("LD711", "ld711_regression", "Regression", STABLE),
    BuiltinCheck("LD720", "ld720_confirmed_cause", "ConfirmedCause", STABLE),
)

#: The state of each built-in check, by entry-point value (what `state_of` reads).
STATES: dict[str, CheckState] = {row.entry_point: row.state for row in BUILTIN_CHECKS}


def state_of(entry_point: str) -> CheckState:
    """The state of the check with this entry-point value; a third-party check is stable."""
    return STATES.get(entry_point, STABLE)
