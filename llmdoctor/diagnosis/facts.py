"""The first pass in numbers: what the differential diagnosis reads before it orders any test.

`facts_from` draws them from the cheap measurements every run has (the first request, the "Say ok."
baseline, GET /v1/models, a metrics scrape, and the output-length sweep when the checklist measures
it); `symptom` says them in one line. All come from recorded measurements, so replay gives the same.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmdoctor.analysis.measures import cold_start_penalty_ms
from llmdoctor.analysis.queue_wait import answered_before, queued_before
from llmdoctor.causes import EXPLAINS_SHARE, Cause
from llmdoctor.diagnosis.confounders import Confounders, confounders_from
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, FIRST_REQUEST, HOST, PROMPT_TOKENS, SERVER_METRICS, SWEEP

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.measurements.server_metrics import ServerMetricsResult
    from llmdoctor.measurements.timing import RequestTiming

__all__ = ["Facts", "Seen", "Impacts", "facts_from", "symptom"]

#: (hypothesis, likelihood ratio, what was seen)
Seen = tuple[Cause, float, str]
#: hypothesis -> (impact ms, basis)
Impacts = dict[Cause, tuple[float, str]]


@dataclass
class Facts:
    """The first pass in numbers (all from recorded measurements, so replay gives the same)."""

    warm_ttft_ms: float
    warm_total_ms: float
    ttft_p90_ms: float
    decode_ms: float | None
    first_ttft_ms: float | None
    first_setup_ms: float
    models_ms: float | None
    fresh: int
    reused: int
    setup_ms: list[float] = field(default_factory=list)
    waiting: float | None = None
    typical_output_tokens: int = 64
    #: What else could look like a queue or a floor (two populations, a busy host, KV pressure), and the noise.
    confounders: Confounders = field(default_factory=Confounders)
    #: The worst scheduling lag of llmdoctor during GET /v1/models (ms): what of its time the client explains.
    models_lag_ms: float | None = None
    #: The worst scheduling lag of llmdoctor during the first request (ms).
    first_lag_ms: float | None = None
    #: Why the first request may have waited in the server's queue (None: no queue evidence).
    first_queue: str | None = None
    #: The median prompt tokens of the application's own requests (``--request``; None: none given): a
    #: measured prefill rate is priced on the user's prompt, not on the probe's long one (issue 25).
    prompt_tokens: int | None = None
    #: Totals of every successful "Say ok." request of the baseline, warm-up included (ms): its fastest is the
    #: service without a wait (a cold or queued request is slower, never faster).
    floor_samples_ms: list[float] = field(default_factory=list)
    #: The fastest time to first token of those requests (ms): the fixed cost without a wait (None: none).
    first_token_floor_ms: float | None = None
    #: The output-length sweep's fixed part (LD702's fixed cost), when the checklist measured the sweep and the
    #: fit settles it (None otherwise): what every request of the sweep paid before its tokens, waits included.
    sweep_fixed_ms: float | None = None
    #: Requests the server had answered before the first scrape, by its metrics (None: no metrics): none means
    #: the first request was the server's first ever and met no queue behind other clients.
    others_before: float | None = None


def _decode_per_token(timings: list[RequestTiming]) -> float | None:
    rates = [(t.token_times_ms[-1] - t.token_times_ms[0]) / (len(t.token_times_ms) - 1)
             for t in timings if t.ok and len(t.token_times_ms) >= 2]
    return statistics.median(rates) if rates else None


def facts_from(ctx: Context) -> Facts:
    """Numbers of the first pass; ``ctx.get(BASELINE)`` must have succeeded."""
    base = ctx.get(BASELINE)
    first = ctx.optional(FIRST_REQUEST)
    info = ctx.optional(DISCOVERY)
    metrics = ctx.optional(SERVER_METRICS)
    host = ctx.optional(HOST)
    ok = base.ok_samples
    later = [t for t in base.warmup[1:] + base.samples if t.ok]
    models = info.models_timing if info is not None else None
    confounders = confounders_from(base, host, metrics)
    first_ttft = (first.ttft_ms or first.total_ms) if first is not None and first.ok else None
    warm = base.ttft_p50_ms or base.total_p50_ms or 0.0
    served = [t for t in (*base.warmup, *base.samples) if t.ok]
    # The sweep as the planner finds a follow-up already measured: scheduled by the checklist, read, not ordered.
    sweep = ctx.optional(SWEEP) if ctx.scheduled(SWEEP) else None
    fit = sweep.separable_fit if sweep is not None and sweep.mixed() is None else None
    return Facts(
        warm_ttft_ms=base.ttft_p50_ms or base.total_p50_ms or 0.0,
        warm_total_ms=base.total_p50_ms or 0.0,
        ttft_p90_ms=base.ttft_p90_ms or base.total_p90_ms or 0.0,
        decode_ms=_decode_per_token(ok),
        first_ttft_ms=first_ttft,
        first_setup_ms=first.setup_ms if first is not None else 0.0,
        models_ms=models.total_ms if models is not None and models.ok else None,
        models_lag_ms=models.client_lag_ms if models is not None and models.ok else None,
        fresh=sum(1 for t in later if not t.reused_connection),
        reused=sum(1 for t in later if t.reused_connection),
        setup_ms=[t.setup_ms for t in later if not t.reused_connection],
        waiting=metrics.worst("requests_waiting") if metrics is not None else None,
        typical_output_tokens=ctx.options.workload.typical_output_tokens,
        confounders=confounders,
        first_lag_ms=first.client_lag_ms if first is not None else None,
        first_queue=_first_queue(first_ttft, first.setup_ms if first is not None else 0.0, warm, confounders,
                                 metrics),
        prompt_tokens=_request_prompt_tokens(ctx),
        floor_samples_ms=[t.total_ms for t in served if t.total_ms is not None],
        first_token_floor_ms=min((t.ttft_ms for t in served if t.ttft_ms is not None), default=None),
        sweep_fixed_ms=fit.fixed_ms if fit is not None and fit.fixed_determined else None,
        others_before=answered_before(metrics.before) if metrics is not None else None,
    )


def _request_prompt_tokens(ctx: Context) -> int | None:
    """The median prompt tokens of the ``--request`` bodies (None without them)."""
    counted = ctx.optional(PROMPT_TOKENS)
    if counted is None or not counted.counts:
        return None
    return round(statistics.median(c.tokens for c in counted.counts))


def _first_queue(first_ttft: float | None, setup_ms: float, warm: float, c: Confounders,
                 metrics: ServerMetricsResult | None) -> str | None:
    """Why the first request's extra time may be a wait in the server's queue, or None.

    The first request runs before the first scrape: the scrape's cumulative queue-time histogram shows
    a queue on a server that had already answered other clients (`queued_before`); or our warm requests
    that waited their turn, by the server's queue clock, waited about as long (`Confounders.queue_wait_ms`).
    Either way, with no sign of a cold start on the server's side: a server that had answered others was
    loaded, whatever its log says of its start-up.
    """
    if first_ttft is None or metrics is None:
        return None
    penalty = cold_start_penalty_ms(first_ttft, setup_ms, warm)
    others = answered_before(metrics.before)
    if penalty <= 0 or others < 1:
        return None  # nothing to explain, or the server may have met its first request ever: a cold start stays
    if c.queue_wait_ms is not None and c.queue_wait_ms >= EXPLAINS_SHARE * penalty:
        return (f"the server had answered {others:.0f} other requests before (it was loaded), and our warm requests "
                f"that waited their turn took ~{c.queue_wait_ms:,.0f} ms more ({c.queue_seen}): a wait in the "
                "queue, not a cold start")
    before = queued_before(metrics.before, penalty)
    return f"{before}: a wait in the queue, not a cold start" if before else None


def symptom(f: Facts) -> str:
    """The first pass in one line: what the doctor is asked to explain."""
    share = f.warm_ttft_ms / f.warm_total_ms if f.warm_total_ms else 0.0
    text = (f'"Say ok." takes {f.warm_total_ms:,.0f} ms warm, {f.warm_ttft_ms:,.0f} ms ({share:.0%}) before '
            f"the first token (p90 {f.ttft_p90_ms:,.0f} ms)")
    if f.first_ttft_ms is not None:
        text += f"; the first request's first token took {f.first_ttft_ms:,.0f} ms"
    if f.decode_ms is not None:
        text += f"; {f.decode_ms:.1f} ms per output token"
    return text
