"""LD210: the server's logs report KV-cache preemption (vLLM) or retraction (SGLang)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.logscan import KV_PREEMPTION
from llmdoctor.probes.catalog import BASELINE, LOGS

_CUMULATIVE = re.compile(r"(?:total_num_cumulative_preemption|total_cumulative_preemption_cnt)=(\d+)")
MANY = 50


class LogPreemption(Check):
    """KV-cache preemption in the server logs: requests evicted and recomputed.

    ## What it checks
    Counts vLLM's "Sequence group N is preempted by PreemptionMode.RECOMPUTE mode because
    there is not enough KV cache space" warnings (and its cumulative counter) and SGLang's
    "KV cache pool is full. Retract requests." lines. vLLM V1 (checked on 0.32) writes no line
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
    metrics check LD205 measures the rate during this run.
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
        line_count = scan.count(KV_PREEMPTION) if hits else 0
        count = line_count + stats.preemptions
        if not count:
            return
        cumulative = max((int(m.group(1)) for h in hits for m in [_CUMULATIVE.search(h.text)] if m), default=None)
        baseline = ctx.optional(BASELINE)
        ttft = getattr(baseline, "ttft_p50_ms", None) if baseline is not None else None
        last_where, last_text = (hits[-1].where, hits[-1].text) if hits else (stats.first_preemption_where,
                                                                              stats.first_preemption_text)
        total = f"; the server's cumulative counter reached {cumulative}" if cumulative else ""
        if stats.preemptions:
            total += (f"; vLLM's periodic stats lines count {stats.preemptions} in {stats.preemption_lines} "
                      "interval(s) (vLLM V1 writes no line per preemption)")
        evidence = [Evidence("events", count, "", "logs"), Evidence("last", last_text, "", last_where or "logs")]
        if stats.preemptions:
            evidence.append(Evidence("preemptions in stats lines", stats.preemptions, "", "logs"))
        if cumulative:
            evidence.append(Evidence("cumulative preemptions", cumulative, "", last_where or "logs"))
        yield Finding(
            severity=Severity.CRITICAL if count >= MANY else Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"KV cache full: {count} preemption(s) in server logs",
            message=(
                f"The server preempted (or retracted) requests {count} time(s) for lack of KV-cache space{total}. "
                f"{'Last' if hits else 'First'} at {last_where}."
            ),
            impact_ms=round(ttft, 1) if ttft else None,
            impact_basis=(
                "each preempted request prefills again: at least one more time to first token (warm median)"
                if ttft
                else "each preempted request prefills its prompt again; no baseline to size it"
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
