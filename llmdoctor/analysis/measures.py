"""Measures used in several places, each defined once: the gate's metrics and the cold-start penalty.

The gate's metrics are a closed set (`METRICS`, one `Metric` each: id, what it is, the probe it is
read from, the symptom it shows, how it is measured), shared by the SLO parser (`llmdoctor.inputs.slo`), the
SLO check (LD710) and the regression check (LD711): one place says what "ttft_p90" or "fixed cost"
means, and an id not in the set is an error (`UnknownMetric`). The cold-start penalty is shared by LD301, LD302 and the
differential diagnosis, and the noise it must beat to count by LD301 and LD302.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmdoctor.analysis.regress import DEFAULT_RESAMPLES, Comparison, Estimate, compare_estimates, compare_samples
from llmdoctor.causes import Symptom
from llmdoctor.findings import Confidence
from llmdoctor.limits import COLD_START_LIMITS
from llmdoctor.measurements.latency_samples import BaselineResult, SweepResult
from llmdoctor.measurements.stats import percentile, robust_fit
from llmdoctor.probes.catalog import BASELINE, SWEEP
from llmdoctor.probes.contract import AnyProbe

if TYPE_CHECKING:
    from llmdoctor.measurements.stats import LinearFit
    from llmdoctor.measurements.timing import RequestTiming

__all__ = ["Measured", "Metric", "METRICS", "SLO_METRICS", "REGRESSION_METRICS", "Samples", "FitCoefficient",
           "UnknownMetric", "metric", "samples", "sample_confidence", "fit_replicates", "compare_runs",
           "cold_start_noise_ms", "cold_start_penalty_ms"]

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


def samples(base: BaselineResult, of: Metric) -> list[float]:
    """Per-request samples (ms) of a baseline metric (``ttft``, ``total_p90``, ...) from the warm baseline."""
    how = of.how
    if not isinstance(how, Samples):
        raise ValueError(f"metric {of.id!r} is not measured per request")
    values = (how.of(s) for s in base.ok_samples)
    return [float(v) for v in values if v is not None]


def sample_confidence(metric_id: str, samples: int) -> Confidence:
    """How far a percentile of `samples` requests can be trusted (p90 needs more than p50)."""
    high, medium = (20, 10) if metric_id.endswith("_p90") else (10, 5)
    if samples >= high:
        return Confidence.HIGH
    if samples >= medium:
        return Confidence.MEDIUM
    return Confidence.LOW


class UnknownMetric(KeyError):
    """A metric id that is not in the closed set (`METRICS`)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown metric"


@dataclass(frozen=True)
class Samples:
    """How a metric of the warm baseline is measured: one value per request, or their percentile."""

    #: Which value of each request (time to first token, total).
    of: Callable[[RequestTiming], float | None]
    #: The percentile the metric is (0 to 100); None: the per-request samples themselves (a regression).
    percentile: float | None = None


@dataclass(frozen=True)
class FitCoefficient:
    """How a metric of the flat-latency fit is measured: one coefficient, when the fit determines it."""

    value: Callable[[LinearFit], float]
    determined: Callable[[LinearFit], bool]


@dataclass(frozen=True)
class Metric:
    """One metric of the gate: its id (``--slo``, ``--compare``), what it is, the probe it is read from,
    the symptom a breach or a regression of it shows, and how it is measured."""

    id: str
    description: str
    source: AnyProbe
    symptom: Symptom
    how: Samples | FitCoefficient
    #: An objective may name it (``--slo ttft_p90=800ms``).
    slo: bool = False
    #: A saved baseline is compared with this run on it (LD711).
    regression: bool = False

    @property
    def unit(self) -> str:
        """``ms``, or ``ms/token`` for the cost per output token."""
        return "ms/token" if self.symptom is Symptom.SLOW_PER_TOKEN else "ms"

    @property
    def tail(self) -> bool:
        """A percentile above the median (``ttft_p90``): paid by the slowest requests."""
        return isinstance(self.how, Samples) and self.how.percentile is not None and self.how.percentile > 50

    def measure(self, base: BaselineResult | None, sweep: SweepResult | None) -> Measured | None:
        """Its value in this run, or None when it was not measured."""
        how = self.how
        if isinstance(how, FitCoefficient):
            fit = sweep.separable_fit if sweep is not None else None
            if fit is None or not how.determined(fit):
                return None  # not measured: the fit's interval is wider than its estimate (or it is not positive)
            return Measured(self.id, how.value(fit), fit.points, fit.confidence(), SWEEP.name)
        if base is None or how.percentile is None:
            return None
        values = samples(base, self)
        value = percentile(values, how.percentile)
        if value is None:
            return None
        return Measured(self.id, value, len(values), sample_confidence(self.id, len(values)), BASELINE.name)


def _ttft(t: RequestTiming) -> float | None:
    return t.ttft_ms


def _total(t: RequestTiming) -> float | None:
    return t.total_ms


def _fixed(fit: LinearFit) -> float:
    return fit.fixed_ms


def _fixed_determined(fit: LinearFit) -> bool:
    return fit.fixed_determined


def _per_token(fit: LinearFit) -> float:
    return fit.per_token_ms


def _per_token_determined(fit: LinearFit) -> bool:
    return fit.per_token_determined


_FIXED = FitCoefficient(_fixed, _fixed_determined)
_PER_TOKEN = FitCoefficient(_per_token, _per_token_determined)
_S = Symptom

#: The closed set of the gate's metrics. The baseline's latencies are those of the minimal "Say ok."
#: request: its total is the floor. Objectives are listed in this order (`SLO_METRICS`).
METRICS: tuple[Metric, ...] = (
    Metric("ttft", "time to first token of the warm baseline", BASELINE, _S.SLOW_FIRST_TOKEN, Samples(_ttft),
           regression=True),
    Metric("total", "total latency of the warm baseline", BASELINE, _S.HIGH_FLOOR, Samples(_total),
           regression=True),
    Metric("ttft_p50", "median time to first token of the warm baseline", BASELINE, _S.SLOW_FIRST_TOKEN,
           Samples(_ttft, 50), slo=True),
    Metric("ttft_p90", "90th percentile time to first token of the warm baseline", BASELINE, _S.SLOW_FIRST_TOKEN,
           Samples(_ttft, 90), slo=True),
    Metric("total_p50", "median total latency of the warm baseline", BASELINE, _S.HIGH_FLOOR,
           Samples(_total, 50), slo=True),
    Metric("total_p90", "90th percentile total latency of the warm baseline", BASELINE, _S.HIGH_FLOOR,
           Samples(_total, 90), slo=True),
    Metric("fixed_cost", "fixed cost per request from the flat-latency fit", SWEEP, _S.FIXED_COST, _FIXED,
           slo=True, regression=True),
    Metric("per_token", "cost per output token from the flat-latency fit", SWEEP, _S.SLOW_PER_TOKEN, _PER_TOKEN,
           slo=True, regression=True),
)
BY_ID: dict[str, Metric] = {m.id: m for m in METRICS}
#: What an objective may name, in the order objectives are listed.
SLO_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.slo)
#: What a saved baseline is compared on, in the order LD711 reports them.
REGRESSION_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.regression)


def metric(metric_id: str) -> Metric:
    """The metric with this id; `UnknownMetric` (a `KeyError`) for an id not in the closed set."""
    try:
        return BY_ID[metric_id]
    except KeyError:
        raise UnknownMetric(f"unknown metric {metric_id!r}; known: {', '.join(BY_ID)}") from None


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
        for m in REGRESSION_METRICS:
            if isinstance(m.how, Samples):
                b, a = samples(before_base, m), samples(after_base, m)
                if b and a:
                    out.append(compare_samples(m.id, b, a, min_rel=min_rel, min_abs_ms=min_abs_ms))
    fit_b = before_sweep.separable_fit if before_sweep is not None else None
    fit_a = after_sweep.separable_fit if after_sweep is not None else None
    if fit_b is not None and fit_a is not None:
        assert before_sweep is not None and after_sweep is not None
        rb, ra = fit_replicates(before_sweep), fit_replicates(after_sweep, seed=1)
        for m in REGRESSION_METRICS:
            how = m.how
            if not isinstance(how, FitCoefficient):
                continue
            i = 0 if how is _FIXED else 1  # the replicates are (fixed_ms, per_token_ms)
            # per-token costs are a few ms: the absolute floor scales down with them
            floor = min_abs_ms if m.unit == "ms" else min_abs_ms / 20.0
            out.append(compare_estimates(m.id, Estimate(how.value(fit_b), [r[i] for r in rb], fit_b.points),
                                         Estimate(how.value(fit_a), [r[i] for r in ra], fit_a.points),
                                         min_rel=min_rel, min_abs_ms=floor))
    return out
