"""The probe catalog: every measurement a check can ask the context for.

Each entry names its function and result type as ``module:attr`` strings,
resolved on first use, so importing the catalog (and ``llmdoctor --help``)
stays cheap. A probe takes the `Context` and returns a serialisable
dataclass, or raises `ProbeUnavailable` with a reason.

``local`` probes read only this machine (files, the OS, NVML), never the
endpoint: fixture cases run them even when replaying recorded measurements
(``Context.replay_local``); ``llmdoctor replay`` does not, since the recording
came from another machine or time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PROBES", "ProbeSpec"]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe: ``module:function`` that measures and ``module:Class`` it returns.

    Both are resolved lazily so importing the catalog stays cheap.
    """

    name: str
    function: str
    result_type: str
    description: str
    local: bool = False
    #: Computed from other probes' results only: replay recomputes it from the recorded ones.
    derived: bool = False

    def resolve_function(self) -> Callable[[Any], Any]:
        """Import and return the probe function."""
        return _import(self.function)

    def resolve_type(self) -> type:
        """Import and return the result dataclass."""
        return _import(self.result_type)


def _import(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


# The probe catalog. Order is irrelevant: probes run when a check first needs them.
PROBES: dict[str, ProbeSpec] = {
    spec.name: spec
    for spec in (
        ProbeSpec(
            "discovery",
            "llmdoctor.probes.discovery:discover",
            "llmdoctor.probes.discovery:EndpointInfo",
            "GET /v1/models: is the endpoint reachable, which models it serves",
        ),
        ProbeSpec(
            "first_request",
            "llmdoctor.probes.baseline:first_request",
            "llmdoctor.probes.timing:RequestTiming",
            'the very first generation request ("Say ok.", streamed)',
        ),
        ProbeSpec(
            "baseline",
            "llmdoctor.probes.baseline:baseline",
            "llmdoctor.probes.baseline:BaselineResult",
            'warm-up, then repeated minimal "Say ok." requests',
        ),
        ProbeSpec(
            "sweep",
            "llmdoctor.probes.baseline:sweep",
            "llmdoctor.probes.baseline:SweepResult",
            "requests of growing max_tokens for the flat-latency fit",
        ),
        ProbeSpec(
            "dns",
            "llmdoctor.probes.dns:resolve",
            "llmdoctor.probes.dns:DnsResult",
            "name resolution time of the endpoint host",
        ),
        ProbeSpec(
            "server_metrics",
            "llmdoctor.probes.metrics:server_metrics",
            "llmdoctor.probes.metrics:ServerMetricsResult",
            "backend metrics (/metrics, Ollama /api/ps, llama.cpp /slots) before and after the baseline",
        ),
        ProbeSpec(
            "gpu_metrics",
            "llmdoctor.probes.gpu:gpu_metrics",
            "llmdoctor.probes.gpu:GpuSnapshot",
            "GPU state from the serving host's DCGM exporter (--gpu-metrics-url)",
        ),
        ProbeSpec(
            "gpu",
            "llmdoctor.probes.gpu:gpu",
            "llmdoctor.probes.gpu:GpuSnapshot",
            "GPU utilisation, memory, throttling of this machine via NVML",
            local=True,
        ),
        ProbeSpec(
            "host",
            "llmdoctor.probes.host:host",
            "llmdoctor.probes.host:HostResult",
            "CPU, RAM, swap of this machine and the inference-server process",
            local=True,
        ),
        ProbeSpec(
            "requests",
            "llmdoctor.probes.requests:read_requests",
            "llmdoctor.probes.requests:RequestSet",
            "the application's request bodies from --request files",
            local=True,
        ),
        ProbeSpec(
            "server_tokens",
            "llmdoctor.probes.tokens:server_tokens",
            "llmdoctor.probes.tokens:ServerTokens",
            "prompt tokens of a few of the requests from the server's own /tokenize",
        ),
        ProbeSpec(
            "context_window",
            "llmdoctor.probes.tokens:context_window",
            "llmdoctor.probes.tokens:ContextWindow",
            "the model's context window (/v1/models max_model_len, llama.cpp /props n_ctx)",
        ),
        ProbeSpec(
            "prompt_tokens",
            "llmdoctor.probes.tokens:prompt_tokens",
            "llmdoctor.probes.tokens:PromptTokens",
            "prompt tokens of every request (server tokenizer, local tokenizer or estimate)",
            local=True,
        ),
        ProbeSpec(
            "prefill",
            "llmdoctor.probes.prefill:prefill",
            "llmdoctor.probes.prefill:PrefillResult",
            "a short and a long prompt: prefill cost per prompt token",
        ),
        ProbeSpec(
            "transport",
            "llmdoctor.probes.transport:probe",
            "llmdoctor.probes.transport:TransportResult",
            "TCP round trip, TLS handshake, keep-alive, HTTP/2 and proxies towards the endpoint",
        ),
        ProbeSpec(
            "client_limits",
            "llmdoctor.probes.client_limits:client_limits",
            "llmdoctor.probes.client_limits:ClientLimits",
            "this machine's open-file limit, ephemeral ports and sockets to the endpoint",
            local=True,
        ),
        ProbeSpec(
            "concurrency",
            "llmdoctor.probes.client_limits:concurrency",
            "llmdoctor.probes.client_limits:ConcurrencyResult",
            "latency at 1 vs N parallel requests (opt-in: --concurrency N)",
        ),
        ProbeSpec(
            "idle",
            "llmdoctor.probes.idle:idle_test",
            "llmdoctor.probes.idle:IdleResult",
            "one request after an idle wait, against the warm median (opt-in: --idle-test SECONDS)",
        ),
        ProbeSpec(
            "logs",
            "llmdoctor.probes.logs:scan_logs",
            "llmdoctor.logscan:LogScan",
            "the server's logs (--log FILE, --journal UNIT): OOMs, CUDA errors, preemption, load times",
            local=True,
        ),
        ProbeSpec(
            "followup_concurrency",
            "llmdoctor.probes.followup:followup_concurrency",
            "llmdoctor.probes.client_limits:ConcurrencyResult",
            "follow-up: latency of 2 requests alone, then 2 at once (ordered by the diagnosis)",
        ),
        ProbeSpec(
            "followup_idle",
            "llmdoctor.probes.followup:followup_idle",
            "llmdoctor.probes.idle:IdleResult",
            "follow-up: one request after a short idle wait (ordered by the diagnosis)",
        ),
        ProbeSpec(
            "lone_request",
            "llmdoctor.probes.followup:lone_request",
            "llmdoctor.probes.followup:LoneRequestResult",
            "follow-up: backend metrics scraped around one lone request (ordered by the diagnosis)",
        ),
        ProbeSpec(
            "repeat_prompt",
            "llmdoctor.probes.followup:repeat_prompt",
            "llmdoctor.probes.followup:RepeatPromptResult",
            "follow-up: the same long prompt twice, for the prefix-cache effect (ordered by the diagnosis)",
        ),
        ProbeSpec(
            "diagnosis",
            "llmdoctor.diagnosis.planner:diagnose_followups",
            "llmdoctor.diagnosis.model:Diagnosis",
            "differential diagnosis: hypotheses from the first pass, follow-up tests within --budget",
            derived=True,
        ),
        ProbeSpec(
            "reference",
            "llmdoctor.probes.reference:reference",
            "llmdoctor.probes.reference:Reference",
            "the baseline file to compare with (--compare FILE, saved by --save-baseline)",
            local=True,
        ),
    )
}


