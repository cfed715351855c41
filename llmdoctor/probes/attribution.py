"""Probe ``attribution`` (derived): the baseline's requests joined with the server's own clocks.

Sends nothing. For every successful "Say ok." request of the baseline it takes the server's clocks
for that request — its own headers and body (`RequestTiming.server_clocks`), the means of the
backend's histograms over the baseline (``server_metrics``'s delta, valid for our requests only
when the server's request counter moved by exactly ours; more is "shared traffic", fewer is set
aside), Ollama's durations of a sibling native request (``native_timings``) — judges them against
the client's clock and joins them into one waterfall each (`llmdoctor.analysis.waterfall.join`). It also
measures the delivery shape of every streamed answer of the baseline and the sweep against the
server's token clock, or the sweep's decode rate (`llmdoctor.analysis.delivery`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.analysis.clocks import ClockSet, judge, metrics_clocks
from llmdoctor.analysis.delivery import StreamShape, TokenClock, proxy_headers, stream_shape
from llmdoctor.analysis.waterfall import Joined, join
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock
from llmdoctor.probes.catalog import BASELINE, NATIVE_TIMINGS, SERVER_METRICS, SWEEP

__all__ = ["AttributionResult", "RequestSplit", "attribute", "attribution"]


@dataclass
class RequestSplit:
    """The split of one baseline request."""

    started_at: float
    total_ms: float
    in_front_ms: float | None
    server_ms: float | None
    held_ms: float
    anchor: str
    queue_ms: float | None = None
    prefill_ms: float | None = None
    ttft_ms: float | None = None
    #: The client's worst scheduling lag while the request ran (ms; None: not measured).
    client_lag_ms: float | None = None


@dataclass
class AttributionResult:
    """The typical request's joined waterfall, every baseline request's split, every stream's shape."""

    label: str
    typical: Joined
    splits: list[RequestSplit] = field(default_factory=list)
    shapes: list[StreamShape] = field(default_factory=list)
    token_clock: TokenClock | None = None
    backend: str = "unknown"
    #: Headers of the typical answer that hint at a hop in between (supporting evidence only).
    proxy_headers: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: How to get the server's own per-request clocks when it could send them and did not (the flag).
    clock_hint: str = ""

    @property
    def in_front(self) -> list[float]:
        """Time in front of the model server of each request whose clocks anchor it."""
        return [s.in_front_ms for s in self.splits if s.in_front_ms is not None]

    @property
    def server(self) -> list[float]:
        """The server's own time on each request whose clocks give it."""
        return [s.server_ms for s in self.splits if s.server_ms is not None]

    @property
    def judged(self) -> list[StreamShape]:
        """Shapes compared with a token clock (the others say nothing about holding)."""
        return [s for s in self.shapes if s.expected_decode_ms is not None]

    @property
    def held(self) -> list[StreamShape]:
        """Streams held back on the way."""
        return [s for s in self.judged if s.held]


def _median_sample(samples: list[RequestTiming]) -> RequestTiming | None:
    ok = sorted((s for s in samples if s.ok and s.total_ms is not None), key=lambda s: s.total_ms or 0.0)
    return ok[(len(ok) - 1) // 2] if ok else None


def _metrics_extra(ctx_metrics: object | None, notes: list[str]) -> tuple[list[ServerClock], str]:
    """Mean clocks of our baseline requests from the metrics delta, when they are ours to take."""
    from llmdoctor.measurements.server_metrics import ServerMetricsResult
    from llmdoctor.probes.backends import BACKENDS

    if not isinstance(ctx_metrics, ServerMetricsResult) or ctx_metrics.delta is None:
        return [], getattr(ctx_metrics, "backend", "unknown")
    m, d = ctx_metrics, ctx_metrics.delta
    if d.counter_reset:
        notes.append(f"{m.backend} metrics: a counter reset between the scrapes; its clocks are set aside")
        return [], m.backend
    if d.requests is None or d.our_requests <= 0:
        return [], m.backend
    if d.requests < d.our_requests:
        notes.append(f"{m.backend} metrics saw {d.requests:.0f} requests, fewer than our {d.our_requests}: "
                     "they cover part of the traffic (another replica?); their clocks are set aside")
        return [], m.backend
    b = BACKENDS.get(m.backend)
    names = {"queue_ms": "queue_time", "prefill_ms": "prefill_time", "decode_ms": "decode_time",
             "inference_ms": "inference_time", "ttft_ms": "ttft", "e2e_ms": "e2e", "inter_token_ms": "inter_token"}
    sources = {attr: (getattr(b, hist)[0] if b is not None and getattr(b, hist) else attr)
               for attr, hist in names.items()}
    return metrics_clocks(d, sources, d.our_requests), m.backend


def _token_clock(extra: list[ServerClock], native: RequestTiming | None,
                 fit_per_token: float | None) -> TokenClock | None:
    """The server's time per output token, else the sweep's decode rate."""
    for clock in extra:
        if clock.kind == ClockKind.INTER_TOKEN and clock.ms > 0:
            shared = clock.requests > clock.ours
            return TokenClock(clock.ms, f"{clock.source} mean" + (" (shared traffic)" if shared else ""),
                              ClockOrigin.METRICS)
    if native is not None:
        decode = next((c for c in native.server_clocks if c.kind == ClockKind.DECODE), None)
        if decode is not None and decode.ms > 0 and native.output_tokens > 1:
            return TokenClock(decode.ms / native.output_tokens, decode.source, ClockOrigin.BODY)
    if fit_per_token is not None and fit_per_token > 0:
        return TokenClock(fit_per_token, "the output-length sweep's fit", "inferred")
    return None


def _own_decode(cs: ClockSet) -> tuple[float | None, str]:
    clock = cs.own(ClockKind.DECODE)
    if clock is None:
        return None, ""
    return clock.ms, clock.source


def _clock_hint(backend: str, samples: list[RequestTiming]) -> str:
    """The flag that makes the server time each request itself, when it could and did not (vLLM 0.32+)."""
    from llmdoctor.analysis.request_metrics import FIELDS, FLAG

    if backend != "vllm":
        return ""
    sources = {f"metrics.{key}" for key in FIELDS}
    if any(c.source in sources for t in samples if t.ok for c in t.server_clocks):
        return ""
    return (f"vLLM can time each request itself (its queue, prefill and decode, on every answer): start it with "
            f"{FLAG} (vLLM 0.32+); without it these phases are its histograms' means over the window, shared with "
            "any other traffic")


def attribute(baseline: RequestTiming | None, samples: list[RequestTiming], sweep: list[RequestTiming],
              metrics: object | None = None, native: RequestTiming | None = None,
              fit_per_token: float | None = None, label: str = "") -> AttributionResult:
    """Join the baseline's requests with the server's clocks (pure: the probe and the report both call it).

    `baseline` is the typical request (None: the median of `samples`).
    """
    notes: list[str] = []
    extra, backend = _metrics_extra(metrics, notes)
    sibling = list(native.server_clocks) if native is not None else []
    clock = _token_clock(extra, native, fit_per_token)

    def joined(t: RequestTiming, with_means: bool) -> tuple[Joined, StreamShape | None]:
        cs = judge(t, [*(extra if with_means else ()), *sibling])
        own, own_source = _own_decode(cs)
        shape = stream_shape(t, clock, own, own_source)
        return join(t, cs, shape), shape

    typical = baseline or _median_sample(samples)
    if typical is None:
        raise ProbeUnavailable("no successful baseline request to attribute")
    splits, shapes = [], []
    for t in samples:
        if not (t.ok and t.total_ms is not None):
            continue
        j, shape = joined(t, True)
        splits.append(RequestSplit(t.started_at, j.total_ms, j.in_front_ms, j.server_ms, j.held_ms, j.anchor,
                                   j.queue_ms, j.prefill_ms, t.ttft_ms, t.client_lag_ms))
        if shape is not None:
            shapes.append(shape)
    for t in sweep:
        if t.ok and (shape := joined(t, False)[1]) is not None:
            shapes.append(shape)
    result = AttributionResult(label=label, typical=joined(typical, True)[0], splits=splits, shapes=shapes,
                               token_clock=clock, backend=backend, proxy_headers=proxy_headers(typical), notes=notes,
                               clock_hint=_clock_hint(backend, samples))
    result.typical.notes = list(dict.fromkeys([*notes, *result.typical.notes]))
    return result


def attribution(ctx: Context) -> AttributionResult:
    """The derived probe: `attribute` over this run's baseline, metrics, native sibling and sweep."""
    base = ctx.get(BASELINE)
    sweep = ctx.optional(SWEEP)
    native = ctx.optional(NATIVE_TIMINGS)
    fit = sweep.separable_fit if sweep is not None else None
    return attribute(
        None, base.samples, [p.timing for p in sweep.points] if sweep is not None else [],
        ctx.optional(SERVER_METRICS), native.request if native is not None else None,
        fit.per_token_ms if fit is not None else None,
        label=f'median "Say ok." request ({len(base.ok_samples)} samples, max_tokens {base.max_tokens})',
    )
