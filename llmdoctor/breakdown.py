"""The latency waterfall of a typical request, built from measurements already taken.

It never sends a request: it reads the results of the probes that ran
(`Context.results`), so a run restricted with ``--select`` shows no breakdown
rather than extra traffic.
"""

from __future__ import annotations

from llmdoctor.context import Results
from llmdoctor.probes.baseline import BaselineResult
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, SWEEP
from llmdoctor.probes.timing import RequestTiming
from llmdoctor.report import Breakdown, Phase
from llmdoctor.target import Options

__all__ = ["build_breakdown", "waterfall"]


def _gap(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return 0.0
    return max(0.0, b - a)


def waterfall(t: RequestTiming) -> list[Phase]:
    """Split one request into consecutive phases that add up to its total."""
    setup_end = t.setup_ms if not t.reused_connection else 0.0
    sent = t.sent_ms if t.sent_ms is not None else setup_end
    headers = t.ttfb_ms if t.ttfb_ms is not None else sent
    first = t.ttft_ms if t.ttft_ms is not None else headers
    last = t.token_times_ms[-1] if t.token_times_ms else first
    total = t.total_ms if t.total_ms is not None else last
    phases = [
        Phase("connection set-up", setup_end, "DNS + TCP + TLS" if setup_end else "connection reused"),
        Phase("send request", _gap(setup_end, sent)),
        Phase("wait for headers", _gap(sent, headers), "server accepts, routes, schedules"),
        Phase("wait for first token", _gap(headers, first), "queue + prefill + first decode step"),
        Phase("decode", _gap(first, last), f"{t.output_tokens} tokens"),
        Phase("end of stream", _gap(last, total), "final chunk, usage, [DONE]"),
    ]
    return phases


def _median_sample(base: BaselineResult) -> RequestTiming | None:
    ok = sorted((s for s in base.ok_samples if s.total_ms is not None), key=lambda s: s.total_ms or 0.0)
    return ok[(len(ok) - 1) // 2] if ok else None


def build_breakdown(results: Results, options: Options) -> Breakdown | None:
    """The breakdown of the median baseline request, or None without a baseline."""
    base = results.get(BASELINE)
    if base is None:
        return None
    typical = _median_sample(base)
    if typical is None or typical.total_ms is None:
        return None
    discovery = results.get(DISCOVERY)
    first: RequestTiming | None = discovery.models_timing if discovery is not None else None
    breakdown = Breakdown(
        label=f'median "Say ok." request ({base.samples_note()}, max_tokens {base.max_tokens})',
        total_ms=typical.total_ms,
        phases=waterfall(typical),
        new_connection_ms=first.setup_ms if first is not None and not first.reused_connection else None,
        ttft_p50_ms=base.ttft_p50_ms,
        ttft_p90_ms=base.ttft_p90_ms,
        total_p50_ms=base.total_p50_ms,
        total_p90_ms=base.total_p90_ms,
    )
    sweep = results.get(SWEEP)
    fit = sweep.separable_fit if sweep is not None else None
    if sweep is not None and fit is not None:
        # A coefficient the fit does not determine is left out, never shown negative (`fit_note` says why).
        breakdown.fixed_ms = fit.fixed_ms if fit.fixed_determined else None
        breakdown.per_token_ms = fit.per_token_ms if fit.per_token_determined else None
        breakdown.fixed_interval_ms = fit.fixed_interval
        breakdown.per_token_interval_ms = fit.per_token_interval
        breakdown.fit_note = fit.note()
        breakdown.typical_output_tokens = options.workload.typical_output_tokens
        breakdown.sweep_points = [(p.timing.output_tokens, p.timing.total_ms or 0.0) for p in sweep.ok_points]
    return breakdown

