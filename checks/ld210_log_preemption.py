"""LD210: the server's logs report KV-cache pressure: preemption, retraction, no free slot, a full cache and a queue."""

from __future__ import annotations

import re
from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.logs.scan import KV_PREEMPTION
from llmdoctor.probes.catalog import BASELINE, LOGS

_CUMULATIVE = re.compile(r"(?:total_num_cumulative_preemption|total_cumulative_preemption_cnt)=(\d+)")
MANY = 50
# Kinds of KV_PREEMPTION hits that evict a running request (its prefill is redone when it resumes).
_EVICTED = ("preempted", "retracted")


class LogPreemption(Check):
    """KV-cache preemption in the server logs: requests evicted and recomputed.

    ## What it checks
    Counts vLLM's "Sequence group N is preempted by PreemptionMode.RECOMPUTE mode because
    there is not enough KV cache space" warnings (and its cumulative counter), SGLang's
    "KV cache pool is full. Retract requests." / "Decode out of memory happened" lines,
    llama.cpp's "failed to find free space in the KV cache" / "failed to find a memory slot for
    batch" and Ollama's "could not find a kv cache slot" (no room for the next batch), and stats
    lines that show the cache saturated while requests wait: vLLM's periodic line at 95 % KV-cache
    usage or more with requests waiting or pending, SGLang's decode / prefill lines at 0.95 token
    usage or more with requests queued. vLLM V1 (checked on 0.32) writes no line
    per preemption: it adds ``Preemptions: N`` to its periodic stats line ("Engine 000: Avg
    prompt throughput: ..., Running: 6 reqs, Waiting: 0 reqs, Preemptions: 12, CPU KV cache
    usage: 97.5%"), and those counts are added up — but vLLM 0.32 never prints that part (it
    resets the interval's counter before reading it: fixtures/vllm/README.md), so on 0.32 a run
    with real preemptions leaves no trace in the log and LD205's metrics are the only evidence.

    ## Why it adds latency
    A preempted request loses its KV cache and is put back in the queue; when it resumes its
    whole prompt and the tokens generated so far are prefilled again. Its latency grows by at
    least one more prefill plus the wait, and the GPU spends time on work already done.

    ## Example
    `vllm.log:1`: `Sequence group 147 is preempted by PreemptionMode.RECOMPUTE mode ...
    total_num_cumulative_preemption=1`.

    ## Fix
    Give the KV cache more room or ask less of it: raise `--gpu-memory-utilization`, lower
    `--max-num-seqs` / `--max-num-batched-tokens`, lower `--max-model-len`, add tensor
    parallelism, quantize weights or the KV cache (`--kv-cache-dtype fp8`); SGLang: raise
    `--schedule-conservativeness` or `--mem-fraction-static`.

    ## Caveats
    SGLang's docs call an occasional retraction (about once a minute) acceptable; the
    metrics check LD205 measures the rate during this run. A saturated stats line is one
    sample every 10 s (vLLM) or every few decode steps (SGLang): their count measures how long
    the cache stayed full, not how many requests suffered.
    """

    id = "LD210"
    name = "log-kv-preemption"
    title = "KV-cache preemption in server logs"
    category = Category.SERVER
    requires = (LOGS,)
    optional = (BASELINE,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        scan = ctx.get(LOGS)
        stats = scan.engine_stats
        hits = scan.hits.get(KV_PREEMPTION) or []
        evicted = scan.count_kind(KV_PREEMPTION, *_EVICTED) + stats.preemptions
        if not scan.kind_counts:  # a scan recorded before kinds were counted: its KV events were preemptions
            evicted += scan.count(KV_PREEMPTION)
        no_slot = scan.count_kind(KV_PREEMPTION, "kv-full")
        full_lines = scan.count_kind(KV_PREEMPTION, "kv-saturated")
        count = evicted + no_slot + full_lines
        if not count:
            return
        cumulative = max((int(m.group(1)) for h in hits for m in [_CUMULATIVE.search(h.text)] if m), default=None)
        baseline = ctx.optional(BASELINE)
        ttft = getattr(baseline, "ttft_p50_ms", None) if baseline is not None else None
        last_where, last_text = (hits[-1].where, hits[-1].text) if hits else (stats.first_preemption_where,
                                                                              stats.first_preemption_text)
        parts = [f"{n} {what}" for n, what in ((evicted, "preemption(s)"), (no_slot, "'no free KV slot' error(s)"),
                                                (full_lines, "stats line(s) with the cache full and requests waiting"))
                 if n]
        total = f"; the server's cumulative counter reached {cumulative}" if cumulative else ""
        if stats.preemptions:
            total += (f"; vLLM's periodic stats lines count {stats.preemptions} in {stats.preemption_lines} "
                      "interval(s) (vLLM V1 writes no line per preemption)")
        evidence = [Evidence("events", count, "", "logs"), Evidence("last", last_text, "", last_where or "logs")]
        if stats.preemptions:
            evidence.append(Evidence("preemptions in stats lines", stats.preemptions, "", "logs"))
        if no_slot:
            evidence.append(Evidence("no free KV slot", no_slot, "", "logs"))
        if full_lines:
            evidence.append(Evidence("stats lines with the cache full and a queue", full_lines, "", "logs"))
        if cumulative:
            evidence.append(Evidence("cumulative preemptions", cumulative, "", last_where or "logs"))
        recompute = bool(evicted or no_slot)
        yield Finding(
            severity=Severity.CRITICAL if count >= MANY else Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"KV cache full: {', '.join(parts)} in server logs",
            message=(
                f"The server ran out of KV-cache space: {', '.join(parts)}{total}. "
                f"{'Last' if hits else 'First'} at {last_where}."
            ),
            impact_ms=round(ttft, 1) if ttft and recompute else None,
            frequency=Frequency.UNDER_LOAD,
            impact_basis=(
                "each preempted request prefills again: at least one more time to first token (warm median)"
                if ttft and recompute
                else "each preempted request prefills its prompt again; no baseline to size it"
                if recompute
                else "requests wait for cache blocks to free up; the log does not say how long"
            ),
            evidence=tuple(evidence),
            fix=Fix(
                "Give the KV cache more room or ask less of it",
                (
                    "vLLM: raise --gpu-memory-utilization; lower --max-num-seqs or --max-num-batched-tokens; "
                    "lower --max-model-len; --kv-cache-dtype fp8; more tensor parallelism.",
                    "SGLang: raise --schedule-conservativeness or --mem-fraction-static.",
                    "Serve a quantized model to free memory for the cache.",
                ),
            ),
            cause=Cause.KV_CACHE_PRESSURE,
        )
