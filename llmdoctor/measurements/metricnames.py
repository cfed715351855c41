"""Each backend's Prometheus metric names across versions: when each appeared and when it went.

One table (`METRIC_NAMES`) per backend; each row is one exported series name for one normalised field
of `ServerMetrics` (``kv_usage``, ``inter_token``, ``queue_time``, ...), with the version that introduced
it and the one that removed it (``None``: from the first version the doctor knows / still exported),
and the source that says so. `llmdoctor/probes/backends.py` builds its per-field candidate names from
it (newest first, so a server exporting both names is read by the new one), and the metrics probe says
of a field no candidate is present for that it is *absent in this version* (naming the names and
their versions), never zero.

llama.cpp's versions are builds, named here by the pull request that changed the metric. Where a
source gives a deprecation and vLLM's policy (deprecated in X, hidden in X+1 unless
``--show-hidden-metrics-for-version``, removed in X+2) gives the rest, the row says so.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FIELDS", "HISTOGRAMS", "METRIC_NAMES", "MetricName", "candidates", "describe"]

#: Normalised fields, as `llmdoctor.probes.backends.Backend` names them, with the `ServerMetrics` attribute.
FIELDS: dict[str, str] = {
    "running": "requests_running",
    "waiting": "requests_waiting",
    "kv_usage": "kv_cache_usage",
    "preemptions": "preemptions_total",
    "retracted": "retracted",
    "prefix_hits": "prefix_cache_hits",
    "prefix_queries": "prefix_cache_queries",
    "ttft": "ttft",
    "queue_time": "queue_time",
    "prefill_time": "prefill_time",
    "decode_time": "decode_time",
    "e2e": "e2e",
    "inference_time": "inference_time",
    "startup_s": "startup_s",
    "inter_token": "inter_token",
    "request_preemptions": "request_preemptions",
    "waiting_by_reason": "waiting_by_reason",
    "finished": "finished",
    "cache_info": "kv_cache",
}
#: Fields read as histograms (``_sum`` / ``_count`` series).
HISTOGRAMS = frozenset({"ttft", "queue_time", "prefill_time", "decode_time", "e2e", "inference_time",
                        "inter_token", "request_preemptions"})


@dataclass(frozen=True)
class MetricName:
    """One exported series name of one field, with the versions it spans and the source."""

    field: str
    name: str
    since: str | None = None  # first version that exports it (None: every version the doctor knows)
    removed: str | None = None  # first version that no longer exports it by default (None: still exported)
    source: str = ""

    def span(self) -> str:
        """``name (since X, removed in Y)`` in words."""
        parts = ([f"since {self.since}"] if self.since else []) + ([f"removed in {self.removed}"] if self.removed
                                                                   else [])
        return f"{self.name} ({', '.join(parts)})" if parts else self.name


_VLLM_DOCS = "docs.vllm.ai v0.5.0 serving/metrics; vllm/v1/metrics/loggers.py; fixtures/vllm/metrics_*.prom (0.32.0)"
_VLLM_032 = "vllm/v1/metrics/loggers.py; recorded from vLLM 0.32.0 (fixtures/vllm/metrics_*.prom)"
_SGLANG = "docs.sglang.io references/production_metrics; fixtures/metrics/sglang-0.5.10.prom (0.5.10.post1)"
_TGI = "huggingface.co/docs/text-generation-inference/reference/metrics; fixtures/metrics/tgi-datadog.prom (2.x)"
_LLAMACPP = "ggml-org/llama.cpp tools/server/README.md \"Available metrics\" (ggml-org/llama.cpp#22879)"
_GH = "https://github.com/"

METRIC_NAMES: dict[str, tuple[MetricName, ...]] = {
    "vllm": (
        MetricName("running", "vllm:num_requests_running", source=_VLLM_DOCS),
        MetricName("waiting", "vllm:num_requests_waiting", source=_VLLM_DOCS),
        MetricName("kv_usage", "vllm:kv_cache_usage_perc", since="0.10",
                   source=_GH + "vllm-project/vllm/pull/18354 (added, 2025-05); present in 0.10.0's scrape ("
                   + _GH + "vllm-project/production-stack/issues/617)"),
        MetricName("kv_usage", "vllm:gpu_cache_usage_perc", removed="0.11",
                   source=_GH + "vllm-project/vllm/pull/18354 (deprecated); not emitted by default by 2025-11 ("
                   + _GH + "kubernetes-sigs/inference-perf/pull/277); absent from 0.32.0"),
        MetricName("preemptions", "vllm:num_preemptions_total", source=_VLLM_DOCS),
        MetricName("prefix_hits", "vllm:prefix_cache_hits_total", since="0.10",
                   source=_GH + "vllm-project/vllm/pull/18354; " + _GH + "vllm-project/production-stack/issues/617"),
        MetricName("prefix_hits", "vllm:gpu_prefix_cache_hits_total", since="0.8", removed="0.11",
                   source="DEPRECATED in 0.10's HELP text (" + _GH + "vllm-project/production-stack/issues/617)"),
        MetricName("prefix_queries", "vllm:prefix_cache_queries_total", since="0.10",
                   source=_GH + "vllm-project/vllm/pull/18354; " + _GH + "vllm-project/production-stack/issues/617"),
        MetricName("prefix_queries", "vllm:gpu_prefix_cache_queries_total", since="0.8", removed="0.11",
                   source="DEPRECATED in 0.10's HELP text (" + _GH + "vllm-project/production-stack/issues/617)"),
        MetricName("ttft", "vllm:time_to_first_token_seconds", source=_VLLM_DOCS),
        MetricName("queue_time", "vllm:request_queue_time_seconds", source=_VLLM_032),
        MetricName("prefill_time", "vllm:request_prefill_time_seconds", source=_VLLM_032),
        MetricName("decode_time", "vllm:request_decode_time_seconds", source=_VLLM_032),
        MetricName("e2e", "vllm:e2e_request_latency_seconds", source=_VLLM_DOCS),
        MetricName("inference_time", "vllm:request_inference_time_seconds", source=_VLLM_032),
        MetricName("inter_token", "vllm:inter_token_latency_seconds", since="0.11",
                   source=_GH + "vllm-project/vllm/pull/24015 (\"Deprecated in 0.11 - Renamed as "
                   "vllm:inter_token_latency_seconds\", quoted in " + _GH + "llm-d/llm-d-inference-sim/issues/264)"),
        MetricName("inter_token", "vllm:time_per_output_token_seconds", removed="0.13",
                   source=_GH + "vllm-project/vllm/pull/32661 (deprecated in 0.11, hidden in 0.12, removed for 0.13)"),
        MetricName("request_preemptions", "vllm:request_num_preemptions", source=_VLLM_032),
        MetricName("waiting_by_reason", "vllm:num_requests_waiting_by_reason", source=_VLLM_032),
        MetricName("finished", "vllm:request_success_total", source=_VLLM_DOCS),
        MetricName("cache_info", "vllm:cache_config_info", source=_VLLM_032),
    ),
    "tgi": (
        MetricName("running", "tgi_batch_current_size", source=_TGI),
        MetricName("waiting", "tgi_queue_size", source=_TGI),
        MetricName("queue_time", "tgi_request_queue_duration", source=_TGI + "; router/src/server.rs (v3.3.7)"),
        MetricName("e2e", "tgi_request_duration", source=_TGI),
        MetricName("inference_time", "tgi_request_inference_duration", source=_TGI),
    ),
    "llamacpp": (
        MetricName("running", "llamacpp:requests_processing", source=_LLAMACPP),
        MetricName("waiting", "llamacpp:requests_deferred", source=_LLAMACPP),
        MetricName("kv_usage", "llamacpp:kv_cache_usage_ratio", removed="PR #13660 (2025-05)",
                   source=_GH + "ggml-org/llama.cpp/pull/22879 (\"kv_cache_usage_ratio/kv_cache_tokens where removed "
                   "with #13660\"); still exported by forks (fixtures/metrics/llamacpp-ik-pr695.prom)"),
    ),
    "sglang": (
        MetricName("running", "sglang:num_running_reqs", source=_SGLANG),
        MetricName("waiting", "sglang:num_queue_reqs", source=_SGLANG),
        MetricName("kv_usage", "sglang:token_usage", since="2024-10 (#1853)",
                   source=_GH + "sgl-project/sglang/pull/1853 (Prometheus metrics added); " + _SGLANG),
        MetricName("retracted", "sglang:num_retracted_reqs", source=_SGLANG),
        MetricName("prefix_hits", "sglang:cached_tokens_total", source=_SGLANG),
        MetricName("prefix_queries", "sglang:prompt_tokens_total", source=_SGLANG),
        MetricName("ttft", "sglang:time_to_first_token_seconds", source=_SGLANG),
        MetricName("queue_time", "sglang:queue_time_seconds", since="2025-03 (#4444)",
                   source=_GH + "sgl-project/sglang/pull/4444 (\"Add in queue metrics\", 2025-03); " + _SGLANG),
        MetricName("queue_time", "sglang:waiting_request_latency_seconds", since="2024-10 (#1853)", removed="0.5.10",
                   source=_GH + "sgl-project/sglang/pull/1853 (2024-10); absent from the 0.5.10.post1 scrape "
                   "(fixtures/metrics/sglang-0.5.10.prom): the release that dropped it is not established"),
        MetricName("e2e", "sglang:e2e_request_latency_seconds", source=_SGLANG),
        MetricName("inter_token", "sglang:inter_token_latency_seconds", source=_SGLANG),
        MetricName("startup_s", "sglang:engine_startup_time", source=_SGLANG),
    ),
}


def candidates(backend: str, field: str) -> tuple[str, ...]:
    """The series names of `field` for `backend`, newest first (the order they are tried in)."""
    return tuple(m.name for m in METRIC_NAMES.get(backend, ()) if m.field == field)


def describe(backend: str, field: str) -> str:
    """Why `field` reads nothing on `backend`: absent in this version (with the names' versions) or never exported."""
    rows = [m for m in METRIC_NAMES.get(backend, ()) if m.field == field]
    if not rows:
        return f"not exported by {backend}"
    return "absent in this version: " + "; ".join(m.span() for m in rows)
