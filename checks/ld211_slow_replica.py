"""LD211: identical requests fall into two populations — one backend or replica is slower."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from llmdoctor.analysis.noise import lower
from llmdoctor.analysis.queue_wait import split_by_queue
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.stats import Split
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, SERVER_METRICS, SWEEP

MIN_WARM = 4
#: The slow population costs this much more (ms) and this share of the fast median for a warning.
WARNING_EXTRA_MS = 50.0
WARNING_EXTRA_SHARE = 0.5
#: Headers whose values are per request or per response, never a backend's name.
_PER_REQUEST_HEADERS = frozenset({"date", "content-length", "x-request-id", "request-id", "x-amzn-requestid",
                                  "cf-ray", "etag", "last-modified", "expires", "age", "set-cookie"})


class SlowReplica(Check):
    """Slow replica: identical requests fall into two populations, one of them much slower.

    ## What it checks
    Looks at the warm "Say ok." requests (the baseline after the first; all
    alike) for two clusters: a gap between the fast and the slow ones far wider
    than each cluster's own spread, with at least two requests on each side.
    Then it looks for what tells the slow ones apart: the server address they
    came from, a response header naming a backend (any header whose value
    splits exactly along the clusters), and whether slow and fast alternate as
    round-robin over two replicas would. The sweep's requests are checked the
    same way around its fitted line.

    ## Why it adds latency
    Behind a load balancer, one replica that is slower (a worse GPU, another
    model build, a noisy neighbour, a degraded node) makes a share of all
    requests slow. Averaged together the samples look like a high floor or a
    queue, and the fix for those (more batching, more replicas) does not help.

    ## Example
    Round-robin over a fast and a slow replica: "2 of 5 requests are ~431 ms
    slower: one backend/replica is slower", slow and fast alternating.

    ## Fix
    Find the slow replica (send requests to each replica's address directly,
    compare their metrics and versions), fix or drain it; balance on load or
    latency (nginx ``least_conn``, haproxy ``balance leastconn``) and health-check
    replicas on latency, not only on liveness.

    ## Caveats
    Five samples show two populations only when both are seen twice; the
    confidence is high when an address or a header names the slow backend,
    medium when slow and fast alternate or the sweep agrees, low otherwise. A
    busy client host can split samples too: the evidence says what else was
    seen. Other checks draw no floor, fit or queueing conclusion from samples
    this check finds mixed. On one server with a queue, the requests that
    waited their turn form the slow population: when the backend's
    queue-time histogram gained at least half of the slow requests' extra
    time over the window (or, without such a histogram, its queue gauge
    showed requests waiting) and no address or header names a backend, the
    check is skipped with that reason and LD203 reports the queue (measured
    on vLLM 0.32 with ``--max-num-seqs 1`` under two background streams).
    """

    id = "LD211"
    name = "slow-replica"
    title = "One replica slower than the others"
    category = Category.SERVER
    requires = (BASELINE,)
    optional = (SWEEP, SERVER_METRICS)

    def run(self, ctx: Context) -> Iterator[Finding]:
        base = ctx.get(BASELINE)
        warm = base.warm
        if len(warm) < MIN_WARM:
            raise CheckSkipped(f"{len(warm)} warm requests: too few to tell two populations apart "
                               f"(at least {MIN_WARM}; raise --samples)")
        split = base.mixed()
        if split is None:
            return
        sweep = ctx.optional(SWEEP)
        sweep_split = sweep.mixed() if sweep is not None else None
        slow = [t for t in warm if split.is_slow(t.total_ms or 0.0)]
        fast = [t for t in warm if not split.is_slow(t.total_ms or 0.0)]
        named = _named_by(slow, fast)
        queued = None if named else split_by_queue(split, ctx.optional(SERVER_METRICS))
        if queued is not None:
            raise CheckSkipped(
                f"{len(slow)} of {len(warm)} warm requests are ~{split.slower_by:,.0f} ms slower, and the server's "
                f"own queue accounts for it: {queued.seen}. They waited their turn (LD203), which says nothing "
                "of a slower replica")
        alternating = base.alternating(split)
        evidence = [
            Evidence("fast requests", len(fast), "", "baseline"),
            Evidence("fast median", round(split.fast_median, 1), "ms", "baseline"),
            Evidence("slow requests", len(slow), "", "baseline"),
            Evidence("slow median", round(split.slow_median, 1), "ms", "baseline"),
            Evidence("order (f = fast, S = slow)", "".join("S" if split.is_slow(t.total_ms or 0.0) else "f"
                                                          for t in sorted(warm, key=lambda t: t.started_at)),
                     "", "baseline"),
        ]
        evidence += [Evidence(label, value, "", source) for label, value, source in named]
        if sweep_split is not None:
            counted = f"{len(sweep_split.slow)} of {len(sweep_split.fast) + len(sweep_split.slow)}"
            evidence.append(Evidence("sweep requests above the line",
                                     f"{counted}, ~{sweep_split.slower_by:,.0f} ms", "", "sweep"))
        if named:
            confidence = Confidence.HIGH
        elif alternating or sweep_split is not None:
            confidence = Confidence.MEDIUM
        else:
            confidence = Confidence.LOW
        if sweep is not None and sweep.mixed() is None and sweep.ok_points and not named:
            confidence = lower(confidence)  # the sweep, longer requests, saw one population
        extra = split.slower_by
        share = len(slow) / len(warm)
        severe = extra >= WARNING_EXTRA_MS and extra >= WARNING_EXTRA_SHARE * split.fast_median
        yield Finding(
            Severity.WARNING if severe else Severity.INFO,
            confidence,
            f"{len(slow)} of {len(warm)} requests are ~{extra:,.0f} ms slower: one backend/replica is slower",
            f"Identical warm requests fall into two populations: {len(fast)} take ~{split.fast_median:,.0f} ms, "
            f"{len(slow)} ~{split.slow_median:,.0f} ms. "
            + _why(named, alternating, sweep_split)
            + " No floor, fit or queueing conclusion is drawn from these mixed samples.",
            Fix("Find the slow replica, then fix or drain it; balance on load, not in turn.", (
                "Send a few requests to each replica's own address and compare; compare their metrics, GPUs, "
                "model build and flags.",
                "Balance by least connections or latency (nginx least_conn, haproxy balance leastconn); "
                "health-check replicas on latency, not only liveness.",
            )),
            impact_ms=round(share * extra, 1),
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"{share:.0%} of requests land on the slow population and pay ~{extra:,.0f} ms more "
                         "(averaged over all requests)",
            evidence=tuple(evidence),
            cause=Cause.REPLICA_IMBALANCE,
        )


def _named_by(slow: Sequence[RequestTiming], fast: Sequence[RequestTiming]) -> list[tuple[str, str, str]]:
    """What names the slow backend: a peer address or a response header whose values split along the clusters."""
    out = []
    slow_peers = {t.peer for t in slow if t.peer}
    fast_peers = {t.peer for t in fast if t.peer}
    if slow_peers and fast_peers and not slow_peers & fast_peers:
        out.append(("slow requests answered from", ", ".join(sorted(slow_peers)), "peer address"))
        out.append(("fast requests answered from", ", ".join(sorted(fast_peers)), "peer address"))
    every = [*slow, *fast]
    names = set.intersection(*(set(t.response_headers) for t in every)) - _PER_REQUEST_HEADERS if every else set()
    for name in sorted(names):
        slow_values = {t.response_headers[name] for t in slow}
        fast_values = {t.response_headers[name] for t in fast}
        distinct = slow_values | fast_values
        if not slow_values & fast_values and len(distinct) < len(every):
            out.append((f"response header {name} on the slow requests", ", ".join(sorted(slow_values)),
                        "response headers"))
            out.append((f"response header {name} on the fast requests", ", ".join(sorted(fast_values)),
                        "response headers"))
    return out


def _why(named: Sequence[tuple[str, str, str]], alternating: bool, sweep_split: Split | None) -> str:
    parts = []
    if named:
        parts.append("; ".join(f"{label}: {value}" for label, value, _ in named[:2]))
    if alternating:
        parts.append("slow and fast alternate, as round-robin over two replicas would")
    if sweep_split is not None:
        parts.append(f"the sweep shows it too ({len(sweep_split.slow)} requests ~{sweep_split.slower_by:,.0f} ms "
                     "above the line through the others)")
    return ("Evidence: " + "; ".join(parts) + ".") if parts else "Nothing seen tells which backend is slow."
