"""LD201: the GPU is saturated (utilisation pinned near 100%)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.backends import knob
from llmdoctor.probes.catalog import SERVER_METRICS
from llmdoctor.probes.gpu import ANY_GPU, GpuSnapshot, any_gpu

SATURATED_MEAN_PCT = 95.0
SATURATED_MIN_PCT = 85.0


class GpuSaturation(Check):
    """GPU saturated: utilisation pinned at ~100% while we measured.

    ## What it checks
    Samples each GPU's utilisation several times over about a second (NVML on
    this machine, or the serving host's DCGM exporter) and fires when the mean
    is at least 95% and no sample fell below 85%.

    ## Why it adds latency
    A GPU that is always busy has no idle time for a new request: the
    scheduler makes it wait for a slot in the running batch, and each decode
    step is shared with more sequences. Queue time and TTFT grow with load.

    ## Example
    `NVIDIA H100 80GB HBM3` at 99.8% mean (min 99%) over 5 samples, clocks
    capped by `sw_power_cap`.

    ## Fix
    Add capacity or reduce the work per request: more replicas or GPUs, a
    smaller or quantized model for latency-critical paths, caching of frequent
    answers, shorter max_tokens. Bound concurrency so queueing happens where
    you can see it (the backend's own knob, below).

    ## Caveats
    NVML "utilisation" is the share of time any kernel ran, not how full the
    SMs were: a small batch can read 100%. Readings are a one-second window;
    another tenant's job counts too. Confirm with LD203 (queue building).
    """

    id = "LD201"
    name = "gpu-saturation"
    title = "GPU saturated"
    category = Category.SERVER
    optional = (*ANY_GPU, SERVER_METRICS)

    def run(self, ctx: Context) -> Iterator[Finding]:
        snap: GpuSnapshot = any_gpu(ctx)
        metrics = ctx.optional(SERVER_METRICS)
        backend = metrics.backend if metrics is not None else None
        queue_ms = metrics.delta.queue_ms if metrics is not None and metrics.delta else None
        for g in snap.gpus:
            mean, low = g.util_mean, g.util_min
            if mean is None or low is None or mean < SATURATED_MEAN_PCT or low < SATURATED_MIN_PCT:
                continue
            evidence = [
                Evidence("utilisation (mean)", round(mean, 1), "%", snap.source),
                Evidence("utilisation (min)", round(low, 1), "%", snap.source),
                Evidence("samples", len(g.util_samples), "", snap.source),
            ]
            if g.throttle_reasons:
                evidence.append(Evidence("clock limits", ", ".join(g.throttle_reasons), "", snap.source))
            if queue_ms is not None:
                evidence.append(Evidence("queue time per request", round(queue_ms, 1), "ms", "server_metrics"))
            yield Finding(
                Severity.WARNING,
                Confidence.HIGH if len(g.util_samples) >= 3 else Confidence.MEDIUM,
                f"GPU {g.index} ({g.name or 'unknown'}) saturated at {mean:.0f}%",
                f"GPU {g.index} was busy {mean:.1f}% of the time on average (lowest sample {low:.0f}%) "
                f"over {len(g.util_samples)} samples from {snap.source}; new requests wait for compute.",
                Fix(
                    "Add GPU capacity or cut the work per request.",
                    (
                        "Add replicas/GPUs or move latency-critical traffic to a smaller or quantized model.",
                        "Cache answers to frequent prompts; cap max_tokens to what the caller needs.",
                        *knob(backend, "queue"),
                    ),
                ),
                impact_ms=queue_ms,
                frequency=Frequency.UNDER_LOAD,
                impact_basis=(
                    "queue time per request measured by the backend's histogram during our run"
                    if queue_ms is not None
                    else "not measurable from utilisation alone (no backend queue histogram)"
                ),
                evidence=tuple(evidence),
                cause=Cause.GPU_SATURATION,
            )
