"""The closed set of causes and of the symptoms they explain.

A *cause* is what a user changes: queueing at the server, a cold start, no keep-alive, a prompt that
does not fit the window. A *symptom* is what a measurement shows without saying why: a high "Say ok."
floor, a large fixed cost in the flat-latency fit, an objective breached. Checks that find a cause name
it (``Finding.cause``); checks that measure a symptom name that (``Finding.symptom``); the differential
diagnosis's hypotheses are causes of this set. The report lists each cause once: the other findings
of the same cause, and the symptoms it explains, fold under it as its supporting evidence
(`llmdoctor.reporting.folding`).

Two kinds of cause: ``latency`` (requests are slow) and ``failure`` (requests fail or are rejected:
an unreachable or misconfigured endpoint, server errors, a prompt over the window, a malformed
message array, client limits, rate limiting). Failure causes explain no latency symptom. Findings that
are neither a cause nor a symptom are hygiene (an unusual role order, text sent as part arrays): they
name nothing and stay findings of their own.

Each cause and symptom also says how often the traffic pays it by default (`Frequency`: on every
request, only under load, per new connection, once per cold start, ...); a finding states its own
when it knows better, and the ranking uses the expected cost per request.

The ids are the strings of the JSON ``cause`` / ``symptom`` fields: stable, never renamed (a new one
is a schema minor version).

Each cause owns, once, what the checklist checks and the differential diagnosis both read of it: its
remedy (`CauseSpec.fix`) and its thresholds (`CauseSpec.limits`: one frozen `llmdoctor.limits.Limits`
per cause, such as ``SLOW_DECODE_LIMITS``). Where a check and the diagnosis judge the same cause with
different numbers, both numbers live in the one `Limits`, whose docstring says why they differ
(``docs/causes.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from llmdoctor.limits import (
    COLD_START_LIMITS,
    GATEWAY_OVERHEAD_LIMITS,
    HOST_PRESSURE_LIMITS,
    KV_CACHE_LIMITS,
    NO_KEEPALIVE_LIMITS,
    PREFILL_LIMITS,
    PREFIX_CACHE_LIMITS,
    QUEUEING_LIMITS,
    SERVER_FLOOR_LIMITS,
    SLOW_DECODE_LIMITS,
    SLOW_NETWORK_LIMITS,
    Limits,
)

__all__ = [
    "Cause",
    "CauseSpec",
    "CAUSES",
    "CONSEQUENCES",
    "EXPLAINS_SHARE",
    "Fix",
    "Frequency",
    "Kind",
    "Symptom",
    "SYMPTOM_TITLES",
]

#: A cause explains a symptom only when its own measured cost is at least this share of the
#: symptom's (when both are measured): a 5 ms handshake does not explain a 450 ms fixed cost.
EXPLAINS_SHARE = 0.5


class Frequency(str, Enum):
    """How often the traffic pays a finding's impact (closed set; the value is the JSON id).

    Ranking uses the expected cost per request, ``impact_ms × share``: the share of requests assumed
    to pay it. A cost paid once per cold start is one-time: it ranks after every recurring cost of its
    severity, unless the run shows that it recurs (an unload after idle, a keep-alive expiry, a
    sleeping engine, several starts in the log: `RECURRING_COLD_START`).
    """

    EVERY_REQUEST = "every_request"
    UNDER_LOAD = "under_load"
    RECURRING_COLD_START = "recurring_cold_start"
    NEW_CONNECTION = "new_connection"
    SLOW_TAIL = "slow_tail"
    COLD_START = "cold_start"

    @property
    def label(self) -> str:
        """How the report says it: ``on every request``, ``once per cold start``."""
        return _FREQUENCY_LABEL[self]

    @property
    def share(self) -> float:
        """The share of requests assumed to pay it (0 for a one-time cost)."""
        return _FREQUENCY_SHARE[self]

    @property
    def recurs(self) -> bool:
        """False for a one-time cost (once per cold start, with no sign that cold starts recur)."""
        return self is not Frequency.COLD_START


_FREQUENCY_LABEL = {
    Frequency.EVERY_REQUEST: "on every request",
    Frequency.UNDER_LOAD: "only under load",
    Frequency.RECURRING_COLD_START: "at each unload or restart",
    Frequency.NEW_CONNECTION: "per new connection",
    Frequency.SLOW_TAIL: "on the slowest requests",
    Frequency.COLD_START: "once per cold start",
}
# Every request pays a floor; load and idle gaps come and go (about half the traffic is assumed to
# meet them); pooled clients open a new connection now and then; p90 - p50 is paid by at least the
# slowest tenth of requests. A one-time cost has no share: it ranks after the recurring ones.
_FREQUENCY_SHARE = {
    Frequency.EVERY_REQUEST: 1.0,
    Frequency.UNDER_LOAD: 0.5,
    Frequency.RECURRING_COLD_START: 0.5,
    Frequency.NEW_CONNECTION: 0.25,
    Frequency.SLOW_TAIL: 0.1,
    Frequency.COLD_START: 0.0,
}


class Symptom(str, Enum):
    """What a measurement shows without naming why (closed set; the value is the JSON id)."""

    HIGH_FLOOR = "high_floor"
    UNSTABLE_FLOOR = "unstable_floor"
    FIXED_COST = "fixed_cost"
    SLOW_FIRST_TOKEN = "slow_first_token"
    SLOW_PER_TOKEN = "slow_per_token"
    SLOW_CONNECTION_SETUP = "slow_connection_setup"

    @property
    def label(self) -> str:
        """How the report names the symptom (``title`` would shadow `str.title`)."""
        return SYMPTOM_TITLES[self]

    @property
    def frequency(self) -> Frequency:
        """How often a measurement of this symptom is paid, when its finding does not say."""
        return _SYMPTOM_FREQUENCY.get(self, Frequency.EVERY_REQUEST)


SYMPTOM_TITLES: dict[Symptom, str] = {
    Symptom.HIGH_FLOOR: "high latency floor",
    Symptom.UNSTABLE_FLOOR: "unstable floor",
    Symptom.FIXED_COST: "large fixed cost per request",
    Symptom.SLOW_FIRST_TOKEN: "slow time to first token",
    Symptom.SLOW_PER_TOKEN: "high cost per output token",
    Symptom.SLOW_CONNECTION_SETUP: "slow connection set-up",
}


_SYMPTOM_FREQUENCY = {
    Symptom.UNSTABLE_FLOOR: Frequency.SLOW_TAIL,
    Symptom.SLOW_CONNECTION_SETUP: Frequency.NEW_CONNECTION,
}


class Kind(str, Enum):
    """Whether a cause makes requests slow or makes them fail."""

    LATENCY = "latency"
    FAILURE = "failure"


class Cause(str, Enum):
    """Why requests are slow, or why they fail (closed set; the value is the JSON id)."""

    COLD_START = "cold_start"
    QUEUEING = "queueing"
    SERVER_FLOOR = "server_floor"
    LONG_PREFILL = "long_prefill"
    PREFIX_CACHE_MISS = "prefix_cache_miss"
    SLOW_DECODE = "slow_decode"
    LONG_OUTPUT = "long_output"
    DECODE_EXTRAS = "decode_extras"
    NO_STREAMING = "no_streaming"
    NO_KEEPALIVE = "no_keepalive"
    SLOW_NETWORK = "slow_network"
    SLOW_DNS = "slow_dns"
    SLOW_TLS = "slow_tls"
    IPV6_FALLBACK = "ipv6_fallback"
    GATEWAY_OVERHEAD = "gateway_overhead"
    HELD_BACK_STREAM = "held_back_stream"
    REPLICA_IMBALANCE = "replica_imbalance"
    KV_CACHE_PRESSURE = "kv_cache_pressure"
    GPU_SATURATION = "gpu_saturation"
    GPU_MEMORY = "gpu_memory"
    HOST_PRESSURE = "host_pressure"
    RATE_LIMITING = "rate_limiting"
    ENDPOINT_UNREACHABLE = "endpoint_unreachable"
    ENDPOINT_MISCONFIGURED = "endpoint_misconfigured"
    SERVER_ERRORS = "server_errors"
    OVERSIZED_PROMPT = "oversized_prompt"
    MALFORMED_REQUEST = "malformed_request"
    CLIENT_LIMITS = "client_limits"

    @property
    def spec(self) -> CauseSpec:
        """Title, kind and the symptoms this cause explains."""
        return CAUSES[self]

    @property
    def label(self) -> str:
        """How the report names the cause: its title (``title`` would shadow `str.title`)."""
        return CAUSES[self].title

    @property
    def fix(self) -> Fix:
        """The cause's remedy (`CauseSpec.fix`); `LookupError` for a cause that has none of its own."""
        fix = CAUSES[self].fix
        if fix is None:
            raise LookupError(f"cause {self.value!r} has no fix of its own: its findings say theirs")
        return fix


@dataclass(frozen=True)
class Fix:
    """What to change: a one-line summary and concrete steps (``llmdoctor.findings`` re-exports it)."""

    summary: str
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class CauseSpec:
    """One cause: its title, its kind, the symptoms it can explain, its remedy and its thresholds."""

    title: str
    kind: Kind
    explains: frozenset[Symptom] = frozenset()
    #: How often the traffic pays it, when the finding does not say.
    frequency: Frequency = Frequency.EVERY_REQUEST
    #: The remedy, when one fits every finding of the cause (the diagnosis's, and checks that share it).
    fix: Fix | None = None
    #: The thresholds the checks and the diagnosis judge it by (None: no shared number).
    limits: Limits | None = None

    def can_explain(self, symptom: Symptom) -> bool:
        """True when a measurement of `symptom` may be this cause showing."""
        return symptom in self.explains


def _latency(title: str, *explains: Symptom, paid: Frequency = Frequency.EVERY_REQUEST) -> CauseSpec:
    return CauseSpec(title, Kind.LATENCY, frozenset(explains), paid)


def _failure(title: str, *explains: Symptom, paid: Frequency = Frequency.EVERY_REQUEST) -> CauseSpec:
    return CauseSpec(title, Kind.FAILURE, frozenset(explains), paid)


_S = Symptom
# Time spent on every request before or around the model's work: the floor, the fit's intercept and
# the first token all carry it.
_PER_REQUEST = (_S.HIGH_FLOOR, _S.FIXED_COST, _S.SLOW_FIRST_TOKEN)
# Waiting for a busy server: the same, and identical requests wait differently long.
_WAITING = (*_PER_REQUEST, _S.UNSTABLE_FLOOR)

_TABLE: dict[Cause, CauseSpec] = {
    Cause.COLD_START: _latency("Cold start / scale-to-zero", paid=Frequency.COLD_START),
    Cause.QUEUEING: _latency("Queueing at the server", *_WAITING, paid=Frequency.UNDER_LOAD),
    Cause.SERVER_FLOOR: _latency("Fixed per-request server overhead (slow floor)", *_PER_REQUEST),
    Cause.LONG_PREFILL: _latency("Slow prefill (prompt processing)"),
    Cause.PREFIX_CACHE_MISS: _latency("Prefix cache not used"),
    Cause.SLOW_DECODE: _latency("Slow decode (per output token)", _S.HIGH_FLOOR, _S.SLOW_PER_TOKEN),
    Cause.LONG_OUTPUT: _latency("More output tokens than the answer needs"),
    Cause.DECODE_EXTRAS: _latency("Extra work per output token (logprobs, sampling)"),
    Cause.NO_STREAMING: _latency("Responses not streamed"),
    Cause.NO_KEEPALIVE: _latency("New connection for every request (no keep-alive)",
                                 _S.SLOW_CONNECTION_SETUP, *_PER_REQUEST),
    Cause.SLOW_NETWORK: _latency("Slow network path", _S.SLOW_CONNECTION_SETUP, *_PER_REQUEST),
    Cause.SLOW_DNS: _latency("Slow DNS resolution", _S.SLOW_CONNECTION_SETUP, paid=Frequency.NEW_CONNECTION),
    Cause.SLOW_TLS: _latency("Slow TLS handshake", _S.SLOW_CONNECTION_SETUP, paid=Frequency.NEW_CONNECTION),
    Cause.IPV6_FALLBACK: _latency("IPv6 addresses that do not connect (fallback delay)", _S.SLOW_CONNECTION_SETUP,
                                  paid=Frequency.NEW_CONNECTION),
    Cause.GATEWAY_OVERHEAD: _latency("Time in front of the model server (gateway, proxy)", *_PER_REQUEST),
    Cause.HELD_BACK_STREAM: _latency("Stream held back by a buffering proxy", _S.HIGH_FLOOR, _S.SLOW_FIRST_TOKEN),
    Cause.REPLICA_IMBALANCE: _latency("One replica slower than the others", _S.HIGH_FLOOR, _S.UNSTABLE_FLOOR,
                                      paid=Frequency.SLOW_TAIL),
    Cause.KV_CACHE_PRESSURE: _latency("KV-cache pressure and preemption", *_WAITING, paid=Frequency.UNDER_LOAD),
    Cause.GPU_SATURATION: _latency("GPU saturated", *_WAITING, _S.SLOW_PER_TOKEN, paid=Frequency.UNDER_LOAD),
    Cause.GPU_MEMORY: _latency("GPU memory nearly full", paid=Frequency.UNDER_LOAD),
    Cause.HOST_PRESSURE: _latency("Host CPU or memory pressure", *_WAITING, _S.SLOW_PER_TOKEN,
                                  paid=Frequency.UNDER_LOAD),
    Cause.RATE_LIMITING: _failure("Rate limiting (HTTP 429, or a limiting gateway's 503)", _S.UNSTABLE_FLOOR,
                                  paid=Frequency.UNDER_LOAD),
    Cause.ENDPOINT_UNREACHABLE: _failure("Endpoint unreachable (refused, DNS, TLS, timeout)"),
    Cause.ENDPOINT_MISCONFIGURED: _failure("Endpoint, credentials or model misconfigured"),
    Cause.SERVER_ERRORS: _failure("Server errors (5xx, crashes, OOM, cut streams)"),
    Cause.OVERSIZED_PROMPT: _failure("Prompt does not fit the context window"),
    Cause.MALFORMED_REQUEST: _failure("Malformed chat request"),
    Cause.CLIENT_LIMITS: _failure("Client limits (open files, ephemeral ports)", paid=Frequency.UNDER_LOAD),
}

_FIXES: dict[Cause, Fix] = {
    Cause.QUEUEING: Fix(
        "Give the server more parallel capacity, or send it less at once.",
        ("Raise the batch/concurrency limit (vLLM --max-num-seqs, TGI --max-batch-total-tokens, "
         "llama.cpp --parallel) if memory allows; use a continuous-batching backend.",
         "Add replicas behind the load balancer, or rate-limit and smooth bursts on the client.",
         "Watch the queue (vllm:num_requests_waiting, request_queue_time_seconds) after the change.")),
    Cause.LONG_PREFILL: Fix(
        "Make prompt tokens cheaper, or send fewer of them.",
        ("Trim the prompt: shorter system prompt, fewer few-shot examples, retrieved context cut to what helps.",
         "Enable prefix caching (vLLM --enable-prefix-caching) so shared prefixes are computed once.",
         "Use chunked prefill, a faster GPU or a smaller/quantized model for latency-critical paths.")),
    Cause.SLOW_DECODE: Fix(
        "Make each output token cheaper, or generate fewer.",
        ("Use a quantized or smaller model, or a GPU with more memory bandwidth.",
         "Lower concurrent sequences per GPU (vLLM --max-num-seqs) if latency matters more than throughput; "
         "enable speculative decoding where supported.",
         "Cap max_tokens and add stop sequences for short answers.")),
    Cause.COLD_START: Fix(
        "Keep the model loaded and warm, and warm it up before it takes traffic.",
        ("Keep a minimum of one warm replica (no scale to zero) for latency-critical paths.",
         "Send a warm-up generation right after each start or deploy, before the health check turns ready.",
         "Raise keep-alive so idle models are not unloaded (Ollama: OLLAMA_KEEP_ALIVE, keep_alive).",
         "Cut load time: quantized weights (GGUF INT4/INT8, AWQ, GPTQ), a local NVMe cache of the weights, "
         "pre-compiled kernels.")),
    Cause.NO_KEEPALIVE: Fix(
        "Enable keep-alive on the server and reuse one client.",
        ("Server/proxy: turn on HTTP keep-alive (nginx `keepalive_timeout`, upstream `keepalive`); no "
         "'Connection: close', idle timeouts longer than the gaps between requests.",
         "Client: one long-lived httpx.Client / requests.Session / aiohttp.ClientSession per process, with a "
         "connection pool, not one per request.")),
    Cause.SLOW_NETWORK: Fix(
        "Bring the client and the server closer, or pay the round trip less often.",
        ("Deploy the client in the server's region/zone; avoid hair-pinning through distant gateways.",
         "Stream, reuse connections and batch small requests so round trips are paid less often.")),
    Cause.SERVER_FLOOR: Fix(
        "Find and cut the fixed work done on every request.",
        ("Profile the serving stack: gateway/auth hops, tokenization, scheduler tick, CPU-bound pre/post-processing.",
         "Check the server is not saturated (GPU/CPU pinned, other tenants); a continuous-batching backend "
         "schedules new requests without waiting for a batch.",
         "Merge small requests or cache frequent answers: a fixed cost is paid per request.")),
    Cause.PREFIX_CACHE_MISS: Fix(
        "Enable prefix caching and keep shared prompt prefixes identical.",
        ("vLLM --enable-prefix-caching; SGLang RadixAttention is on by default; llama.cpp cache_prompt.",
         "Put the stable part of the prompt (system prompt, tools, documents) first and byte-identical.")),
    Cause.REPLICA_IMBALANCE: Fix(
        "Find the slow replica, then fix or drain it; balance on load, not in turn.",
        ("Compare the replicas' own metrics (GPU, queue, KV usage) and versions: same model, quantization, "
         "hardware and flags on each.",
         "Balance by least connections or latency (nginx least_conn, haproxy balance leastconn) and add "
         "health checks that take a slow replica out.",
         "Send a few requests to each replica directly (by address) to confirm which one is slow.")),
    Cause.HOST_PRESSURE: Fix(
        "Give the server (and the client) CPU headroom.",
        ("Stop or move the processes competing for the CPU (LD208 names them); add cores.",
         "Run the diagnosis from a host that is not saturated: a busy client times its own stalls too.")),
    Cause.KV_CACHE_PRESSURE: Fix(
        "Give the KV cache room, or admit fewer long sequences at once.",
        ("vLLM: raise --gpu-memory-utilization, lower --max-num-seqs or --max-model-len; use a smaller KV "
         "dtype (--kv-cache-dtype fp8) where supported.",
         "Cap max_tokens so sequences do not grow the cache without need; add replicas.")),
    Cause.GATEWAY_OVERHEAD: Fix(
        "Find what the gateway in front of the model does on every request.",
        ("Compare the client's time with the server's own (its metrics, its timing headers): the difference "
         "is spent in front of the model (auth, routing, buffering, a distant hop).",
         "Keep connections to the upstream alive (nginx keepalive + proxy_http_version 1.1); turn off "
         "response buffering for streams (proxy_buffering off).")),
}

_LIMITS: dict[Cause, Limits] = {
    Cause.COLD_START: COLD_START_LIMITS,
    Cause.QUEUEING: QUEUEING_LIMITS,
    Cause.SLOW_DECODE: SLOW_DECODE_LIMITS,
    Cause.SERVER_FLOOR: SERVER_FLOOR_LIMITS,
    Cause.LONG_PREFILL: PREFILL_LIMITS,
    Cause.PREFIX_CACHE_MISS: PREFIX_CACHE_LIMITS,
    Cause.SLOW_NETWORK: SLOW_NETWORK_LIMITS,
    Cause.NO_KEEPALIVE: NO_KEEPALIVE_LIMITS,
    Cause.GATEWAY_OVERHEAD: GATEWAY_OVERHEAD_LIMITS,
    Cause.HOST_PRESSURE: HOST_PRESSURE_LIMITS,
    Cause.KV_CACHE_PRESSURE: KV_CACHE_LIMITS,
}

#: Every cause, in the order `Cause` lists them. The hypotheses' titles and fixes are these.
CAUSES: dict[Cause, CauseSpec] = {
    cause: replace(spec, fix=_FIXES.get(cause), limits=_LIMITS.get(cause)) for cause, spec in _TABLE.items()
}

#: Causes that another cause brings about when both are found: the findings of the consequence fold
#: under it. KV-cache pressure preempts running sequences, so their prefill is computed again when
#: they resume, and new requests wait for free blocks: its run shows slow prefill and a queue.
CONSEQUENCES: dict[Cause, frozenset[Cause]] = {
    Cause.KV_CACHE_PRESSURE: frozenset({Cause.QUEUEING, Cause.LONG_PREFILL}),
}
