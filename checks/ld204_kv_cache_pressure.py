"""LD204: the KV cache is nearly full."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.limits import KV_CACHE_LIMITS
from llmdoctor.probes.backends import knob
from llmdoctor.probes.catalog import SERVER_METRICS

HIGH_USAGE = KV_CACHE_LIMITS.high_usage  # the diagnosis reads the same number
FULL_USAGE = KV_CACHE_LIMITS.full_usage


class KvCachePressure(Check):
    """KV-cache pressure: the server's KV cache is (nearly) full.

    ## What it checks
    The backend's KV-cache usage gauge, the larger of the two scrapes around
    the baseline: ``vllm:kv_cache_usage_perc`` (V0: ``gpu_cache_usage_perc``),
    ``sglang:token_usage``, ``llamacpp:kv_cache_usage_ratio`` on builds that
    still export it. Fires at 90%; critical at 98% or when preemptions grew.

    ## Why it adds latency
    Each running sequence holds KV blocks for its whole context. When blocks
    run out the scheduler stops admitting requests (they queue) or preempts
    running ones and recomputes their prefill later.

    ## Example
    `vllm:kv_cache_usage_perc` 0.97 with 14 requests waiting.

    ## Fix
    Give the cache more memory or ask less of it: shorter prompts and
    max_tokens, a lower maximum context, fewer concurrent sequences, an FP8
    KV cache, more GPUs or replicas; the backend's own knob is below.

    ## Caveats
    A full cache is fine when nothing waits: check LD203 and LD205. TGI and
    current llama.cpp export no usage gauge, so the check is skipped for them,
    saying why from the metric-name table: "absent in this version" (with the
    name and the version that removed it: llama.cpp's
    ``llamacpp:kv_cache_usage_ratio``) or "not exported" (TGI never had one).
    """

    id = "LD204"
    name = "kv-cache-pressure"
    title = "KV cache nearly full"
    category = Category.SERVER
    requires = (SERVER_METRICS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        m = ctx.get(SERVER_METRICS)
        usage = m.worst("kv_cache_usage")
        if usage is None:
            raise CheckSkipped(f"no KV-cache usage gauge on {m.backend}: {m.why_absent('kv_cache_usage')}")
        if usage < HIGH_USAGE:
            return
        preempted = m.delta.preemptions if m.delta else None
        waiting = m.worst("requests_waiting")
        critical = usage >= FULL_USAGE or bool(preempted)
        queue_ms = m.delta.queue_ms if m.delta else None
        evidence = [Evidence("KV-cache usage (max of 2 scrapes)", round(100 * usage, 1), "%", m.url)]
        if waiting is not None:
            evidence.append(Evidence("requests waiting", waiting, "", m.url))
        if preempted is not None:
            evidence.append(Evidence("preemptions during our run", preempted, "", m.url))
        yield Finding(
            Severity.CRITICAL if critical else Severity.WARNING,
            Confidence.HIGH,
            f"KV cache {usage:.0%} full ({m.backend})",
            f"The {m.backend} KV cache was {usage:.1%} used"
            + (f" with {waiting:.0f} requests waiting" if waiting else "")
            + (f" and {preempted:.0f} preemptions during our run" if preempted else "")
            + ": new sequences wait for blocks or evict running ones.",
            Fix(
                "Give the KV cache more room or make requests hold less of it.",
                (
                    "Shorten prompts and max_tokens; lower the maximum context length the server allows.",
                    "Add GPUs/replicas, or serve a quantized model to free memory for the cache.",
                    *knob(m.backend, "kv"),
                ),
            ),
            impact_ms=queue_ms,
            frequency=Frequency.UNDER_LOAD,
            impact_basis=(
                "queue time per request measured during our run" if queue_ms is not None
                else f"not measured: no queue-time histogram ({m.why_absent('queue_time')})"
            ),
            evidence=tuple(evidence),
            cause=Cause.KV_CACHE_PRESSURE,
        )
