"""LD203: requests queue at the server before they run."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from llmdoctor.analysis.clocks import judge
from llmdoctor.analysis.queue_wait import MIN_QUEUE_MS, waits_by_queue
from llmdoctor.analysis.send_stall import server_bound
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.limits import QUEUEING_LIMITS
from llmdoctor.measurements.latency_samples import BaselineResult
from llmdoctor.measurements.timing import ClockKind, RequestTiming
from llmdoctor.probes.backends import knob
from llmdoctor.probes.catalog import BASELINE, SERVER_METRICS


class QueueBuilding(Check):
    """Queue building: requests wait at the server before they are scheduled.

    ## What it checks
    Two kinds of evidence from the backend's metrics: a queue deeper than
    what runs (waiting > running: ``vllm:num_requests_waiting``,
    ``tgi_queue_size``, ``sglang:num_queue_reqs``,
    ``llamacpp:requests_deferred``), and the queue time of *our* requests,
    from the queue-time histogram's delta between the scrapes taken before
    and after the baseline (fires at 50 ms and 20% of TTFT or more).
    The share of TTFT is given only when that delta holds exactly the
    requests we sent: then queue and TTFT are means over the same requests.
    When it does not (other clients' traffic, or no delta at all) but the
    server timed each of our requests itself (a per-request queue clock
    such as TGI's ``x-queue-time``, judged as the waterfall judges it: a
    negative one or one longer than the request is set aside), the mean of
    those clocks is taken, and the evidence names the clock. Such
    per-request clocks (vLLM 0.32's ``metrics.queue_time_ms`` with
    ``--enable-per-request-metrics``) are taken before any histogram,
    even one that holds only our requests.

    ## Why it adds latency
    A queued request pays the whole wait before its prefill starts: it adds
    directly to TTFT, whatever the prompt or output length.

    ## Example
    `vllm:request_queue_time_seconds` grew by 4.2 s over 6 requests: 700 ms
    queued per request, 64% of their 1,090 ms TTFT.

    ## Fix
    Add capacity (replicas, GPUs), spread load, raise the backend's
    concurrency limit if the GPU has headroom (knob below), merge or delay
    non-urgent requests so interactive ones do not wait behind them.

    ## Caveats
    Gauges are instantaneous: a burst can look like a queue. Other clients'
    traffic during the run counts in the histogram delta: when the server
    finished more (or fewer) requests in the window than we sent, the mean
    is the server's, not ours; then no share of our TTFT is computed (vLLM
    observes TTFT at the first token and queue time at the finish, so the
    two histograms need not even cover the same requests: a "queue share"
    of 171% was seen that way), the cost is capped at our own time to first
    token (the queue is part of it: a mean, as the histogram's), and
    confidence is medium. Except when our own requests show what a queued
    request pays: some of them waited and some did not (measured on vLLM
    0.32 with ``--max-num-seqs 1`` under two background streams: 2 of 5
    waited 2.3-5.3 s, 3 took 63-75 ms). A request waited when its TTFT
    exceeds the fastest one's by 50 ms and by as much again as the fastest
    took; the cost is the mean excess of those, at most the waiting the
    server's histogram recorded in the window shared among them, and only
    when that histogram holds at least half of their excess
    (``llmdoctor.analysis.queue_wait``); the evidence names both clocks.
    Our requests whose time measures this client, not the server, are left
    out of those means and counts: on a starved client host a request's
    send can return seconds late and find its whole answer waiting (first
    token within 5 ms of a send that took 20 ms or more:
    ``llmdoctor.analysis.send_stall``; measured on vLLM 0.32, two of five
    requests at 7.1 and 6.8 s against a queue of 622 ms), unless all are
    such (then all are kept); the evidence says how many. TGI sends ``x-queue-time`` on non-streamed
    answers
    only and the baseline streams, so against TGI the histogram is what
    this check reads; the per-request clock serves servers that time
    streamed requests too.
    """

    id = "LD203"
    name = "queue-building"
    title = "Requests queue at the server"
    category = Category.SERVER
    requires = (SERVER_METRICS,)
    optional = (BASELINE,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        m = ctx.get(SERVER_METRICS)
        waiting, running = m.worst("requests_waiting"), m.worst("requests_running")
        d = m.delta
        queue_ms = d.queue_ms if d else None
        base = ctx.optional(BASELINE)
        # Our requests whose time is this client's own stall (the answer waited for us) measure no queue.
        timed, stalled = server_bound(base.ok_samples) if base is not None else ([], 0)
        our_ttft_ms = _mean_ttft(timed)
        seen = d.observed("queue_time") if d else None
        ours = queue_ms is not None and d is not None and d.our_requests > 0 and seen == d.our_requests
        # The server's own clock on each of our requests (vLLM's per-request metrics, TGI's x-queue-time)
        # wins over any histogram: it is ours alone, request by request.
        clocked = None if base is None else _clocked_queue(base)
        ours = ours and clocked is None
        if waiting is None and queue_ms is None and clocked is None:
            raise CheckSkipped(f"{m.backend} exports neither a queue gauge nor a queue-time histogram, and our "
                               "requests carry no queue clock of the server's")
        share: float | None = None  # shown: over our requests only
        ratio: float | None = None  # decides whether the queue matters
        ttfts = [t.ttft_ms or t.total_ms or 0.0 for t in timed]
        waits = waits_by_queue(ttfts, m) if not ours and clocked is None else None
        if clocked is not None:
            queue_ms = clocked.mean_ms
            share = ratio = clocked.mean_ms / clocked.ttft_ms if clocked.ttft_ms else None
        elif ours and d is not None and queue_ms is not None:
            # Server TTFT over the same requests when its histogram also holds just ours, else our own TTFT.
            ttft_ms = d.ttft_ms if d.ttft_ms and d.observed("ttft") == d.our_requests else our_ttft_ms
            share = ratio = queue_ms / ttft_ms if ttft_ms else None
        elif queue_ms is not None and our_ttft_ms:
            # a server-wide mean: at most all of our mean TTFT (a mean, as the histogram's is)
            ratio = min(queue_ms, our_ttft_ms) / our_ttft_ms
        deep = waiting is not None and waiting >= 1 and waiting > (running or 0)
        slow = queue_ms is not None and queue_ms >= MIN_QUEUE_MS and (
            ratio is None or ratio >= QUEUEING_LIMITS.finding_share)
        if not (deep or slow):
            return
        evidence = [Evidence("backend", m.backend, "", m.url)]
        if waiting is not None:
            evidence.append(Evidence("requests waiting (max of 2 scrapes)", waiting, "", m.url))
        if running is not None:
            evidence.append(Evidence("requests running (max of 2 scrapes)", running, "", m.url))
        if clocked is not None:
            evidence.append(Evidence(f"queue time per request (the server's {clocked.source} on each of ours)",
                                     round(clocked.mean_ms, 1), "ms", clocked.source))
            evidence.append(Evidence("requests of ours with that clock", f"{clocked.n} of {clocked.of}", "",
                                     "baseline"))
        elif queue_ms is not None and d is not None:
            label = "queue time per request" + ("" if ours else " (all requests the server finished)")
            evidence.append(Evidence(label, round(queue_ms, 1), "ms", m.url))
            if seen is not None:
                evidence.append(Evidence("requests seen / ours", f"{seen:.0f} / {d.our_requests}", "", m.url))
        if share is not None:
            evidence.append(Evidence("queue share of TTFT (our requests)", round(100 * share, 1), "%", m.url))
        if stalled and clocked is None:
            evidence.append(Evidence("requests of ours set aside (this client stalled sending; the answer waited)",
                                     f"{stalled} of {stalled + len(timed)}", "", "baseline"))
        impact: float | None
        if slow and clocked is not None:
            impact, conf = clocked.mean_ms, Confidence.HIGH
            basis = f"mean of the server's {clocked.source} over {clocked.n} of our requests"
            what = (f"Our requests waited {clocked.mean_ms:,.0f} ms each in the server's queue by its own "
                    f"{clocked.source}" + (f" ({share:.0%} of TTFT)." if share is not None else "."))
        elif slow and ours and queue_ms is not None:
            impact, basis, conf = queue_ms, "queue-time histogram delta over our requests", Confidence.HIGH
            what = f"Our requests waited {queue_ms:,.0f} ms each in the server's queue"
            what += f" ({share:.0%} of TTFT)." if share is not None else "."
        elif slow and queue_ms is not None and waits is not None:
            # Shared traffic, but our requests that waited show what a queued request pays: their extra
            # time, bounded by the waiting the server's own histogram recorded in the window.
            queued, n_waited = waits
            impact, basis, conf = queued.wait_ms, queued.basis, Confidence.MEDIUM
            evidence.append(Evidence("requests of ours that waited", f"{n_waited} of {len(ttfts)}", "", "baseline"))
            evidence.append(Evidence("wait per queued request (client clock, within the server's histogram)",
                                     round(queued.wait_ms, 1), "ms", f"baseline + {m.url}"))
            what = (f"{n_waited} of our {len(ttfts)} requests waited their turn: ~{queued.wait_ms:,.0f} ms more "
                    f"than the fastest; {queued.seen}.")
        elif slow and queue_ms is not None:
            impact = min(queue_ms, our_ttft_ms) if our_ttft_ms else queue_ms
            basis = ("server-wide queue-time mean (other requests in the window), at most our mean time to first "
                     "token" if our_ttft_ms else "server-wide queue-time mean (other requests in the window)")
            conf = Confidence.MEDIUM
            what = (f"Requests the server finished while we measured waited {queue_ms:,.0f} ms each in its queue "
                    f"({_count(seen)} requests, {d.our_requests if d else 0} of them ours).")
        else:
            e2e = m.latest.e2e.mean_ms if m.latest.e2e else None
            impact = waiting / max(running or 1, 1) * e2e if e2e and waiting else None
            basis = ("queue depth x mean request latency since start (estimate)" if impact
                     else "queue depth only; the backend exports no queue time")
            conf = Confidence.MEDIUM if impact else Confidence.LOW
            what = f"{waiting:.0f} requests were waiting while {running or 0:.0f} ran."
        yield Finding(
            Severity.WARNING,
            conf,
            f"Requests queue at the server ({m.backend})",
            what + " Queue time adds straight to time to first token.",
            Fix(
                "Add serving capacity or raise the concurrency the server admits.",
                (
                    "Add replicas/GPUs or route part of the traffic elsewhere.",
                    "Merge small requests or delay non-urgent ones so interactive requests do not queue.",
                    *knob(m.backend, "queue"),
                ),
            ),
            cause=Cause.QUEUEING,
            impact_ms=impact,
            frequency=Frequency.UNDER_LOAD,
            impact_basis=basis,
            evidence=tuple(evidence),
        )


@dataclass(frozen=True)
class _Clocked:
    """The queue time the server reported on each of our requests (its header or body), averaged."""

    mean_ms: float
    ttft_ms: float | None
    source: str
    n: int
    of: int


def _clocked_queue(base: BaselineResult) -> _Clocked | None:
    """Our requests' own queue clocks (TGI ``x-queue-time``, ...), judged as the waterfall judges them.

    A clock the client's time makes impossible (negative, longer than the request) is set aside
    (`llmdoctor.analysis.clocks.judge`); metrics means are not per-request clocks and are not taken here.
    """
    samples = base.ok_samples
    pairs = []
    for t in samples:
        clock = judge(t).own(ClockKind.QUEUE)
        if clock is not None:
            pairs.append((clock.ms, t.ttft_ms or t.total_ms, clock.source))
    if not pairs:
        return None
    ttfts = [ttft for _, ttft, _ in pairs if ttft is not None]
    return _Clocked(statistics.fmean(q for q, _, _ in pairs), statistics.fmean(ttfts) if ttfts else None,
                    pairs[0][2], len(pairs), len(samples))


def _mean_ttft(samples: Sequence[RequestTiming]) -> float | None:
    """Our requests' mean time to first token (None without one)."""
    values = [t.ttft_ms for t in samples if t.ttft_ms is not None]
    return statistics.fmean(values) if values else None


def _count(n: float | None) -> str:
    return "?" if n is None else f"{n:.0f}"
