"""Whether the server's own queue clock accounts for slow requests: a wait, not a slow replica or a cold start.

Identical requests that fall into a fast and a slow population look like two replicas behind a
balancer (LD211), and a slow first request looks like a cold start. On one server with a queue
(vLLM ``--max-num-seqs 1`` under other clients' streams: measured on vLLM 0.32, fixture
``fixtures/LD211/skipped_queue_vllm_032.json``) the slow ones are the requests that waited their
turn. The server says so itself: its queue-time histogram gained, over the window that held our
requests, at least the slow requests' extra time, or its queue gauge showed requests waiting.

The histogram's mean over shared traffic is the server's, not ours; its *sum* is still a bound:
our slow requests cannot have waited longer in all than every request in the window did. So the
wait per queued request is the slow requests' extra time (client clock), at most the histogram's
sum shared among them (server clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.causes import EXPLAINS_SHARE
from llmdoctor.measurements.server_metrics import ServerMetrics, ServerMetricsResult
from llmdoctor.measurements.stats import Split

__all__ = ["QueueWait", "MIN_QUEUE_MS", "split_by_queue", "waits_by_queue", "queued_before", "answered_before"]

#: A mean queue time below this (ms) is no queue worth explaining anything with.
MIN_QUEUE_MS = 50.0


@dataclass(frozen=True)
class QueueWait:
    """What one queued request of ours waited, and the server's evidence for it, in words."""

    wait_ms: float
    #: How `wait_ms` was measured (the clocks it comes from).
    basis: str
    #: The server's evidence that requests queued, naming its clock.
    seen: str


def split_by_queue(split: Split, metrics: ServerMetricsResult | None) -> QueueWait | None:
    """The queue wait that accounts for `split`'s slow requests, when the server's queue clock shows it.

    By the queue-time histogram when the backend has one (its sum over the window holds at least
    `EXPLAINS_SHARE` of the slow requests' extra time, and its mean is a queue); by the queue gauge
    (requests waiting at a scrape) only when the backend exports no queue-time histogram. None when
    the server shows no such queue, or its counters were reset in the window.
    """
    return _explained(len(split.slow), split.slower_by, metrics)


def waits_by_queue(ttfts: Sequence[float], metrics: ServerMetricsResult | None) -> tuple[QueueWait, int] | None:
    """What our requests that waited paid, and how many waited, when the server's queue clock accounts for it.

    A request of ours waited when its time to first token exceeds the fastest one's by at least
    `MIN_QUEUE_MS` and by as much again as the fastest took; its wait is that excess. Unlike a split
    into two populations, the waits may differ (a request behind one stream or behind two). The server's
    histogram must hold at least `EXPLAINS_SHARE` of their total (`split_by_queue`), so a busy client's
    jitter on a server without a queue explains nothing.
    """
    if len(ttfts) < 2:
        return None
    fastest = min(ttfts)
    excess = [v - fastest for v in ttfts if v - fastest >= max(MIN_QUEUE_MS, fastest)]
    if not excess:
        return None
    found = _explained(len(excess), sum(excess) / len(excess), metrics)
    return (found, len(excess)) if found is not None else None


def _explained(n_slow: int, extra: float, metrics: ServerMetricsResult | None) -> QueueWait | None:
    """`n_slow` requests `extra` ms slower each: the wait that the server's queue clock accounts for, or None."""
    if metrics is None or n_slow == 0 or extra <= 0:
        return None
    d = metrics.delta
    has_histogram = metrics.before.queue_time is not None
    if d is not None and not d.counter_reset and d.queue_ms is not None:
        seen_n = d.observed("queue_time") or 0.0
        total_ms = d.queue_ms * seen_n
        if d.queue_ms < MIN_QUEUE_MS or total_ms < EXPLAINS_SHARE * n_slow * extra:
            return None
        return QueueWait(
            min(extra, total_ms / n_slow),
            f"the slow requests' extra time (client clock), within the server's queue-time histogram "
            f"({total_ms / 1000:,.1f} s of waiting over {seen_n:.0f} requests in the window)",
            f"the server's queue-time histogram recorded {total_ms / 1000:,.1f} s of waiting over {seen_n:.0f} "
            f"requests ({d.our_requests} ours) while we measured",
        )
    waiting = metrics.worst("requests_waiting")
    if not has_histogram and waiting is not None and waiting >= 1:
        return QueueWait(extra, "the slow requests' extra time (client clock); the server exports no queue time",
                         f"{waiting:.0f} requests were waiting in the server's queue at a scrape")
    return None


def answered_before(first: ServerMetrics, ours_before: int = 1) -> float:
    """How many requests of other clients the server had answered by the scrape `first` (0 when unknown).

    `ours_before` is how many of the requests it counts are ours (in a run's schedule: the first
    request). A server that had answered others had its model loaded before our first request.
    """
    done = first.e2e or first.ttft
    return max(0.0, done.count - ours_before) if done is not None else 0.0


def queued_before(first: ServerMetrics, excess_ms: float, ours_before: int = 1) -> str | None:
    """Why a request sent before `first` (a scrape) may have waited in a queue rather than met a cold start.

    The server's cumulative queue-time histogram at `first` holds at least `EXPLAINS_SHARE` of
    `excess_ms` and other clients' requests had been answered before (`answered_before`): the model
    was loaded, and requests were waiting for their turn. None when the scrape shows no such queue.
    """
    q = first.queue_time
    others = answered_before(first, ours_before)
    if q is None or q.count <= 0 or others < 1:
        return None
    mean_ms = 1000 * q.sum / q.count
    if mean_ms < MIN_QUEUE_MS or 1000 * q.sum < EXPLAINS_SHARE * excess_ms:
        return None
    text = (f"the server had answered {others:.0f} other requests before (it was loaded) and its queue-time "
            f"histogram holds {q.sum:,.1f} s of waiting over {q.count:.0f} requests (mean {mean_ms:,.0f} ms)")
    if first.requests_waiting is not None and first.requests_waiting >= 1:
        text += f"; {first.requests_waiting:.0f} requests were waiting at the scrape"
    return text
