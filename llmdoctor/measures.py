"""Measures used in several places, each defined once: the gate's metrics and the cold-start penalty.

The gate's metrics are read from the baseline and sweep measurements and shared by the SLO check
(LD710), the regression check (LD711) and the side-by-side comparison: one place says what
"ttft_p90" or "fixed cost" means. The cold-start penalty is shared by LD301, LD302 and the
differential diagnosis, and the noise it must beat to count by LD301 and LD302.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from llmdoctor.findings import Confidence
from llmdoctor.gate import sample_confidence
from llmdoctor.limits import COLD_START_LIMITS
from llmdoctor.probes.baseline import BaselineResult, SweepResult
from llmdoctor.regress import DEFAULT_RESAMPLES, Comparison, compare_estimates, compare_samples
from llmdoctor.stats import percentile, robust_fit

__all__ = ["Measured", "measure", "samples", "fit_replicates", "compare_runs", "cold_start_noise_ms",
           "cold_start_penalty_ms", "REGRESSION_METRICS"]

# Metrics compared between a baseline file and this run, with what they are.
REGRESSION_METRICS: dict[str, str] = {
    "ttft": "time to first token of the warm baseline",
    "total": "total latency of the warm baseline",
    "fixed_cost": "fixed cost per request (flat-latency fit)",
    "per_token": "cost per output token (flat-latency fit)",
}


def cold_start_noise_ms(warm_p50_ms: float, warm_p90_ms: float) -> float:
    """The largest first-request penalty the warm samples explain: the floor
    (`ColdStartLimits.noise_floor_ms`, 100 ms), the warm median, or 3 × (p90 - p50).

    A `cold_start_penalty_ms` below it is no evidence of a cold start (LD301 and LD302 both read it so).
    """
    return max(COLD_START_LIMITS.noise_floor_ms, warm_p50_ms, 3 * (warm_p90_ms - warm_p50_ms))


def cold_start_penalty_ms(first_ttft_ms: float, first_setup_ms: float, warm_ttft_ms: float) -> float:
    """The cold-start penalty: how much longer the first request waited for its first token than warm ones.

    The first request's time to first token, its connection set-up (DNS, TCP, TLS) excluded since that
    is not the server warming up, minus the warm median time to first token. Negative when the first
    request was not slower.
    """
    return (first_ttft_ms - first_setup_ms) - warm_ttft_ms


@dataclass(frozen=True)
class Measured:
    """A metric's value with the number of samples behind it and how far to trust it."""

    metric: str
    value_ms: float
    samples: int
    confidence: Confidence
    source: str


def samples(base: BaselineResult, kind: str) -> list[float]:
    """Per-request samples of ``ttft`` or ``total`` (ms) from the warm baseline."""
    attr = "ttft_ms" if kind == "ttft" else "total_ms"
    return [float(getattr(s, attr)) for s in base.ok_samples if getattr(s, attr) is not None]


def measure(metric: str, base: BaselineResult | None, sweep: SweepResult | None) -> Measured | None:
    """The value of an SLO metric (see `llmdoctor.gate.METRICS`), or None when not measured."""
    if metric in ("fixed_cost", "per_token"):
        fit = sweep.separable_fit if sweep is not None else None
        if fit is None:
            return None
        determined = fit.fixed_determined if metric == "fixed_cost" else fit.per_token_determined
        if not determined:
            return None  # not measured: the fit's interval is wider than its estimate (or it is not positive)
        value = fit.fixed_ms if metric == "fixed_cost" else fit.per_token_ms
        return Measured(metric, value, fit.points, fit.confidence(), "sweep")
    if base is None:
        return None
    kind, _, pct = metric.partition("_p")
    values = samples(base, kind)
    pct_value = percentile(values, float(pct))
    if pct_value is None:
        return None
    return Measured(metric, pct_value, len(values), sample_confidence(metric, len(values)), "baseline")


def fit_replicates(sweep: SweepResult, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> list[tuple[float, float]]:
    """Bootstrap replicates (fixed_ms, per_token_ms) of the sweep's (Theil–Sen) fit, resampling within each length."""
    groups: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in sweep.ok_points:
        groups[p.max_tokens].append((float(p.timing.output_tokens), float(p.timing.total_ms or 0.0)))
    rng = random.Random(seed)
    out: list[tuple[float, float]] = []
    for _ in range(resamples):
        xs: list[float] = []
        ys: list[float] = []
        for pts in groups.values():
            for _ in pts:
                x, y = pts[rng.randrange(len(pts))]
                xs.append(x)
                ys.append(y)
        fit = robust_fit(xs, ys)
        if fit is not None:
            out.append((fit.fixed_ms, fit.per_token_ms))
    return out


def compare_runs(
    before_base: BaselineResult | None,
    before_sweep: SweepResult | None,
    after_base: BaselineResult | None,
    after_sweep: SweepResult | None,
    *,
    min_rel: float = 0.10,
    min_abs_ms: float = 10.0,
) -> list[Comparison]:
    """Compare every regression metric measured on both sides (same order as `REGRESSION_METRICS`)."""
    out: list[Comparison] = []
    if before_base is not None and after_base is not None:
        for kind in ("ttft", "total"):
            b, a = samples(before_base, kind), samples(after_base, kind)
            if b and a:
                out.append(compare_samples(kind, b, a, min_rel=min_rel, min_abs_ms=min_abs_ms))
    fit_b = before_sweep.separable_fit if before_sweep is not None else None
    fit_a = after_sweep.separable_fit if after_sweep is not None else None
    if fit_b is not None and fit_a is not None:
        assert before_sweep is not None and after_sweep is not None
        rb, ra = fit_replicates(before_sweep), fit_replicates(after_sweep, seed=1)
        for i, metric in enumerate(("fixed_cost", "per_token")):
            point_b = fit_b.fixed_ms if i == 0 else fit_b.per_token_ms
            point_a = fit_a.fixed_ms if i == 0 else fit_a.per_token_ms
            # per-token costs are a few ms: the absolute floor scales down with them
            floor = min_abs_ms if i == 0 else min_abs_ms / 20.0
            out.append(compare_estimates(metric, [r[i] for r in rb], [r[i] for r in ra], point_b, point_a,
                                         min_rel=min_rel, min_abs_ms=floor,
                                         n_before=fit_b.points, n_after=fit_a.points))
    return out
