"""LD503: latency grows with concurrent requests (server-side queueing or a pool cap)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.limits import QUEUEING_LIMITS
from llmdoctor.probes.catalog import CONCURRENCY


class ConcurrencyQueueing(Check):
    """Queueing at N: requests sent together wait for each other.

    ## What it checks
    With `--concurrency N` (off by default), sends the minimal request twice alone,
    then N at once (never more than N in flight, within the request budget). Fires
    when the median at N is 1.5x the median alone or more; "effective parallelism"
    (N x single latency / batch wall time) estimates how many run at once.

    ## Why it adds latency
    A server with fewer slots than concurrent requests (llama.cpp `--parallel`,
    Ollama `OLLAMA_NUM_PARALLEL`, a small vLLM `--max-num-seqs`) queues the rest; a
    client pool cap does the same on the caller's side. Queue time adds to TTFT.

    ## Example
    N=4: alone 150 ms, at 4 a median of 255 ms and a 400 ms tail; effective
    parallelism 1.0 - requests are served one at a time.

    ## Fix
    Server: raise its parallel slots / batch size (llama.cpp `--parallel`, Ollama
    `OLLAMA_NUM_PARALLEL`, vLLM `--max-num-seqs`) or add replicas. Client: check the
    pool - httpx defaults to 100 connections (20 kept alive), aiohttp's connector
    to 100 (`limit`, and `limit_per_host` 0 = unlimited), requests' HTTPAdapter
    keeps 10 per host (`pool_maxsize`); raise them to your concurrency.

    ## Caveats
    Continuous batching also slows each request a little as the batch grows; a
    1.5x slowdown at large N can be the price of throughput, not a queue.
    """

    id = "LD503"
    name = "concurrency-queueing"
    title = "Requests queue under concurrency"
    category = Category.CLIENT
    requires = (CONCURRENCY,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        cr = ctx.get(CONCURRENCY)
        slowdown, single, parallel = cr.slowdown, cr.single_p50_ms, cr.parallel_p50_ms
        if slowdown is None or single is None or parallel is None or slowdown < QUEUEING_LIMITS.slowdown:
            return
        eff = cr.effective_parallelism
        serial = eff is not None and eff < 1.5
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.HIGH if serial else Confidence.MEDIUM,
            title=f"At {cr.n} concurrent requests latency grows {slowdown:.1f}x",
            message=(
                f"Alone a request takes {single:.0f} ms; with {cr.n} in flight the median is {parallel:.0f} ms"
                f" (slowest {max(cr.parallel_ms):.0f} ms)."
                + (f" About {eff:.1f} request(s) run at once: the rest queue." if eff is not None else "")
            ),
            impact_ms=round(parallel - single, 1),
            frequency=Frequency.UNDER_LOAD,
            impact_basis=f"median extra latency at {cr.n} concurrent requests",
            evidence=(
                Evidence("median alone", round(single, 1), "ms", "concurrency"),
                Evidence(f"median at {cr.n}", round(parallel, 1), "ms", "concurrency"),
                Evidence("effective parallelism", None if eff is None else round(eff, 2), "", "concurrency"),
                Evidence("max in flight", cr.max_in_flight, "", "concurrency"),
            ),
            # its own fix, not the cause's: a wait at N may be the client's pool cap, which LD503 alone can see
            fix=Fix(
                "Give the server more parallel slots, or check the client pool",
                (
                    "llama.cpp `--parallel N`, Ollama `OLLAMA_NUM_PARALLEL`, vLLM `--max-num-seqs`; or more replicas.",
                    "httpx: Limits(max_connections=100, max_keepalive_connections=20) by default; aiohttp "
                    "TCPConnector(limit=100); requests HTTPAdapter(pool_maxsize=10) per host - raise to your N.",
                ),
            ),
            cause=Cause.QUEUEING,  # the probe keeps all N in flight itself: the wait is at the server
        )
