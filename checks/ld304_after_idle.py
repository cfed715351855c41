"""LD304: the first request after an idle pause is slower than warm ones."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import IDLE

MIN_PENALTY_MS = 100.0
MIN_RATIO = 1.5


class AfterIdlePenalty(Check):
    """After-idle penalty: a request after a quiet pause pays a warm-up again.

    ## What it checks
    With `--idle-test SECONDS` (off by default): after the warm baseline, waits the
    given seconds, sends the same minimal request once and compares its time to
    first token (else total) with the warm median. Fires when it is 100 ms and
    1.5x slower or more.

    ## Why it adds latency
    Servers unload idle models (Ollama `keep_alive` 5 min, llama.cpp sleeping,
    vLLM sleep mode), autoscalers scale to zero, GPUs drop clocks, and idle
    connections are closed by proxies - the next request pays the reload.

    ## Example
    After 300 s idle: TTFT 4,200 ms against a warm median of 180 ms.

    ## Fix
    Keep the model loaded (Ollama `OLLAMA_KEEP_ALIVE=-1` or `keep_alive` per request,
    min replicas >= 1), send a cheap keep-warm request more often than the idle
    timeout, and keep connections alive past the proxy's idle timeout.

    ## Caveats
    One request after one pause: noise is possible; repeat with a longer pause to
    find the threshold.
    """

    id = "LD304"
    name = "after-idle-penalty"
    title = "Slow after idle"
    category = Category.COLD_START
    requires = (IDLE,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        idle = ctx.get(IDLE)
        after = idle.after_idle
        penalty = idle.penalty_ms
        warm = idle.warm_ttft_p50_ms if after.ttft_ms is not None else idle.warm_total_p50_ms
        measured = after.ttft_ms if after.ttft_ms is not None else after.total_ms
        if penalty is None or warm is None or measured is None:
            return
        if penalty < MIN_PENALTY_MS or measured < MIN_RATIO * warm:
            return
        reconnect = "" if after.reused_connection else " It also had to open a new connection."
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.MEDIUM,
            title=f"After {idle.idle_s:g} s idle a request takes {penalty:.0f} ms longer",
            message=(
                f"After {idle.idle_s:g} s without requests, the first one took {measured:.0f} ms against a warm "
                f"median of {warm:.0f} ms.{reconnect}"
            ),
            cause=Cause.COLD_START,
            impact_ms=round(penalty, 1),
            frequency=Frequency.RECURRING_COLD_START,
            impact_basis="extra latency of the first request after the idle pause",
            evidence=(
                Evidence("idle pause", idle.idle_s, "s", "idle"),
                Evidence("after idle", round(measured, 1), "ms", "idle"),
                Evidence("warm median", round(warm, 1), "ms", "baseline"),
                Evidence("reused connection", after.reused_connection, "", "idle"),
            ),
            fix=Fix(
                "Keep the model and the connection warm",
                (
                    "Keep the model loaded: OLLAMA_KEEP_ALIVE=-1, min replicas >= 1, no scale to zero.",
                    "Send a cheap keep-warm request more often than the server's idle timeout.",
                ),
            ),
        )
