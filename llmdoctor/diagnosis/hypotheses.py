"""The candidate causes of high latency the doctor tells apart, with their remedies.

Each hypothesis is a cause of the closed set (`llmdoctor.causes`): its id and title are the cause's,
so a confirmed hypothesis and a checklist finding of the same cause are one cause in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.causes import Cause
from llmdoctor.diagnosis.scoring import PRIOR, PRIOR_SECONDARY

__all__ = ["Hypothesis", "HYPOTHESES", "BY_ID"]


@dataclass(frozen=True)
class Hypothesis:
    """A cause with its prior probability and the fix to apply when it is confirmed."""

    cause: Cause
    fix: str
    steps: tuple[str, ...]
    prior: float = PRIOR

    @property
    def id(self) -> Cause:
        """The cause (its value is the id the JSON uses)."""
        return self.cause

    @property
    def title(self) -> str:
        """The cause's title."""
        return self.cause.label


HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis(
        Cause.QUEUEING,
        "Give the server more parallel capacity, or send it less at once.",
        ("Raise the batch/concurrency limit (vLLM --max-num-seqs, TGI --max-batch-total-tokens, "
         "llama.cpp --parallel) if memory allows; use a continuous-batching backend.",
         "Add replicas behind the load balancer, or rate-limit and smooth bursts on the client.",
         "Watch the queue (vllm:num_requests_waiting, request_queue_time_seconds) after the change."),
    ),
    Hypothesis(
        Cause.LONG_PREFILL,
        "Make prompt tokens cheaper, or send fewer of them.",
        ("Trim the prompt: shorter system prompt, fewer few-shot examples, retrieved context cut to what helps.",
         "Enable prefix caching (vLLM --enable-prefix-caching) so shared prefixes are computed once.",
         "Use chunked prefill, a faster GPU or a smaller/quantized model for latency-critical paths."),
    ),
    Hypothesis(
        Cause.SLOW_DECODE,
        "Make each output token cheaper, or generate fewer.",
        ("Use a quantized or smaller model, or a GPU with more memory bandwidth.",
         "Lower concurrent sequences per GPU if latency matters more than throughput; try speculative decoding.",
         "Cap max_tokens and add stop sequences for short answers."),
    ),
    Hypothesis(
        Cause.COLD_START,
        "Keep the model loaded and warm.",
        ("Keep a minimum of one warm replica (no scale to zero); raise Ollama's keep_alive.",
         "Send a warm-up request after each start or deploy, before taking traffic.",
         "Cut load time: quantized weights, local NVMe cache of the weights, pre-compiled kernels."),
    ),
    Hypothesis(
        Cause.NO_KEEPALIVE,
        "Reuse connections.",
        ("Use one long-lived HTTP client with a connection pool (httpx.Client, requests.Session).",
         "Make the server and any proxy keep connections open (no 'Connection: close'; raise idle timeouts)."),
    ),
    Hypothesis(
        Cause.SLOW_NETWORK,
        "Bring the client and the server closer, or pay the round trip less often.",
        ("Deploy the client in the server's region/zone; avoid hair-pinning through distant gateways.",
         "Stream, reuse connections and batch small requests so round trips are paid less often."),
    ),
    Hypothesis(
        Cause.SERVER_FLOOR,
        "Find and cut the fixed work done on every request.",
        ("Profile the serving stack: gateway/auth hops, tokenization, scheduler tick, CPU-bound pre/post-processing.",
         "Check the server is not saturated (GPU/CPU pinned, other tenants); a continuous-batching backend "
         "schedules new requests without waiting for a batch.",
         "Merge small requests or cache frequent answers: a fixed cost is paid per request."),
    ),
    Hypothesis(
        Cause.PREFIX_CACHE_MISS,
        "Enable prefix caching and keep shared prompt prefixes identical.",
        ("vLLM --enable-prefix-caching; SGLang RadixAttention is on by default; llama.cpp cache_prompt.",
         "Put the stable part of the prompt (system prompt, tools, documents) first and byte-identical."),
        PRIOR_SECONDARY,
    ),
    Hypothesis(
        Cause.REPLICA_IMBALANCE,
        "Find the slow replica, then fix or drain it; balance on load, not in turn.",
        ("Compare the replicas' own metrics (GPU, queue, KV usage) and versions: same model, quantization, "
         "hardware and flags on each.",
         "Balance by least connections or latency (nginx least_conn, haproxy balance leastconn) and add "
         "health checks that take a slow replica out.",
         "Send a few requests to each replica directly (by address) to confirm which one is slow."),
        PRIOR_SECONDARY,
    ),
    Hypothesis(
        Cause.HOST_PRESSURE,
        "Give the server (and the client) CPU headroom.",
        ("Stop or move the processes competing for the CPU (LD208 names them); add cores.",
         "Run the diagnosis from a host that is not saturated: a busy client times its own stalls too."),
        PRIOR_SECONDARY,
    ),
    Hypothesis(
        Cause.KV_CACHE_PRESSURE,
        "Give the KV cache room, or admit fewer long sequences at once.",
        ("vLLM: raise --gpu-memory-utilization, lower --max-num-seqs or --max-model-len; use a smaller KV "
         "dtype (--kv-cache-dtype fp8) where supported.",
         "Cap max_tokens so sequences do not grow the cache without need; add replicas."),
        PRIOR_SECONDARY,
    ),
    Hypothesis(
        Cause.GATEWAY_OVERHEAD,
        "Find what the gateway in front of the model does on every request.",
        ("Compare the client's time with the server's own (its metrics, its timing headers): the difference "
         "is spent in front of the model (auth, routing, buffering, a distant hop).",
         "Keep connections to the upstream alive (nginx keepalive + proxy_http_version 1.1); turn off "
         "response buffering for streams (proxy_buffering off)."),
        PRIOR_SECONDARY,
    ),
)

BY_ID: dict[Cause, Hypothesis] = {h.cause: h for h in HYPOTHESES}
