"""LD302: the server restarted or loaded its model recently (cold-start evidence)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measures import cold_start_penalty_ms
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST, HOST, SERVER_METRICS

RECENT_S = 600.0
EXPIRY_SOON_S = 60.0


class RecentRestart(Check):
    """Recent restart: the server or its model started moments ago.

    ## What it checks
    Server-side cold-start evidence: the serving process's uptime (from
    ``--pid`` / a process found by name, or ``process_start_time_seconds``
    in its metrics) under ten minutes; counters that went backwards between
    our two scrapes (a restart during the run); a vLLM engine asleep
    (``vllm:engine_sleep_state``); an Ollama model absent before our requests
    and loaded after them, or due to unload within a minute (``expires_at``).

    ## Why it adds latency
    Right after a start the weights are loaded, kernels compiled and caches
    empty: the first requests pay seconds. A sleeping vLLM engine or an
    unloaded Ollama model pays the load again on the next request.

    ## Example
    `vllm serve` started 94 s before the run; our first request took 2.1 s
    longer than the warm ones.

    ## Fix
    Keep instances warm: no scale-to-zero for latency-critical paths, a warm-up
    request after start before taking traffic, a longer keep-alive
    (``OLLAMA_KEEP_ALIVE``, ``keep_alive`` per request; ``-1`` keeps it loaded),
    and health checks that run a real generation.

    ## Caveats
    A young process is evidence, not proof, that users hit a cold start;
    LD301 measures the penalty itself and its number is used here as impact.
    """

    id = "LD302"
    name = "recent-restart"
    title = "Server restarted or model loaded recently"
    category = Category.COLD_START
    optional = (SERVER_METRICS, HOST, FIRST_REQUEST, BASELINE)

    def run(self, ctx: Context) -> Iterator[Finding]:
        metrics = ctx.optional(SERVER_METRICS)
        host = ctx.optional(HOST)
        if metrics is None and (host is None or host.server_process is None):
            raise CheckSkipped("neither backend metrics nor the server process are available")
        signs: list[tuple[str, Evidence]] = []
        recurs = False  # a sign that cold starts come back: a sleeping engine, a keep-alive about to expire
        proc = host.server_process if host is not None else None
        if proc is not None and proc.uptime_s is not None and proc.uptime_s < RECENT_S:
            signs.append((f"process {proc.pid} ({proc.name}) started {proc.uptime_s:,.0f} s ago",
                          Evidence("server process uptime", round(proc.uptime_s), "s", "host")))
        if metrics is not None:
            up = metrics.before.uptime_s
            if proc is None and up is not None and up < RECENT_S:
                signs.append((f"the serving process started {up:,.0f} s before the first scrape",
                              Evidence("uptime from process_start_time_seconds", round(up), "s", metrics.url)))
            if metrics.delta is not None and metrics.delta.counter_reset:
                signs.append(("its counters went backwards between our scrapes: it restarted during the run",
                              Evidence("counter reset", "yes", "", metrics.url)))
            if metrics.worst_sleeping():
                signs.append(("the vLLM engine is asleep (weights offloaded): the next request wakes it",
                              Evidence("vllm:engine_sleep_state awake", 0, "", metrics.url)))
                recurs = True
            before, after = metrics.before.models, metrics.latest.models
            if before is not None and after is not None:
                fresh = sorted({x.name for x in after} - {x.name for x in before})
                if fresh:
                    signs.append((f"{', '.join(fresh)} was not loaded before our requests and was loaded by them",
                                  Evidence("loaded during the run", ", ".join(fresh), "", "/api/ps")))
                for x in after:
                    expires = x.expires_unix
                    left = expires - metrics.latest.scraped_at if expires and expires > 0 else None
                    if left is not None and 0 <= left < EXPIRY_SOON_S:
                        signs.append((f"{x.name} unloads in {left:,.0f} s (keep-alive expiry)",
                                      Evidence("expires_at", x.expires_at, "", "/api/ps")))
                        recurs = True
        if not signs:
            return
        first, base = ctx.optional(FIRST_REQUEST), ctx.optional(BASELINE)
        penalty = None
        if first is not None and base is not None and first.ttft_ms is not None and base.ttft_p50_ms:
            penalty = max(0.0, cold_start_penalty_ms(first.ttft_ms, first.setup_ms, base.ttft_p50_ms))
        yield Finding(
            Severity.WARNING if penalty and penalty >= 500 else Severity.INFO,
            Confidence.HIGH,
            "Cold-start evidence: " + signs[0][0].split(":")[0],
            "The server shows signs of a recent (or imminent) cold start: " + "; ".join(s for s, _ in signs) + ".",
            Fix(
                "Keep the server and its model warm.",
                (
                    "Run a minimum of one warm replica; avoid scale-to-zero for latency-critical traffic.",
                    "Send a warm-up generation after every start before the instance takes traffic.",
                    "Ollama: raise OLLAMA_KEEP_ALIVE (or keep_alive per request; -1 = never unload).",
                    "vLLM: do not put the engine to sleep (/sleep) on instances that serve live traffic.",
                ),
            ),
            impact_ms=penalty,
            frequency=Frequency.RECURRING_COLD_START if recurs else Frequency.COLD_START,
            impact_basis=("first request TTFT minus warm median TTFT (measured)" if penalty is not None
                          else "not measured here; see LD301 for the first-request penalty"),
            evidence=tuple(e for _, e in signs),
            cause=Cause.COLD_START,
        )
