"""The latency waterfall of a typical request, built from measurements already taken.

It never sends a request: it reads the results of the probes that ran
(`Context.results`), so a run restricted with ``--select`` shows no breakdown
rather than extra traffic. The waterfall is the client's, joined with the
server's own clocks where the run has them (`llmdoctor.analysis.waterfall`): the time
in front of the model server, the server's queue and prefill, a stream held on
the way, and a proxy from the environment where the transport probe measured its
cost. Each phase names its clock; the phases add up to the request's total.
"""

from __future__ import annotations

from llmdoctor.analysis.waterfall import client_waterfall, with_proxy_hop
from llmdoctor.context import Results
from llmdoctor.measurements.latency_samples import BaselineResult
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.options import Options
from llmdoctor.probes.attribution import AttributionResult, attribute
from llmdoctor.probes.catalog import ATTRIBUTION, BASELINE, DISCOVERY, NATIVE_TIMINGS, SERVER_METRICS, SWEEP, TRANSPORT
from llmdoctor.reporting.report import Breakdown, Phase

__all__ = ["build_breakdown", "waterfall"]


def waterfall(t: RequestTiming) -> list[Phase]:
    """Split one request into consecutive phases that add up to its total (the client's clock only)."""
    return client_waterfall(t)


def _attribution(results: Results, base: BaselineResult) -> AttributionResult:
    """The run's attribution, or the same join computed from what the run measured."""
    done = results.get(ATTRIBUTION)
    if done is not None:
        return done
    sweep = results.get(SWEEP)
    native = results.get(NATIVE_TIMINGS)
    fit = sweep.separable_fit if sweep is not None else None
    return attribute(None, base.samples, [p.timing for p in sweep.points] if sweep is not None else [],
                     results.get(SERVER_METRICS), native.request if native is not None else None,
                     fit.per_token_ms if fit is not None else None)


def build_breakdown(results: Results, options: Options) -> Breakdown | None:
    """The breakdown of the median baseline request, or None without a baseline."""
    base = results.get(BASELINE)
    if base is None or not any(s.ok and s.total_ms is not None for s in base.samples):
        return None
    attributed = _attribution(results, base)
    joined = attributed.typical
    phases = joined.phases
    transport = results.get(TRANSPORT)
    path = transport.proxy_path if transport is not None else None
    if path is not None and path.cost_ms:  # the proxy in the path, measured: a hop of its own
        phases = with_proxy_hop(phases, path.cost_ms, path.proxy, path.per)
    discovery = results.get(DISCOVERY)
    first: RequestTiming | None = discovery.models_timing if discovery is not None else None
    breakdown = Breakdown(
        label=f'median "Say ok." request ({base.samples_note()}, max_tokens {base.max_tokens})',
        total_ms=joined.total_ms,
        phases=phases,
        new_connection_ms=first.setup_ms if first is not None and not first.reused_connection else None,
        ttft_p50_ms=base.ttft_p50_ms,
        ttft_p90_ms=base.ttft_p90_ms,
        total_p50_ms=base.total_p50_ms,
        total_p90_ms=base.total_p90_ms,
        in_front_ms=joined.in_front_ms,
        server_ms=joined.server_ms,
        held_ms=joined.held_ms if joined.held_ms > 0 else (0.0 if joined.anchor else None),
        split_sources=joined.sources,
        split_notes=joined.notes,
        clock_hint=attributed.clock_hint,
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

