"""LD205: the server preempted or retracted requests during the run."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.server_metrics import ServerMetricsResult
from llmdoctor.probes.backends import knob
from llmdoctor.probes.catalog import SERVER_METRICS


class Preemptions(Check):
    """Preemptions: running requests were evicted and recomputed.

    ## What it checks
    The growth of ``vllm:num_preemptions_total`` between the scrapes taken
    before and after the baseline (so: during our requests), and SGLang's
    ``sglang:num_retracted_reqs`` gauge. A non-zero cumulative count with no
    growth during the run is reported as info. The evidence adds vLLM's
    ``vllm:request_num_preemptions`` (preemptions per request finished in the
    interval) and the KV cache's size from ``vllm:cache_config_info`` (blocks
    x block size), as vLLM 0.32 exports them. vLLM V1 logs no preemption:
    these counters are its only trace (LD210 stays blind there).

    ## Why it adds latency
    A preempted sequence loses its KV cache and later recomputes its whole
    prefill (or swaps it back): its latency grows by at least one prefill,
    and the recompute steals GPU time from every other request.

    ## Example
    `vllm:num_preemptions_total` grew by 12 during 8 of our requests; mean
    prefill 180 ms, so about 2.2 s of recomputation.

    ## Fix
    Preemption means the KV cache is overcommitted: admit fewer concurrent
    sequences, shorten contexts, give the cache more memory (knob below), or
    add capacity.

    ## Caveats
    The counter is server-wide: other clients' requests may have been the
    ones preempted. TGI and llama.cpp export no preemption counter: the
    check is skipped saying, per metric, "not exported" or "absent in this
    version" (with the names and versions of the metric-name table).
    """

    id = "LD205"
    name = "preemptions"
    title = "Requests preempted by the server"
    category = Category.SERVER
    requires = (SERVER_METRICS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        m = ctx.get(SERVER_METRICS)
        total = m.latest.preemptions_total
        retracted = m.worst("retracted")
        if total is None and retracted is None:
            raise CheckSkipped(f"no preemption or retraction metric on {m.backend}: preemptions "
                               f"{m.why_absent('preemptions_total')}; retractions {m.why_absent('retracted')}")
        during = m.delta.preemptions if m.delta else None
        prefill = m.delta.prefill_ms if m.delta else None
        fix = Fix(
            "Stop overcommitting the KV cache.",
            (
                "Admit fewer concurrent sequences or shorten prompts / max_tokens.",
                "Add GPUs/replicas or serve a quantized model to free memory for the cache.",
                *knob(m.backend, "kv"),
            ),
        )
        if during or retracted:
            count = during or retracted or 0.0
            what = "preemptions during our run" if during else "requests retracted (now)"
            impact = prefill * count if prefill is not None and during else None
            yield Finding(
                Severity.WARNING,
                Confidence.HIGH if during else Confidence.MEDIUM,
                f"{count:.0f} {what} ({m.backend})",
                f"The server evicted {count:.0f} running request(s) to free KV cache; each must "
                "recompute its prefill before it continues.",
                fix,
                impact_ms=impact,
                frequency=Frequency.UNDER_LOAD,
                impact_basis=(
                    "preemptions x mean prefill time during our run" if impact is not None
                    else f"not measured: no prefill-time histogram ({m.why_absent('prefill_time')})"
                ),
                evidence=(Evidence(what, count, "", m.url), Evidence("cumulative preemptions", total, "", m.url),
                          *_kv_evidence(m)),
                cause=Cause.KV_CACHE_PRESSURE,
            )
        elif total:
            yield Finding(
                Severity.INFO,
                Confidence.MEDIUM,
                f"{total:.0f} preemptions since the server started ({m.backend})",
                f"None happened during our run, but the server has preempted {total:.0f} requests "
                "since it started: the KV cache overflows under its peak load.",
                fix,
                impact_basis="not during our run; cost falls on requests at peak load",
                evidence=(Evidence("cumulative preemptions", total, "", m.url),),
                cause=Cause.KV_CACHE_PRESSURE,
            )


def _kv_evidence(m: ServerMetricsResult) -> tuple[Evidence, ...]:
    """Preemptions per finished request and the KV cache's size, where the backend exports them."""
    out = []
    per_request = m.delta.preempted_per_request if m.delta else None
    if per_request is not None:
        out.append(Evidence("preemptions per finished request", round(per_request, 2), "", m.url))
    kv = m.latest.kv_cache
    if kv is not None and kv.capacity_tokens is not None:
        blocks = f" ({kv.num_blocks} blocks of {kv.block_size})" if kv.num_blocks and kv.block_size else ""
        out.append(Evidence("KV cache size", f"{kv.capacity_tokens:,} tokens{blocks}", "", m.url))
    return tuple(out)
