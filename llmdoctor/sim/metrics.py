"""The simulator's Prometheus `/metrics` text, in the names of the backend it plays (`flavor`).

- **vllm** (and the default): vLLM V1 names, labels (`model_name`, `engine`) and help texts, after
  vLLM's Prometheus logger (vllm-project/vllm, vllm/v1/metrics/loggers.py: PrometheusStatLogger)
  and its metrics design doc (docs/design/metrics.md).
- **tgi**: `tgi_` names (huggingface/text-generation-inference, router/src/server.rs).
- **llamacpp**: `llamacpp:` names (ggml-org/llama.cpp, tools/server/README.md).
- **ollama**: no Prometheus endpoint (the route answers 404; here: no families).

Every value comes from one `EngineState` snapshot, so a scrape is consistent.
"""

from __future__ import annotations

from llmdoctor.sim.engine import EngineState, Histogram
from llmdoctor.sim.profiles import LatencyProfile

__all__ = ["Family", "histogram_lines", "metrics_families", "metrics_text"]

Family = tuple[str, str, str, list[str]]  # name, type, help, sample lines


def _fmt(x: float) -> str:
    return repr(float(x))


def histogram_lines(h: Histogram, name: str, labels: str) -> list[str]:
    """The `_bucket`, `_sum` and `_count` sample lines of a cumulative histogram."""
    out = [
        f'{name}_bucket{{{labels},le="{_fmt(b)}"}} {float(c)}' for b, c in zip(h.buckets, h.counts, strict=True)
    ]
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(h.count)}')
    out.append(f"{name}_sum{{{labels}}} {h.total!r}")
    out.append(f"{name}_count{{{labels}}} {float(h.count)}")
    return out


def _vllm_families(profile: LatencyProfile, s: EngineState) -> list[Family]:
    labels = f'engine="0",model_name="{profile.model}"'
    return [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [f"vllm:num_requests_running{{{labels}}} {float(s.running)}"],
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [f"vllm:num_requests_waiting{{{labels}}} {float(s.waiting)}"],
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [f"vllm:kv_cache_usage_perc{{{labels}}} {s.kv_usage!r}"],
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            [f"vllm:num_preemptions_total{{{labels}}} 0.0"],
        ),
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [f"vllm:prompt_tokens_total{{{labels}}} {float(s.prompt_tokens_total)}"],
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [f"vllm:generation_tokens_total{{{labels}}} {float(s.generation_tokens_total)}"],
        ),
        (
            "vllm:time_to_first_token_seconds",
            "histogram",
            "Histogram of time to first token in seconds.",
            histogram_lines(s.ttft, "vllm:time_to_first_token_seconds", labels),
        ),
        (
            "vllm:request_queue_time_seconds",
            "histogram",
            "Histogram of time spent in WAITING phase for request.",
            histogram_lines(s.queue_time, "vllm:request_queue_time_seconds", labels),
        ),
        (
            "vllm:request_prefill_time_seconds",
            "histogram",
            "Histogram of time spent in PREFILL phase for request.",
            histogram_lines(s.prefill_time, "vllm:request_prefill_time_seconds", labels),
        ),
        (
            "vllm:request_decode_time_seconds",
            "histogram",
            "Histogram of time spent in DECODE phase for request.",
            histogram_lines(s.decode_time, "vllm:request_decode_time_seconds", labels),
        ),
        (
            "vllm:request_inference_time_seconds",
            "histogram",
            "Histogram of time spent in RUNNING phase for request.",
            histogram_lines(s.inference_time, "vllm:request_inference_time_seconds", labels),
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "histogram",
            "Histogram of e2e request latency in seconds.",
            histogram_lines(s.e2e, "vllm:e2e_request_latency_seconds", labels),
        ),
        (
            "vllm:inter_token_latency_seconds",
            "histogram",
            "Histogram of inter-token latency in seconds.",
            histogram_lines(s.inter_token, "vllm:inter_token_latency_seconds", labels),
        ),
    ]


def metrics_families(profile: LatencyProfile, s: EngineState) -> list[Family]:
    """The Prometheus families the profile's flavor exports, valued from the snapshot `s`."""
    if profile.flavor == "tgi":
        return [
            ("tgi_batch_current_size", "gauge", "Current batch size",
             [f"tgi_batch_current_size {float(s.running)}"]),
            ("tgi_queue_size", "gauge", "Current queue size", [f"tgi_queue_size {float(s.waiting)}"]),
            ("tgi_request_count", "counter", "Total requests", [f"tgi_request_count {float(s.queue_time.count)}"]),
            ("tgi_request_queue_duration", "histogram", "Time spent in the queue",
             histogram_lines(s.queue_time, "tgi_request_queue_duration", 'model="sim"')),
            ("tgi_request_inference_duration", "histogram", "Request inference duration",
             histogram_lines(s.inference_time, "tgi_request_inference_duration", 'model="sim"')),
            ("tgi_request_duration", "histogram", "Request duration",
             histogram_lines(s.e2e, "tgi_request_duration", 'model="sim"')),
        ]  # fmt: skip
    if profile.flavor == "llamacpp":
        return [
            ("llamacpp:requests_processing", "gauge", "Number of requests processing.",
             [f"llamacpp:requests_processing {float(s.running)}"]),
            ("llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
             [f"llamacpp:requests_deferred {float(s.waiting)}"]),
            ("llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.",
             [f"llamacpp:kv_cache_usage_ratio {s.kv_usage!r}"]),
            ("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
             [f"llamacpp:prompt_tokens_total {float(s.prompt_tokens_total)}"]),
            ("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
             [f"llamacpp:tokens_predicted_total {float(s.generation_tokens_total)}"]),
        ]  # fmt: skip
    if profile.flavor == "ollama":
        return []
    return _vllm_families(profile, s)


def metrics_text(profile: LatencyProfile, s: EngineState) -> str:
    """The Prometheus text exposition (format 0.0.4) of the snapshot `s`."""
    out: list[str] = []
    for name, kind, help_text, samples in metrics_families(profile, s):
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(samples)
    return "\n".join(out) + "\n"
