"""LD302: the server restarted or loaded its model recently (cold-start evidence)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.measures import cold_start_noise_ms, cold_start_penalty_ms
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.latency_samples import BaselineResult
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST, HOST, SERVER_METRICS

RECENT_S = 600.0
EXPIRY_SOON_S = 60.0


def _inside(started_at: float | None, run_started: float | None) -> bool:
    """The process started after our first request did: inside this run."""
    return started_at is not None and run_started is not None and started_at >= run_started


def _beyond_noise(penalty: float, base: BaselineResult) -> bool:
    """The first request was clearly slower than warm ones: more than the noise of the warm samples explains."""
    p50, p90 = base.ttft_p50_ms, base.ttft_p90_ms
    if p50 is None:
        return False
    return penalty >= cold_start_noise_ms(p50, p90 if p90 is not None else p50)


class RecentRestart(Check):
    """Recent restart: the server or its model started moments ago.

    ## What it checks
    Server-side cold-start evidence that something paid for it: the serving
    process (``--pid``, the local endpoint's listener or a process found by
    name, or ``process_start_time_seconds`` in its metrics) started after our
    first request; counters that went backwards between our two scrapes (a
    restart during the run); a vLLM engine asleep (``vllm:engine_sleep_state``);
    an Ollama model absent before our requests and loaded after them, or due to
    unload within a minute (``expires_at``). A process started under ten
    minutes before the run counts only when our first request paid a penalty
    beyond noise (over 100 ms, the warm median and three times the warm spread,
    as LD301 measures it): a warm server started minutes ago is no finding.

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
    Without the first request's timing (it failed, or a recording lacks it)
    only the signs that back themselves are reported.
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
        first, base = ctx.optional(FIRST_REQUEST), ctx.optional(BASELINE)
        penalty = None
        if first is not None and base is not None and first.ttft_ms is not None and base.ttft_p50_ms:
            penalty = max(0.0, cold_start_penalty_ms(first.ttft_ms, first.setup_ms, base.ttft_p50_ms))
        run_started = first.started_at if first is not None and first.started_at else None
        # Signs that back themselves (a start inside the run, an imminent cold start), and a young age,
        # which counts only when the first request paid for it: a warm server started minutes ago is no news.
        backed: list[tuple[str, Evidence]] = []
        young: list[tuple[str, Evidence]] = []
        recurs = False  # a sign that cold starts come back: a sleeping engine, a keep-alive about to expire
        proc = host.server_process if host is not None else None
        if proc is not None and proc.uptime_s is not None and proc.uptime_s < RECENT_S:
            evidence = Evidence("server process uptime", round(proc.uptime_s), "s", "host")
            if _inside(proc.started_at, run_started):
                assert proc.started_at is not None and run_started is not None
                backed.append((f"process {proc.pid} ({proc.name}) started during the run, "
                               f"{proc.started_at - run_started:,.1f} s after our first request", evidence))
            else:
                young.append((f"process {proc.pid} ({proc.name}) started {proc.uptime_s:,.0f} s ago", evidence))
        if metrics is not None:
            up, start = metrics.before.uptime_s, metrics.before.process_start_time
            if proc is None and up is not None and up < RECENT_S:
                evidence = Evidence("uptime from process_start_time_seconds", round(up), "s", metrics.url)
                if _inside(start, run_started):
                    backed.append(("the serving process started during the run, after our first request", evidence))
                else:
                    young.append((f"the serving process started {up:,.0f} s before the first scrape", evidence))
            if metrics.delta is not None and metrics.delta.counter_reset:
                backed.append(("its counters went backwards between our scrapes: it restarted during the run",
                               Evidence("counter reset", "yes", "", metrics.url)))
            if metrics.worst_sleeping():
                backed.append(("the vLLM engine is asleep (weights offloaded): the next request wakes it",
                               Evidence("vllm:engine_sleep_state awake", 0, "", metrics.url)))
                recurs = True
            before, after = metrics.before.models, metrics.latest.models
            if before is not None and after is not None:
                fresh = sorted({x.name for x in after} - {x.name for x in before})
                if fresh:
                    backed.append((f"{', '.join(fresh)} was not loaded before our requests and was loaded by them",
                                   Evidence("loaded during the run", ", ".join(fresh), "", "/api/ps")))
                for x in after:
                    expires = x.expires_unix
                    left = expires - metrics.latest.scraped_at if expires and expires > 0 else None
                    if left is not None and 0 <= left < EXPIRY_SOON_S:
                        backed.append((f"{x.name} unloads in {left:,.0f} s (keep-alive expiry)",
                                       Evidence("expires_at", x.expires_at, "", "/api/ps")))
                        recurs = True
        paid = penalty is not None and base is not None and _beyond_noise(penalty, base)
        if paid and young:
            assert penalty is not None
            young.append((f"and our first request paid {penalty:,.0f} ms more than warm ones",
                          Evidence("first request TTFT minus warm median", round(penalty), "ms", "first_request")))
        signs = backed + (young if paid else [])
        if not signs:
            return
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
