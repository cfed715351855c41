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


def _scalar(name: str, kind: str, help_text: str, value: float, labels: str = "") -> Family:
    """A gauge or counter family of one sample: `name` stated once."""
    where = f"{{{labels}}}" if labels else ""
    return name, kind, help_text, [f"{name}{where} {value!r}"]


def _histogram(name: str, help_text: str, h: Histogram, labels: str) -> Family:
    """A histogram family: `name` stated once, for its family and its sample lines."""
    return name, "histogram", help_text, histogram_lines(h, name, labels)


def _vllm_families(profile: LatencyProfile, s: EngineState) -> list[Family]:
    labels = f'engine="0",model_name="{profile.model}"'
    return [
        _scalar("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                float(s.running), labels),
        _scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                float(s.waiting), labels),
        _scalar("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage, labels),
        _scalar("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", 0.0,
                labels),
        _scalar("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                float(s.prompt_tokens_total), labels),
        _scalar("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                float(s.generation_tokens_total), labels),
        _histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft, labels),
        _histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                   s.queue_time, labels),
        _histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                   s.prefill_time, labels),
        _histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                   s.decode_time, labels),
        _histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                   s.inference_time, labels),
        _histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e, labels),
        _histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.inter_token,
                   labels),
    ]


def metrics_families(profile: LatencyProfile, s: EngineState) -> list[Family]:
    """The Prometheus families the profile's flavor exports, valued from the snapshot `s`."""
    if profile.flavor == "tgi":
        model = 'model="sim"'
        return [
            _scalar("tgi_batch_current_size", "gauge", "Current batch size", float(s.running)),
            _scalar("tgi_queue_size", "gauge", "Current queue size", float(s.waiting)),
            _scalar("tgi_request_count", "counter", "Total requests", float(s.queue_time.count)),
            _histogram("tgi_request_queue_duration", "Time spent in the queue", s.queue_time, model),
            _histogram("tgi_request_inference_duration", "Request inference duration", s.inference_time, model),
            _histogram("tgi_request_duration", "Request duration", s.e2e, model),
        ]
    if profile.flavor == "llamacpp":
        return [
            _scalar("llamacpp:requests_processing", "gauge", "Number of requests processing.", float(s.running)),
            _scalar("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", float(s.waiting)),
            _scalar("llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                    s.kv_usage),
            _scalar("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
                    float(s.prompt_tokens_total)),
            _scalar("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
                    float(s.generation_tokens_total)),
        ]
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
