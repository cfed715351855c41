"""The probe catalog: every measurement a check can read, each declared once.

Each handle below is a `Probe` (see `llmdoctor.probes.contract`): its function and
result type as ``module:attr`` strings resolved on first use (importing the catalog
imports no probe module), what it reads, its request plan and what switches it off.
A probe takes the `Context` and returns a serialisable dataclass, or raises
`ProbeUnavailable` with a reason.

``local`` probes read only this machine (files, the OS, NVML), never the endpoint:
fixture cases run them even when replaying recorded measurements
(``Context.replay_local``); ``llmdoctor replay`` does not, since the recording came
from another machine or time.

`ORDER` is the canonical order a run measures in (derived probes last, then the closing ones
that sum up the run: every request's outcome, the client host's load): the order the
full checklist has always measured in, with the metrics scrape before the baseline it
brackets and the first generation request before any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from llmdoctor.probes.contract import AnyProbe, Endpoint, PlannedRequest, Probe, request
from llmdoctor.probes.sizes import CONCURRENCY_N, DEFAULT_IDLE_S, PREFIX_REPEATS, SERVER_TOKENS_SAMPLE, SINGLE_REQUESTS

if TYPE_CHECKING:
    from llmdoctor.diagnosis.model import Diagnosis
    from llmdoctor.logs.scan import LogScan
    from llmdoctor.measurements.client_host import ClientHostResult
    from llmdoctor.measurements.latency_samples import BaselineResult, SweepResult
    from llmdoctor.measurements.ledger import RequestLedger
    from llmdoctor.measurements.server_metrics import ServerMetricsResult
    from llmdoctor.measurements.timing import RequestTiming
    from llmdoctor.options import Options
    from llmdoctor.probes.attribution import AttributionResult
    from llmdoctor.probes.client_limits import ClientLimits, ConcurrencyResult
    from llmdoctor.probes.discovery import EndpointInfo
    from llmdoctor.probes.dns import DnsResult
    from llmdoctor.probes.followup import LoneRequestResult, RepeatPromptResult
    from llmdoctor.probes.gpu import GpuSnapshot
    from llmdoctor.probes.host import HostResult
    from llmdoctor.probes.idle import IdleResult
    from llmdoctor.probes.native_clocks import NativeTimings
    from llmdoctor.probes.prefill import PrefillResult
    from llmdoctor.probes.prefix_reuse import PrefixReuseResult
    from llmdoctor.probes.prompt_size import PromptSize
    from llmdoctor.probes.reference import Reference
    from llmdoctor.probes.requests import RequestSet
    from llmdoctor.probes.side_by_side import Interleaved
    from llmdoctor.probes.tokens import ContextWindow, PromptTokens, ServerTokens
    from llmdoctor.probes.transport import TransportResult

__all__ = [
    "ATTRIBUTION", "BASELINE", "CLIENT_HOST", "CLIENT_LIMITS", "CONCURRENCY", "CONTEXT_WINDOW", "DIAGNOSIS",
    "DISCOVERY", "DNS", "FIRST_REQUEST", "FOLLOWUP_CONCURRENCY", "FOLLOWUP_IDLE", "GPU", "GPU_METRICS", "HOST", "IDLE",
    "LOGS", "LONE_REQUEST", "NATIVE_TIMINGS", "ORDER", "OUTCOMES", "PREFILL", "PREFIX_REUSE", "PROBES", "PROMPT_SIZE",
    "PROMPT_TOKENS", "REFERENCE", "REPEAT_PROMPT", "REQUESTS", "SERVER_METRICS", "SERVER_TOKENS", "SIDE_BY_SIDE",
    "SWEEP", "TRANSPORT",
]

CHAT_BODY = '{"model", "messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 8, "stream": true}'
SWEEP_BODY = '{"model", "messages": [count from 1 to 1000], "max_tokens": N, "stream": true, "ignore_eos": true}'


# -- request plans (upper bounds; the run may send fewer) ----------------------------------------
def _discovery_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    fallback = [] if e.base_is_v1 else [request("GET", f"{e.origin}/v1/models", "-", 1,
                                                "only when the base path answers 404")]
    return [request("GET", f"{e.base}/models", "-", 1), *fallback]


def _first_request_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, 1)]


def _baseline_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, max(0, o.request.warmup - 1) + o.request.samples,
                    "stops at a 401/403/404 or at two 429/503 in a row (pausing up to 2 s after one, 3 times)")]


def _sweep_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, SWEEP_BODY, 2 * o.request.sweep_repeats * len(o.request.sweep_max_tokens),
                    f"max_tokens in {list(o.request.sweep_max_tokens)} × {o.request.sweep_repeats}; "
                    "each resent without ignore_eos if the server rejects it")]


def _server_metrics_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("GET", o.evidence.metrics_url or f"{e.root}/metrics", "-", 2, "before and after the baseline"),
            request("GET", f"{e.root}/api/ps", "-", 2, "only if no /metrics"),
            request("GET", f"{e.root}/props, {e.root}/slots", "-", 2, "only if neither answers")]


def _gpu_metrics_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("GET", o.evidence.gpu_metrics_url, "-", 1)] if o.evidence.gpu_metrics_url else []


def _context_window_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("GET", f"{e.root}/props", "-", 1, "only if /v1/models gives no context length")]


def _server_tokens_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    # Finding the API: /tokenize, then llama.cpp's /apply-template + /tokenize, then TGI's (4);
    # each further sampled body: at most /apply-template + /tokenize (2).
    return [request("POST", f"{e.root}/tokenize", '{"prompt" or "messages"}', 4 + 2 * (SERVER_TOKENS_SAMPLE - 1),
                    "a few of the --request bodies")]


def _prompt_size_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    # Two prompts: vLLM answers each /tokenize at once; finding llama-cpp-python's, llama.cpp's
    # (/apply-template first) or TGI's takes up to 4 requests for the first, 2 for the second.
    return [request("POST", f"{e.root}/tokenize", '{"messages": [a filler prompt of 0 or 200 words]}', 6,
                    "only when the context window is under 4,096 tokens")]


def _refit_plan(e: Endpoint) -> Sequence[PlannedRequest]:
    # llmdoctor.probes.window.send_fitting: a long prompt refused as larger than the window.
    return [request("POST", e.chat, '{"messages": [the refused long prompt], "max_tokens": 1}', 1,
                    "only when the long prompt is refused without the refusal's text (a cut stream): "
                    "asked again unstreamed to read the window"),
            request("POST", e.chat, '{"messages": [the long prompt resized], "max_tokens": 1, "stream": true}', 1,
                    "only when the server refused the long prompt as larger than its window")]


def _prefill_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    chats = [request("POST", e.chat, '{"messages": [short or long prompt], "max_tokens": 1, "stream": true}', 2),
             *_refit_plan(e)]
    if not o.workload.request_files:
        return chats
    # The two prompts counted by the tokenizer server_tokens found (llama.cpp: /apply-template + /tokenize each).
    return [*chats, request("POST", f"{e.root}/tokenize", '{"messages": [the short or the long prompt]}', 4,
                            "only when the answers report no usage and the server's tokenizer counted --request")]


def _prefix_reuse_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    metrics = o.evidence.metrics_url or f"{e.root}/metrics"
    return [request("POST", e.chat, '{"messages": [the largest --request chat, as it is], "max_tokens": 1, '
                    '"stream": true}', PREFIX_REPEATS, "the same prompt each time"),
            request("GET", metrics, "-", 2, "before and after, only when the server exports prefix-cache counters")]


def _idle_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, 1, f"after {o.request.idle_test_s:g} s idle")]


def _concurrency_step(e: Endpoint, o: Options, n: int) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, 1 + n, f"1 alone, then {n} in parallel"),
            request("POST/GET", f"{e.chat} or {o.evidence.metrics_url or e.root + '/metrics'}", CHAT_BODY,
                    SINGLE_REQUESTS - 1, "alone again, or one metrics scrape instead when the backend exports "
                    "a queue-time histogram")]


def _concurrency_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return _concurrency_step(e, o, o.network.concurrency)


def _followup_concurrency_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return _concurrency_step(e, o, CONCURRENCY_N)


def _followup_idle_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, 1, f"after {o.request.idle_test_s or DEFAULT_IDLE_S:g} s idle")]


def _lone_request_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    unless = "none when the scrapes around the baseline hold only its requests"
    return [request("GET", o.evidence.metrics_url or f"{e.root}/metrics", "-", 2,
                    f"before and after the request; {unless}"),
            request("POST", e.chat, CHAT_BODY, 1, unless)]


def _native_timings_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", f"{e.root}/api/chat", '{"model", "messages": [Say ok.], "stream": false}', 1,
                    "only when the backend is Ollama (its durations are on its native API only)")]


def _repeat_prompt_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, '{"messages": [the same long prompt], "max_tokens": 1, "stream": true}', 2),
            *_refit_plan(e)]


def _side_by_side_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST", e.chat, CHAT_BODY, max(1, o.request.warmup) + o.request.samples,
                    f"{max(1, o.request.warmup)} warm-up, then {o.request.samples} samples alternating with the "
                    "other endpoint's; as many to each")]


def _diagnosis_plan(e: Endpoint, o: Options) -> Sequence[PlannedRequest]:
    return [request("POST/GET", f"{e.chat}, {e.root}/metrics", "follow-up tests", o.diagnosis.followup_requests,
                    "the differential diagnosis orders only the tests whose outcome can still change its "
                    "conclusion (prompt-length pair, lone request, 2 at once, repeated prompt, 2 s idle), "
                    "within --budget; the checklist's own measurements answer some of them")]


# -- what switches a probe off --------------------------------------------------------------------
def _no_requests(o: Options) -> str | None:
    return None if o.workload.request_files else "no request given (use --request FILE)"


def _no_logs(o: Options) -> str | None:
    return None if o.evidence.logs or o.evidence.journal_unit else "no server log given (use --log FILE)"


def _no_gpu_metrics_url(o: Options) -> str | None:
    return None if o.evidence.gpu_metrics_url else \
        "no --gpu-metrics-url given (a DCGM exporter, usually http://HOST:9400/metrics)"


def _context_window_given(o: Options) -> str | None:
    return f"given by --context-window {o.workload.context_window}" if o.workload.context_window else None


def _no_concurrency(o: Options) -> str | None:
    return None if o.network.concurrency > 0 else "concurrency probe is opt-in: --concurrency N"


def _no_idle_test(o: Options) -> str | None:
    return None if o.request.idle_test_s > 0 else "idle test is opt-in: --idle-test SECONDS"


def _no_reference(o: Options) -> str | None:
    return None if o.gate.compare_file else "no baseline file given (--compare FILE)"


def _no_followup(o: Options) -> str | None:
    return None if o.diagnosis.followup else "follow-up tests off (--no-followup)"


# -- what makes a probe read another ---------------------------------------------------------------
def _dns_server_given(o: Options) -> bool:
    return bool(o.network.dns_server)  # the resolver the application uses: connect where it points


# -- the probes -----------------------------------------------------------------------------------
DISCOVERY: Probe[EndpointInfo] = Probe(
    "discovery", "llmdoctor.probes.discovery:discover", "llmdoctor.probes.discovery:EndpointInfo",
    "GET /v1/models: is the endpoint reachable, which models it serves", plan=_discovery_plan,
    title="the models the endpoint serves (GET /v1/models)",
)
FIRST_REQUEST: Probe[RequestTiming] = Probe(
    "first_request", "llmdoctor.probes.baseline:first_request", "llmdoctor.measurements.timing:RequestTiming",
    'the very first generation request ("Say ok.", streamed)', needs=(DISCOVERY,), plan=_first_request_plan,
    title="the first request",
)
BASELINE: Probe[BaselineResult] = Probe(
    "baseline", "llmdoctor.probes.baseline:baseline", "llmdoctor.measurements.latency_samples:BaselineResult",
    'warm-up, then repeated minimal "Say ok." requests', needs=(FIRST_REQUEST, DISCOVERY), plan=_baseline_plan,
    title='the warm "Say ok." requests (the floor every request pays)',
)
SWEEP: Probe[SweepResult] = Probe(
    "sweep", "llmdoctor.probes.baseline:sweep", "llmdoctor.measurements.latency_samples:SweepResult",
    "requests of growing max_tokens for the flat-latency fit", needs=(BASELINE,), plan=_sweep_plan,
    title="the output-length sweep (requests with max_tokens 1, 16 and 64)",
)
DNS: Probe[DnsResult] = Probe(
    "dns", "llmdoctor.probes.dns:resolve", "llmdoctor.probes.dns:DnsResult",
    "name resolution time of the endpoint host",
    title="how long the endpoint's name takes to resolve (DNS)",
)
SERVER_METRICS: Probe[ServerMetricsResult] = Probe(
    "server_metrics", "llmdoctor.probes.metrics:server_metrics",
    "llmdoctor.measurements.server_metrics:ServerMetricsResult",
    "backend metrics (/metrics, Ollama /api/ps, llama.cpp /slots) before and after the baseline",
    optional=(DISCOVERY, BASELINE), plan=_server_metrics_plan,
    title="the server's own metrics (/metrics, Ollama /api/ps, llama.cpp /slots)",
)
GPU_METRICS: Probe[GpuSnapshot] = Probe(
    "gpu_metrics", "llmdoctor.probes.gpu:gpu_metrics", "llmdoctor.probes.gpu:GpuSnapshot",
    "GPU state from the serving host's DCGM exporter (--gpu-metrics-url)",
    plan=_gpu_metrics_plan, off=_no_gpu_metrics_url,
    title="the serving host's GPUs (DCGM exporter, --gpu-metrics-url)",
)
GPU: Probe[GpuSnapshot] = Probe(
    "gpu", "llmdoctor.probes.gpu:gpu", "llmdoctor.probes.gpu:GpuSnapshot",
    "GPU utilisation, memory, throttling of this machine via NVML", local=True,
    title="this machine's GPUs (NVML)",
)
HOST: Probe[HostResult] = Probe(
    "host", "llmdoctor.probes.host:host", "llmdoctor.probes.host:HostResult",
    "CPU, RAM, swap of this machine and the inference-server process", local=True,
    title="this machine's CPU, memory and the server process",
)
REQUESTS: Probe[RequestSet] = Probe(
    "requests", "llmdoctor.probes.requests:read_requests", "llmdoctor.probes.requests:RequestSet",
    "the application's request bodies from --request files", local=True, off=_no_requests,
    title="your request files (--request)",
)
SERVER_TOKENS: Probe[ServerTokens] = Probe(
    "server_tokens", "llmdoctor.probes.tokens:server_tokens", "llmdoctor.probes.tokens:ServerTokens",
    "prompt tokens of a few of the requests from the server's own /tokenize",
    needs=(REQUESTS,), optional=(DISCOVERY,), plan=_server_tokens_plan,
    title="your prompts' tokens, counted by the server's tokenizer",
)
CONTEXT_WINDOW: Probe[ContextWindow] = Probe(
    "context_window", "llmdoctor.probes.tokens:context_window", "llmdoctor.probes.tokens:ContextWindow",
    "the model's context window (/v1/models max_model_len, llama.cpp /props n_ctx)",
    optional=(DISCOVERY,), plan=_context_window_plan, off=_context_window_given,
    title="the model's context window",
)
PROMPT_TOKENS: Probe[PromptTokens] = Probe(
    "prompt_tokens", "llmdoctor.probes.tokens:prompt_tokens", "llmdoctor.probes.tokens:PromptTokens",
    "prompt tokens of every request (server tokenizer, local tokenizer or estimate)",
    needs=(REQUESTS,), optional=(SERVER_TOKENS, CONTEXT_WINDOW), local=True,
    title="the prompt tokens of your requests",
)
PROMPT_SIZE: Probe[PromptSize] = Probe(
    "prompt_size", "llmdoctor.probes.prompt_size:prompt_size", "llmdoctor.probes.prompt_size:PromptSize",
    "the server's tokens per filler word, so long probe prompts fit a small context window",
    optional=(DISCOVERY, CONTEXT_WINDOW), plan=_prompt_size_plan,
    title="the server's tokens per word (long probe prompts sized to the window)",
)
PREFILL: Probe[PrefillResult] = Probe(
    "prefill", "llmdoctor.probes.prefill:prefill", "llmdoctor.probes.prefill:PrefillResult",
    "a short and a long prompt: prefill cost per prompt token",
    needs=(BASELINE,), optional=(DISCOVERY, CONTEXT_WINDOW, PROMPT_SIZE, SERVER_TOKENS), plan=_prefill_plan,
    title="a short and a long prompt (the cost of prompt processing)",
)
PREFIX_REUSE: Probe[PrefixReuseResult] = Probe(
    "prefix_reuse", "llmdoctor.probes.prefix_reuse:prefix_reuse", "llmdoctor.probes.prefix_reuse:PrefixReuseResult",
    "your largest prompt sent 3 times: does the server reuse its prefix (times to first token, cache counters)",
    needs=(REQUESTS, BASELINE), optional=(DISCOVERY, SERVER_METRICS), plan=_prefix_reuse_plan, off=_no_requests,
    title="your prompt sent again (prefix cache)",
)
TRANSPORT: Probe[TransportResult] = Probe(
    "transport", "llmdoctor.probes.transport:probe", "llmdoctor.probes.transport:TransportResult",
    "TCP round trip (handshakes), each resolved address in Happy-Eyeballs order, TLS handshake, keep-alive, "
    "HTTP/2 and proxies towards the endpoint", optional=(BASELINE,), optional_if=((DNS, _dns_server_given),),
    title="the network path (round trip, TLS, keep-alive, proxies)",
)
CLIENT_LIMITS: Probe[ClientLimits] = Probe(
    "client_limits", "llmdoctor.probes.client_limits:client_limits", "llmdoctor.probes.client_limits:ClientLimits",
    "this machine's open-file limit, ephemeral ports and sockets to the endpoint", local=True,
    title="this machine's client limits (open files, ephemeral ports)",
)
CONCURRENCY: Probe[ConcurrencyResult] = Probe(
    "concurrency", "llmdoctor.probes.client_limits:concurrency", "llmdoctor.probes.client_limits:ConcurrencyResult",
    "latency at 1 vs N parallel requests, interleaved (opt-in: --concurrency N)",
    optional=(BASELINE, DISCOVERY, SERVER_METRICS), plan=_concurrency_plan, off=_no_concurrency,
    title="latency with requests in parallel (--concurrency)",
)
IDLE: Probe[IdleResult] = Probe(
    "idle", "llmdoctor.probes.idle:idle_test", "llmdoctor.probes.idle:IdleResult",
    "one request after an idle wait, against the warm median (opt-in: --idle-test SECONDS)",
    needs=(BASELINE,), plan=_idle_plan, off=_no_idle_test,
    title="a request after an idle wait (--idle-test)",
)
LOGS: Probe[LogScan] = Probe(
    "logs", "llmdoctor.probes.logs:scan_logs", "llmdoctor.logs.scan:LogScan",
    "the server's logs (--log FILE, --journal UNIT): OOMs, CUDA errors, preemption, load times",
    local=True, off=_no_logs,
    title="the server's logs (--log, --journal)",
)
REFERENCE: Probe[Reference] = Probe(
    "reference", "llmdoctor.probes.reference:reference", "llmdoctor.probes.reference:Reference",
    "the baseline file to compare with (--compare FILE, saved by --save-baseline)", local=True, off=_no_reference,
    title="the baseline to compare with (--compare)",
)
SIDE_BY_SIDE: Probe[Interleaved] = Probe(
    "side_by_side", "llmdoctor.probes.side_by_side:side_by_side", "llmdoctor.probes.side_by_side:Interleaved",
    'two endpoints, the same minimal "Say ok." requests interleaved A, B, A, B … (llmdoctor compare)',
    needs=(DISCOVERY,), plan=_side_by_side_plan,
    title="two endpoints side by side, requests interleaved (llmdoctor compare)",
)
FOLLOWUP_CONCURRENCY: Probe[ConcurrencyResult] = Probe(
    "followup_concurrency", "llmdoctor.probes.followup:followup_concurrency",
    "llmdoctor.probes.client_limits:ConcurrencyResult",
    "follow-up: 2 requests at once against the same alone, interleaved (ordered by the diagnosis)",
    optional=(BASELINE, DISCOVERY, SERVER_METRICS), plan=_followup_concurrency_plan,
    title="a follow-up test: requests alone and 2 at once, interleaved",
)
FOLLOWUP_IDLE: Probe[IdleResult] = Probe(
    "followup_idle", "llmdoctor.probes.followup:followup_idle", "llmdoctor.probes.idle:IdleResult",
    "follow-up: one request after a short idle wait (ordered by the diagnosis)",
    needs=(BASELINE,), plan=_followup_idle_plan,
    title="a follow-up test: one request after a short idle wait",
)
LONE_REQUEST: Probe[LoneRequestResult] = Probe(
    "lone_request", "llmdoctor.probes.followup:lone_request", "llmdoctor.probes.followup:LoneRequestResult",
    "follow-up: backend metrics scraped around one lone request (ordered by the diagnosis)",
    needs=(SERVER_METRICS, BASELINE), plan=_lone_request_plan,
    title="a follow-up test: the server's metrics around one lone request",
)
REPEAT_PROMPT: Probe[RepeatPromptResult] = Probe(
    "repeat_prompt", "llmdoctor.probes.followup:repeat_prompt", "llmdoctor.probes.followup:RepeatPromptResult",
    "follow-up: the same long prompt twice, for the prefix-cache effect (ordered by the diagnosis)",
    needs=(BASELINE,), optional=(DISCOVERY, CONTEXT_WINDOW, PROMPT_SIZE), plan=_repeat_prompt_plan,
    title="a follow-up test: the same long prompt twice (prefix cache)",
)
NATIVE_TIMINGS: Probe[NativeTimings] = Probe(
    "native_timings", "llmdoctor.probes.native_clocks:native_timings", "llmdoctor.probes.native_clocks:NativeTimings",
    "Ollama: one request through its native /api/chat, for the server's own durations",
    needs=(BASELINE,), optional=(SERVER_METRICS,), plan=_native_timings_plan,
    title="Ollama's own durations (one request to its native /api/chat)",
)
ATTRIBUTION: Probe[AttributionResult] = Probe(
    "attribution", "llmdoctor.probes.attribution:attribution", "llmdoctor.probes.attribution:AttributionResult",
    "the baseline's requests joined with the server's own clocks; every stream's delivery against its token clock",
    needs=(BASELINE,), optional=(SERVER_METRICS, SWEEP, NATIVE_TIMINGS), derived=True,
    title="where the time goes, by the server's own clocks",
)
DIAGNOSIS: Probe[Diagnosis] = Probe(
    "diagnosis", "llmdoctor.diagnosis.planner:diagnose_followups", "llmdoctor.diagnosis.model:Diagnosis",
    "differential diagnosis: hypotheses from the first pass, follow-up tests within --budget",
    # PROMPT_SIZE: measured in the first pass, so the prompts of the follow-ups it orders cost what they declare.
    # PROMPT_TOKENS: a measured prefill rate is priced on the application's prompts (--request), not the probe's.
    needs=(BASELINE,),
    optional=(FIRST_REQUEST, DISCOVERY, CONTEXT_WINDOW, SERVER_METRICS, HOST, PROMPT_SIZE, PROMPT_TOKENS),
    orders=(SWEEP, TRANSPORT, PREFILL, LONE_REQUEST, FOLLOWUP_CONCURRENCY, CONCURRENCY, REPEAT_PROMPT,
            FOLLOWUP_IDLE, IDLE),
    plan=_diagnosis_plan, off=_no_followup, derived=True,
    title="the differential diagnosis (follow-up tests within --budget)",
)

OUTCOMES: Probe[RequestLedger] = Probe(
    "request_outcomes", "llmdoctor.probes.outcomes:request_outcomes", "llmdoctor.measurements.ledger:RequestLedger",
    "every request's outcome (status, error, retry, empty or cut answer, refusal headers), by probe",
    closing=True, title="how every request ended")
CLIENT_HOST: Probe[ClientHostResult] = Probe(
    "client_host", "llmdoctor.probes.outcomes:client_host", "llmdoctor.measurements.client_host:ClientHostResult",
    "llmdoctor's own scheduling lag while it probed, and this host's CPU pressure", closing=True,
    title="llmdoctor's own lag and this machine's load")

#: The canonical measuring order (see the module docstring).
ORDER: tuple[AnyProbe, ...] = (
    DISCOVERY, FIRST_REQUEST, REQUESTS, SERVER_TOKENS, CONTEXT_WINDOW, PROMPT_TOKENS, GPU, GPU_METRICS,
    SERVER_METRICS, BASELINE, LOGS, HOST, IDLE, DNS, TRANSPORT, CLIENT_LIMITS, CONCURRENCY, PROMPT_SIZE, PREFILL,
    PREFIX_REUSE, SWEEP, NATIVE_TIMINGS, REFERENCE, SIDE_BY_SIDE, FOLLOWUP_CONCURRENCY, FOLLOWUP_IDLE, LONE_REQUEST,
    REPEAT_PROMPT, DIAGNOSIS, ATTRIBUTION, OUTCOMES, CLIENT_HOST,
)

#: Every probe by name (for recordings, which name probes).
PROBES: dict[str, AnyProbe] = {p.name: p for p in ORDER}
