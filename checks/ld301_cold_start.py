"""LD301: the first request pays a cold-start penalty."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.measures import cold_start_noise_ms, cold_start_penalty_ms
from llmdoctor.analysis.request_metrics import queued_ms
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Frequency, Severity
from llmdoctor.limits import COLD_START_LIMITS
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST


class ColdStart(Check):
    """Cold start: the first request is much slower than warm ones.

    ## What it checks
    Compares the time to first token of the run's very first generation
    request with the median of the warm "Say ok." samples, after removing the
    connection set-up the first request paid (DNS, TCP, TLS). The difference
    is the cold-start penalty: model load, runtime initialisation, kernel
    compilation or caches filled on first use.

    ## Why it adds latency
    Every scale-from-zero, restart or keep-alive unload makes one user wait
    seconds to tens of seconds before the first token.

    ## Example
    First request TTFT 1,560 ms vs warm median 360 ms → a 1,200 ms cold-start
    penalty per cold start.

    ## Fix
    Keep instances warm: a minimum of one replica, keep-alive health checks
    that run a real generation, and a warm-up request right after start-up
    before the instance receives traffic. Quantized weights (GGUF INT4/INT8,
    AWQ, GPTQ) load faster; compile once and cache compiled kernels.

    ## Caveats
    A server that someone else already warmed shows no penalty: run the check
    right after a restart to measure it. Fires only when the penalty exceeds
    100 ms, the warm median itself, and three times the warm jitter. Time the
    server's own clock says the first request waited in its queue (vLLM's
    ``metrics.queue_time_ms``) is behind other requests, not warming up: it is
    taken out of the penalty.
    """

    id = "LD301"
    name = "cold-start"
    title = "Cold start on the first request"
    category = Category.COLD_START
    requires = (FIRST_REQUEST, BASELINE)

    def run(self, ctx: Context) -> Iterator[Finding]:
        first = ctx.get(FIRST_REQUEST)
        base = ctx.get(BASELINE)
        warm_p50, warm_p90 = base.ttft_p50_ms, base.ttft_p90_ms
        if first.ttft_ms is None or warm_p50 is None or warm_p90 is None:
            return
        first_ttft = first.ttft_ms - first.setup_ms
        queued = queued_ms(first)  # behind other requests, by the server's own clock: not warming up
        penalty = cold_start_penalty_ms(first.ttft_ms, first.setup_ms, warm_p50) - queued
        if penalty < cold_start_noise_ms(warm_p50, warm_p90):
            return
        severity = Severity.WARNING if penalty >= COLD_START_LIMITS.warning_ms else Severity.INFO
        confidence = Confidence.HIGH if len(base.ok_samples) >= 5 else Confidence.MEDIUM
        in_queue = f"; {queued:,.0f} ms of it in the server's queue by its own clock, not counted" if queued else ""
        yield Finding(
            severity,
            confidence,
            f"Cold start: first request {penalty:,.0f} ms slower than warm",
            f"The first request waited {first_ttft:,.0f} ms for its first token (connection set-up "
            f"excluded{in_queue}); warm requests wait {warm_p50:,.0f} ms (median of {len(base.ok_samples)}).",
            Cause.COLD_START.fix,
            cause=Cause.COLD_START,
            impact_ms=penalty,
            frequency=Frequency.COLD_START,
            impact_basis="extra time to first token, paid once per cold start",
            evidence=(
                Evidence("first request TTFT", round(first_ttft, 1), "ms", "first_request"),
                Evidence("warm TTFT p50", round(warm_p50, 1), "ms", "baseline"),
                Evidence("warm TTFT p90", round(warm_p90, 1), "ms", "baseline"),
                *((Evidence("first request queued (server's clock)", round(queued, 1), "ms", "first_request"),)
                  if queued else ()),
            ),
        )
