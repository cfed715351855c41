"""The serving backend's own metrics (probe ``server_metrics``).

Scrapes the backend's Prometheus ``/metrics`` twice, around the ``baseline``
probe, so that counters and histograms give deltas that cover *our* requests
(queue time, prefill time, preemptions). Where a backend has no ``/metrics``
it reads its native state instead: Ollama's ``/api/ps`` (loaded models, VRAM
share, keep-alive expiry) and llama.cpp's ``/props`` and ``/slots``.

Everything is normalised into `ServerMetrics`, in which an absent series is
`None` and never 0: "the backend does not export it" and "it is zero" lead
checks to different answers.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from llmdoctor.measurements.metricnames import FIELDS, HISTOGRAMS, candidates, describe
from llmdoctor.measurements.server_metrics import (
    Histogram,
    KvCacheInfo,
    LoadedModel,
    MetricsDelta,
    Samples,
    ServerMetrics,
    ServerMetricsResult,
)
from llmdoctor.probes.backends import BACKENDS, Backend, detect_backend
from llmdoctor.probes.catalog import BASELINE, DISCOVERY

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["GENERATION_ROUTES", "fetch_text", "metrics_delta", "normalize", "parse_ollama_ps", "parse_samples",
           "server_metrics"]


# -- parsing ---------------------------------------------------------------------------------------
def parse_samples(text: str) -> Samples:
    """Parse Prometheus text into ``{sample name: [(labels, value), ...]}``.

    Uses prometheus-client's parser; raises ValueError on text that is not
    Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: Samples = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except Exception as exc:  # the parser raises bare ValueError/IndexError/etc.
        raise ValueError(f"not Prometheus text: {exc}") from None
    return out


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _gauge(samples: Samples, names: tuple[str, ...], how: str = "sum") -> float | None:
    for name in names:
        if name in samples:
            values = _finite([v for _, v in samples[name]])
            if not values:
                return None
            return max(values) if how == "max" else sum(values)
    return None


def _histogram(samples: Samples, names: tuple[str, ...]) -> Histogram | None:
    for name in names:
        if name + "_count" in samples and name + "_sum" in samples:
            return Histogram(
                sum=sum(v for _, v in samples[name + "_sum"]),
                count=sum(v for _, v in samples[name + "_count"]),
            )
    return None


def _by_label(samples: Samples, names: tuple[str, ...], label: str) -> dict[str, float] | None:
    """A labelled series summed per value of `label` (other labels folded), first name present."""
    for name in names:
        if name in samples:
            out: dict[str, float] = {}
            for labels, value in samples[name]:
                if label in labels and not math.isnan(value):
                    out[labels[label]] = out.get(labels[label], 0.0) + value
            return out
    return None


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(float(labels[key]))
    except (KeyError, ValueError):
        return None


def _kv_cache_info(samples: Samples, names: tuple[str, ...]) -> KvCacheInfo | None:
    """vLLM's ``cache_config_info`` labels (0.32: ``kv_cache_size_tokens``, ``kv_cache_memory_bytes``)."""
    for name in names:
        for labels, _ in samples.get(name, []):
            try:
                concurrency: float | None = float(labels.get("kv_cache_max_concurrency", ""))
            except ValueError:
                concurrency = None
            prefix = labels.get("enable_prefix_caching")
            return KvCacheInfo(
                block_size=_int_label(labels, "block_size"),
                num_blocks=_int_label(labels, "num_gpu_blocks"),
                num_blocks_override=_int_label(labels, "num_gpu_blocks_override"),
                size_tokens=_int_label(labels, "kv_cache_size_tokens"),
                memory_bytes=_int_label(labels, "kv_cache_memory_bytes"),
                max_concurrency=concurrency,
                prefix_caching=None if prefix is None else prefix == "True",
            )
    return None


# Routes whose 4xx answers are rejected generation requests (prometheus-fastapi-instrumentator's
# ``http_requests_total{handler,status="4xx"}``, which vLLM's API server exports: a prompt over
# --max-model-len is a 400 that never reaches the engine, so no vllm: counter moves for it).
GENERATION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


def _rejected_4xx(samples: Samples) -> float | None:
    series = samples.get("http_requests_total")
    if not series:
        return None
    return sum((v for lab, v in series if lab.get("handler") in GENERATION_ROUTES and lab.get("status") == "4xx"), 0.0)


def _sleeping(samples: Samples) -> bool | None:
    series = samples.get("vllm:engine_sleep_state")
    if not series:
        return None
    for labels, value in series:
        if labels.get("sleep_state") == "awake":
            return value == 0
    return None


def normalize(text: str, url: str = "", backend: str | None = None) -> ServerMetrics:
    """Parse one ``/metrics`` text into `ServerMetrics` (backend detected unless given)."""
    samples = parse_samples(text)
    name = backend or detect_backend(set(samples))
    metrics = ServerMetrics(backend=name or "unknown", url=url, scraped_at=time.time())
    start = _gauge(samples, ("process_start_time_seconds",), "max")
    metrics.process_start_time = start
    metrics.rejected_4xx = _rejected_4xx(samples)
    if name is None:
        return metrics
    b: Backend = BACKENDS[name]
    metrics.requests_running = _gauge(samples, b.running)
    metrics.requests_waiting = _gauge(samples, b.waiting)
    metrics.kv_cache_usage = _gauge(samples, b.kv_usage, "max")
    metrics.preemptions_total = _gauge(samples, b.preemptions)
    metrics.retracted = _gauge(samples, b.retracted)
    metrics.prefix_cache_hits = _gauge(samples, b.prefix_hits)
    metrics.prefix_cache_queries = _gauge(samples, b.prefix_queries)
    metrics.startup_s = _gauge(samples, b.startup_s, "max")
    metrics.engine_sleeping = _sleeping(samples)
    metrics.ttft = _histogram(samples, b.ttft)
    metrics.queue_time = _histogram(samples, b.queue_time)
    metrics.prefill_time = _histogram(samples, b.prefill_time)
    metrics.decode_time = _histogram(samples, b.decode_time)
    metrics.e2e = _histogram(samples, b.e2e)
    metrics.inference_time = _histogram(samples, b.inference_time)
    metrics.inter_token = _histogram(samples, b.inter_token)
    metrics.request_preemptions = _histogram(samples, b.request_preemptions)
    metrics.waiting_by_reason = _by_label(samples, b.waiting_by_reason, "reason")
    metrics.finished = _by_label(samples, b.finished, b.finished_label)
    metrics.kv_cache = _kv_cache_info(samples, b.cache_info)
    _name_fields(metrics, samples, name)
    models = {lab["model_name"] for series in samples.values() for lab, _ in series if "model_name" in lab}
    metrics.model_names = sorted(models)
    wanted = {n for group in (b.running, b.waiting, b.kv_usage, b.preemptions, b.retracted, b.prefix_hits,
                              b.prefix_queries, b.startup_s, b.waiting_by_reason, b.finished, b.extra) for n in group}
    for hist in (*b.ttft, *b.queue_time, *b.prefill_time, *b.decode_time, *b.e2e, *b.inference_time,
                 *b.inter_token, *b.request_preemptions):
        wanted |= {hist + "_sum", hist + "_count"}
    for sample_name in sorted(wanted & samples.keys()):
        for labels, value in samples[sample_name]:
            key = sample_name + _label_text(labels)
            metrics.samples[key] = value
    return metrics


def _name_fields(metrics: ServerMetrics, samples: Samples, backend: str) -> None:
    """Record, per normalised field, the series name read, or why none was (never a zero)."""
    for key, attr in FIELDS.items():
        names = candidates(backend, key)
        found = next((n for n in names if (n + "_count" in samples and n + "_sum" in samples
                                           if key in HISTOGRAMS else n in samples)), None)
        if found is not None:
            metrics.series[attr] = found
        elif attr not in ("kv_cache",) or names:
            metrics.absent[attr] = describe(backend, key)


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse_ollama_ps(data: Any) -> list[LoadedModel]:
    """Loaded models from an Ollama ``/api/ps`` answer; ValueError if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ValueError("not an Ollama /api/ps answer")
    models = []
    for item in data["models"]:
        if not isinstance(item, dict):
            continue
        ctx_len = item.get("context_length")
        models.append(
            LoadedModel(
                name=str(item.get("name") or item.get("model") or ""),
                size_bytes=int(item.get("size") or 0),
                size_vram_bytes=int(item.get("size_vram") or 0),
                expires_at=str(item.get("expires_at") or ""),
                context_length=int(ctx_len) if isinstance(ctx_len, int) else None,
            )
        )
    return models


def apply_llamacpp_slots(metrics: ServerMetrics, slots: Any) -> None:
    """Fill slot counts from llama.cpp ``/slots`` (a list of slot objects)."""
    if not isinstance(slots, list):
        return
    entries = [s for s in slots if isinstance(s, dict)]
    metrics.slots_total = len(entries)
    metrics.slots_busy = sum(1 for s in entries if s.get("is_processing"))
    if metrics.requests_running is None:
        metrics.requests_running = float(metrics.slots_busy)


# -- fetching ---------------------------------------------------------------------------------------
def fetch_text(ctx: Context, url_or_path: str) -> str | None:
    """GET a text document through the probe client (timed and counted like every request).

    The endpoint's credentials travel only to its own origin; an exporter on
    another host or port (DCGM, a separate metrics port) is read without them.
    """
    if "://" not in url_or_path:
        timing, text = ctx.client.get_text(url_or_path, root=True)
        return text if timing.ok else None
    timing, text = ctx.client.get_text_url(url_or_path)
    return text if timing.ok else None


def _get_json(ctx: Context, path: str) -> Any | None:
    timing, data = ctx.client.get_json(path, root=True)
    return data if timing.ok else None


def _scrape(ctx: Context, url: str, native: str | None) -> tuple[ServerMetrics | None, str]:
    """One scrape; `native` selects the JSON APIs of Ollama / llama.cpp."""
    if native == "ollama":
        data = _get_json(ctx, "/api/ps")
        try:
            models = parse_ollama_ps(data)
        except ValueError:
            return None, "GET /api/ps gave no model list"
        return ServerMetrics(backend="ollama", url="/api/ps", scraped_at=time.time(), models=models), ""
    text = fetch_text(ctx, url)
    if text is None:
        return None, f"GET {url} failed"
    try:
        metrics = normalize(text, url)
    except ValueError as exc:
        return None, f"{url}: {exc}"
    if metrics.backend == "llamacpp":
        apply_llamacpp_slots(metrics, _get_json(ctx, "/slots"))
    return metrics, ""


def metrics_delta(before: ServerMetrics, after: ServerMetrics, our_requests: int) -> MetricsDelta:
    """What changed between two scrapes of one server (counter resets and restarts flagged)."""
    delta = MetricsDelta(seconds=max(0.0, after.scraped_at - before.scraped_at), our_requests=our_requests)
    for attr in ("ttft", "queue_time", "prefill_time", "decode_time", "e2e", "inference_time", "inter_token",
                 "request_preemptions"):
        a, b = getattr(before, attr), getattr(after, attr)
        if a is None or b is None:
            continue
        if b.count < a.count or b.sum < a.sum:
            delta.counter_reset = True
            continue
        d = Histogram(sum=b.sum - a.sum, count=b.count - a.count)
        delta.counts[attr] = d.count
        if attr == "request_preemptions":  # not a time: preemptions per request finished in between
            delta.preempted_per_request = d.sum / d.count if d.count > 0 else None
            continue
        short = {"queue_time": "queue", "prefill_time": "prefill", "decode_time": "decode",
                 "inference_time": "inference"}.get(attr, attr)
        setattr(delta, f"{short}_ms", d.mean_ms)
        if delta.requests is None and attr in ("ttft", "e2e", "queue_time"):
            delta.requests = d.count
    if before.finished is not None and after.finished is not None:
        moved = {k: v - before.finished.get(k, 0.0) for k, v in after.finished.items()}
        if any(v < 0 for v in moved.values()):
            delta.counter_reset = True
        else:
            delta.finished = {k: v for k, v in moved.items() if v > 0}
    if before.rejected_4xx is not None and after.rejected_4xx is not None:
        diff = after.rejected_4xx - before.rejected_4xx
        delta.counter_reset |= diff < 0
        delta.rejected_4xx = diff if diff >= 0 else None
    if before.preemptions_total is not None and after.preemptions_total is not None:
        diff = after.preemptions_total - before.preemptions_total
        delta.counter_reset |= diff < 0
        delta.preemptions = diff if diff >= 0 else None
    if before.process_start_time and after.process_start_time:
        delta.counter_reset |= after.process_start_time > before.process_start_time
    return delta


def server_metrics(ctx: Context) -> ServerMetricsResult:
    """Scrape backend metrics before and after the ``baseline`` probe."""
    from llmdoctor.context import ProbeUnavailable

    if ctx.target is None and not ctx.options.evidence.metrics_url:
        raise ProbeUnavailable("no endpoint given")
    if not ctx.options.evidence.metrics_url and not ctx.get(DISCOVERY).reachable:
        raise ProbeUnavailable("endpoint not reachable")
    url = ctx.options.evidence.metrics_url or "/metrics"
    notes: list[str] = []
    before, why = _scrape(ctx, url, None)
    native: str | None = None
    if before is None or before.backend == "unknown":
        if why:
            notes.append(why)
        ollama, why_ollama = _scrape(ctx, url, "ollama")
        if ollama is not None:
            before, native, url = ollama, "ollama", "/api/ps"
        elif before is None:
            props = _get_json(ctx, "/props")
            if isinstance(props, dict) and "total_slots" in props:
                before = ServerMetrics(backend="llamacpp", url="/slots", scraped_at=time.time())
                apply_llamacpp_slots(before, _get_json(ctx, "/slots"))
                notes.append("llama.cpp without --metrics: read /props and /slots only")
            else:
                raise ProbeUnavailable(
                    f"no backend metrics: {why}; not Ollama ({why_ollama}); pass --metrics-url "
                    "(vLLM/TGI/SGLang serve /metrics; SGLang needs --enable-metrics, llama.cpp --metrics)"
                )
    assert before is not None
    baseline = ctx.optional(BASELINE)
    ran_before = [t.started_at for t in (*baseline.warmup[1:], *baseline.samples)] if baseline is not None else []
    if ran_before and min(ran_before) < before.scraped_at:
        # Only when a caller measured the baseline first: a run's schedule scrapes around it.
        notes.append("the baseline ran before the first scrape: no delta over our requests")
        return ServerMetricsResult(before.backend, url, before, notes=notes)
    after, why_after = _scrape(ctx, url, native)
    if after is None:
        notes.append(f"second scrape failed: {why_after}")
        return ServerMetricsResult(before.backend, url, before, notes=notes)
    # Ours: the baseline requests between the scrapes that the server answered (in a scheduled run the
    # first request came before the first scrape), so a histogram that gained exactly these holds ours alone.
    sent = (*baseline.warmup, *baseline.samples) if baseline is not None else ()
    ours = sum(1 for t in sent if t.ok and t.started_at >= before.scraped_at)
    result = ServerMetricsResult(before.backend, url, before, after, metrics_delta(before, after, ours), notes)
    if baseline is None:
        notes.append("baseline unavailable: the delta holds no requests of ours")
    return result
