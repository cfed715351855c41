"""What else looks like queueing or a floor: the confounders the differential diagnosis weighs.

- **Replica imbalance**: two populations among identical warm requests (one backend slower
  behind a balancer). Then the median is of no one request, and the spread is no queue: the
  first-pass floor and variability rules stand down, and a concurrency step that sent its
  requests to different replicas says nothing about queueing.
- **Host pressure**: llmdoctor's own scheduling lag during the baseline (it woke late: the client
  host is busy) and this machine's CPU when the server runs on it.
- **KV-cache pressure**: the backend's KV usage and its preemptions during the run; requests
  waiting for KV blocks are then KV pressure showing, not a queue of their own.
- **Queueing** seen as two populations: on one server with a queue, the requests that waited
  their turn are the slow population. When the backend's own queue clock accounts for them
  (`llmdoctor.analysis.queue_wait.split_by_queue`) the split is no replica imbalance: it is set aside and
  the wait it shows is kept (`queue_wait_ms`), so a first request that waited as long is not read
  as a cold start either.
- **Noise**: how large a difference the run's own jitter and the client's lag can produce
  (`noise_ms`), which a follow-up's difference must clear several times to count.

Every rule reads recorded measurements only, so replay gives the same diagnosis.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.analysis.noise import LAG_FACTOR, NOISY_LAG_MS
from llmdoctor.analysis.queue_wait import split_by_queue
from llmdoctor.causes import Cause
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, WEAK
from llmdoctor.limits import HOST_PRESSURE_LIMITS, KV_CACHE_LIMITS
from llmdoctor.measurements.latency_samples import BaselineResult
from llmdoctor.measurements.server_metrics import ServerMetricsResult
from llmdoctor.measurements.stats import Split
from llmdoctor.probes.host import HostResult

__all__ = ["Confounders", "confounders_from", "first_pass_confounders", "noise_ms", "NOISE_MULTIPLE", "BUSY_CPU"]

#: Seen, as in `llmdoctor.diagnosis.evidence`: (hypothesis, likelihood ratio, what was seen).
Seen = tuple[Cause, float, str]
#: A follow-up's difference must be at least this many times the noise to count as decisive.
NOISE_MULTIPLE = 3.0
#: A host this busy (CPU %) is saturated (LD208 reads the same number).
BUSY_CPU = HOST_PRESSURE_LIMITS.busy_cpu_pct
CALM_CPU = HOST_PRESSURE_LIMITS.calm_cpu_pct


@dataclass(frozen=True)
class Confounders:
    """The first pass's confounders, from recorded measurements."""

    split: Split | None = None
    #: Slow and fast warm requests take turns (round-robin over two replicas).
    alternating: bool = False
    warm_requests: int = 0
    #: Median worst lag of llmdoctor during the warm baseline requests (ms).
    lag_ms: float | None = None
    #: Total p90 − p50 of the warm baseline (ms): how much identical requests vary.
    jitter_ms: float = 0.0
    host_cpu: float | None = None
    server_local: bool = False
    kv_usage: float | None = None
    preemptions: float | None = None
    #: What a queued request of ours waited, when the server's queue clock explains a split (ms).
    queue_wait_ms: float | None = None
    #: The server's evidence for that wait, in words.
    queue_seen: str = ""

    @property
    def noisy_client(self) -> bool:
        """llmdoctor itself lagged during the baseline: the client host is busy."""
        return self.lag_ms is not None and self.lag_ms >= NOISY_LAG_MS


def confounders_from(base: BaselineResult, host: HostResult | None,
                     metrics: ServerMetricsResult | None) -> Confounders:
    """The confounders of a run from its baseline, this machine's host reading and the backend metrics."""
    warm = base.warm
    lags = [t.client_lag_ms for t in warm if t.client_lag_ms is not None]
    p50, p90 = base.total_p50_ms, base.total_p90_ms
    delta = metrics.delta if metrics is not None else None
    split = base.mixed()
    queued = split_by_queue(split, metrics) if split is not None else None
    if queued is not None:
        split = None  # requests that waited their turn, not two replicas
    return Confounders(
        split=split,
        alternating=split is not None and base.alternating(split),
        warm_requests=len(warm),
        lag_ms=statistics.median(lags) if lags else None,
        jitter_ms=max(0.0, (p90 or 0.0) - (p50 or 0.0)),
        host_cpu=host.cpu_percent if host is not None else None,
        server_local=bool(host is not None and host.server_process is not None),
        kv_usage=metrics.worst("kv_cache_usage") if metrics is not None else None,
        preemptions=delta.preemptions if delta is not None and not delta.counter_reset else None,
        queue_wait_ms=queued.wait_ms if queued is not None else None,
        queue_seen=queued.seen if queued is not None else "",
    )


def noise_ms(c: Confounders, lags: Sequence[float | None] = (), spread_ms: float = 0.0) -> float:
    """The largest difference the run's noise explains: jitter, the spread of repeats, the client's lag.

    Doubled when the client lagged during the baseline (a busy host makes every side noisier).
    """
    lag = max((v for v in lags if v is not None), default=c.lag_ms or 0.0)
    base = max(c.jitter_ms, spread_ms, LAG_FACTOR * lag)
    return base * (2.0 if c.noisy_client else 1.0)


def first_pass_confounders(c: Confounders, waiting: float | None) -> tuple[list[Seen], dict[Cause, tuple[float, str]]]:
    """Evidence for and against replica imbalance, host pressure and KV pressure from the first pass."""
    out: list[Seen] = []
    impacts: dict[Cause, tuple[float, str]] = {}
    if c.split is not None:
        s = c.split
        n = len(s.fast) + len(s.slow)
        out.append((Cause.REPLICA_IMBALANCE, STRONG,
                    f"{len(s.slow)} of {n} identical warm requests are ~{s.slower_by:,.0f} ms slower than the "
                    f"others ({s.fast_median:,.0f} vs {s.slow_median:,.0f} ms): two populations"))
        impacts[Cause.REPLICA_IMBALANCE] = (len(s.slow) / n * s.slower_by,
                                            "share of requests on the slow population × how much slower")
        if c.alternating:
            out.append((Cause.REPLICA_IMBALANCE, WEAK, "slow and fast requests take turns, as round-robin over two "
                                                       "replicas would"))
    elif c.queue_wait_ms is not None:
        out.append((Cause.REPLICA_IMBALANCE, 1 / WEAK,
                    f"the slow warm requests waited ~{c.queue_wait_ms:,.0f} ms in the server's queue "
                    f"({c.queue_seen}): a queue, not two replicas"))
    elif c.warm_requests >= 4:
        out.append((Cause.REPLICA_IMBALANCE, 1 / WEAK, f"{c.warm_requests} warm requests form one population"))
    if c.noisy_client:
        out.append((Cause.HOST_PRESSURE, WEAK, f"llmdoctor itself woke {c.lag_ms:,.1f} ms late (median) during the "
                                               "baseline: the client host is busy"))
    if c.host_cpu is not None and c.server_local:
        if c.host_cpu >= BUSY_CPU:
            out.append((Cause.HOST_PRESSURE, STRONG, f"this machine, the server's host, was {c.host_cpu:.0f}% busy"))
        elif c.host_cpu <= CALM_CPU and not c.noisy_client:
            out.append((Cause.HOST_PRESSURE, 1 / STRONG,
                        f"this machine, the server's host, was {c.host_cpu:.0f}% busy"))
    elif c.host_cpu is not None and c.host_cpu <= CALM_CPU and not c.noisy_client:
        out.append((Cause.HOST_PRESSURE, 1 / WEAK, f"the client host was {c.host_cpu:.0f}% busy and llmdoctor on time"))
    if c.preemptions is not None and c.preemptions > 0:
        out.append((Cause.KV_CACHE_PRESSURE, DECISIVE,
                    f"{c.preemptions:.0f} preemptions during the run (the server's counter): the KV cache ran out"))
        if waiting is not None and waiting >= 1:
            out.append((Cause.KV_CACHE_PRESSURE, STRONG,
                        f"{waiting:.0f} requests waiting while requests were preempted"))
    elif c.kv_usage is not None:
        seen = f"KV cache {c.kv_usage:.0%} used at the scrapes"
        if c.kv_usage >= KV_CACHE_LIMITS.high_usage:
            out.append((Cause.KV_CACHE_PRESSURE, STRONG, seen))
        elif c.kv_usage <= KV_CACHE_LIMITS.roomy_usage and c.preemptions == 0:
            out.append((Cause.KV_CACHE_PRESSURE, 1 / STRONG, f"{seen}, no preemption"))
        elif c.kv_usage <= KV_CACHE_LIMITS.roomy_usage:
            out.append((Cause.KV_CACHE_PRESSURE, 1 / WEAK, seen))
    return out, impacts
