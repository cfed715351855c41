"""Noise-aware comparison of two sets of latency samples (pure Python, no scipy).

A gate that compares two medians flaps: two runs of the same endpoint differ by
a few percent every time. A difference is called a *regression* here only when
all three hold:

1. there are enough samples on both sides (`MIN_SAMPLES`);
2. a one-sided Mann-Whitney U rank test says "after" is stochastically larger
   than "before" (p < `alpha`; exact distribution for small samples without
   ties, normal approximation with tie and continuity correction otherwise);
3. the whole bootstrap confidence interval of the difference of medians lies
   above a minimum effect size: ``max(min_rel × median(before), min_abs_ms)``,
   so a tiny but "significant" change does not fail a gate.

An *improvement* is the mirror image. Everything else is ``no-change`` (or
``insufficient`` without enough samples). Bootstrap resampling uses a seeded
generator, so the same inputs always give the same verdict.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from llmdoctor.measurements.stats import median

__all__ = [
    "MIN_SAMPLES",
    "Comparison",
    "Verdict",
    "mann_whitney_u",
    "bootstrap_interval",
    "compare_samples",
    "compare_estimates",
    "Estimate",
]

MIN_SAMPLES = 5
DEFAULT_ALPHA = 0.01
DEFAULT_MIN_REL = 0.10
DEFAULT_MIN_ABS_MS = 10.0
DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95
_EXACT_LIMIT = 30  # exact U distribution when both samples are at most this large (and no ties)


class Verdict:
    """Outcome names of a comparison (strings, for JSON)."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no-change"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Comparison:
    """Before/after of one metric with the test's numbers and verdict."""

    metric: str
    verdict: str
    before_ms: float | None
    after_ms: float | None
    diff_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    p_value: float | None
    n_before: int
    n_after: int
    min_effect_ms: float
    level: float = DEFAULT_LEVEL
    test: str = "mann-whitney"

    @property
    def rel_change(self) -> float | None:
        """Relative change of the median (0.3 = 30% slower)."""
        if self.before_ms is None or self.after_ms is None or self.before_ms <= 0:
            return None
        return self.after_ms / self.before_ms - 1.0

    @property
    def significant(self) -> bool:
        """True for a regression or an improvement."""
        return self.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)


@lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Number of orderings of m + n distinct values giving each U (0..m*n)."""
    # counts[j][u] for the current i, built up row by row (i = 0..m).
    prev = [[1] + [0] * (m * n) for _ in range(n + 1)]  # i = 0: only U = 0
    for i in range(1, m + 1):
        cur = [[0] * (m * n + 1) for _ in range(n + 1)]
        cur[0][0] = 1
        for j in range(1, n + 1):
            a, b = prev[j], cur[j - 1]
            row = cur[j]
            for u in range(i * j + 1):
                row[u] = (a[u - j] if u >= j else 0) + b[u]
        prev = cur
    return tuple(prev[n])


def mann_whitney_u(before: Sequence[float], after: Sequence[float]) -> tuple[float, float, float]:
    """U statistic of `after` over `before` and one-sided p-values.

    Returns ``(u, p_greater, p_less)``: `p_greater` is the p-value of
    "after tends to be larger", `p_less` of "after tends to be smaller".
    """
    m, n = len(before), len(after)
    if m == 0 or n == 0:
        return 0.0, 1.0, 1.0
    u = 0.0
    for b in after:
        for a in before:
            u += 1.0 if b > a else 0.5 if b == a else 0.0
    pooled = sorted([*before, *after])
    ties = len(pooled) != len(set(pooled))
    if not ties and m <= _EXACT_LIMIT and n <= _EXACT_LIMIT:
        counts = _u_counts(n, m)  # U counts pairs where an `after` value beats a `before` one
        total = math.comb(m + n, m)
        k = int(round(u))
        p_greater = sum(counts[k:]) / total
        p_less = sum(counts[: k + 1]) / total
        return u, min(1.0, p_greater), min(1.0, p_less)
    mean = m * n / 2.0
    tie_term = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1] == pooled[i]:
            j += 1
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    big_n = m + n
    var = m * n / 12.0 * ((big_n + 1) - tie_term / (big_n * (big_n - 1)))
    if var <= 0:
        return u, 1.0, 1.0
    sd = math.sqrt(var)
    z_greater = (u - mean - 0.5) / sd
    z_less = (u - mean + 0.5) / sd
    return u, _norm_sf(z_greater), 1.0 - _norm_sf(z_less)


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def bootstrap_interval(
    before: Sequence[float],
    after: Sequence[float],
    statistic: Callable[[Sequence[float]], float | None] = median,
    *,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(after) - statistic(before)``."""
    rng = random.Random(seed)
    diffs: list[float] = []
    for _ in range(resamples):
        sb = statistic([before[rng.randrange(len(before))] for _ in before])
        sa = statistic([after[rng.randrange(len(after))] for _ in after])
        if sb is not None and sa is not None:
            diffs.append(sa - sb)
    diffs.sort()
    lo_q = (1.0 - level) / 2.0
    lo = diffs[int(math.floor(lo_q * (len(diffs) - 1)))]
    hi = diffs[int(math.ceil((1.0 - lo_q) * (len(diffs) - 1)))]
    return lo, hi


def _min_effect(before_ms: float, min_rel: float, min_abs_ms: float) -> float:
    return max(min_rel * abs(before_ms), min_abs_ms)


def compare_samples(
    metric: str,
    before: Sequence[float],
    after: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_rel: float = DEFAULT_MIN_REL,
    min_abs_ms: float = DEFAULT_MIN_ABS_MS,
    min_samples: int = MIN_SAMPLES,
    level: float = DEFAULT_LEVEL,
) -> Comparison:
    """Compare per-request samples of one metric (see the module docstring for the rule)."""
    b = [float(v) for v in before if v is not None]
    a = [float(v) for v in after if v is not None]
    mb, ma = median(b), median(a)
    effect = _min_effect(mb or 0.0, min_rel, min_abs_ms)
    if len(b) < min_samples or len(a) < min_samples or mb is None or ma is None:
        return Comparison(metric, Verdict.INSUFFICIENT, mb, ma, None if mb is None or ma is None else ma - mb,
                          None, None, None, len(b), len(a), effect, level)
    _, p_greater, p_less = mann_whitney_u(b, a)
    lo, hi = bootstrap_interval(b, a, level=level)
    verdict = Verdict.NO_CHANGE
    p = min(p_greater, p_less)
    if p_greater < alpha and lo > effect:
        verdict, p = Verdict.REGRESSION, p_greater
    elif p_less < alpha and hi < -effect:
        verdict, p = Verdict.IMPROVEMENT, p_less
    return Comparison(metric, verdict, mb, ma, ma - mb, lo, hi, p, len(b), len(a), effect, level)


@dataclass(frozen=True)
class Estimate:
    """A derived estimate on one side of a comparison (e.g. a fitted fixed cost): its value, its
    bootstrap replicates, and how many measurements it was fitted on."""

    point: float
    replicates: Sequence[float]
    n: int = 0


def compare_estimates(
    metric: str,
    before_estimate: Estimate,
    after_estimate: Estimate,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_rel: float = DEFAULT_MIN_REL,
    min_abs_ms: float = DEFAULT_MIN_ABS_MS,
    level: float = DEFAULT_LEVEL,
) -> Comparison:
    """Compare a derived estimate (e.g. a fitted fixed cost) from its bootstrap replicates.

    The interval is that of the two sides' paired replicate differences, and the p-value the
    bootstrap's one-sided tail (the share of differences on the other side of 0).
    """
    before, after = before_estimate.replicates, after_estimate.replicates
    point_before, point_after = before_estimate.point, after_estimate.point
    n_before, n_after = before_estimate.n, after_estimate.n
    effect = _min_effect(point_before, min_rel, min_abs_ms)
    k = min(len(before), len(after))
    if k < 100:
        return Comparison(metric, Verdict.INSUFFICIENT, point_before, point_after, point_after - point_before,
                          None, None, None, n_before, n_after, effect, level, test="bootstrap")
    diffs = sorted(after[i] - before[i] for i in range(k))
    lo_q = (1.0 - level) / 2.0
    lo = diffs[int(math.floor(lo_q * (k - 1)))]
    hi = diffs[int(math.ceil((1.0 - lo_q) * (k - 1)))]
    p_greater = (sum(1 for d in diffs if d <= 0) + 1) / (k + 1)
    p_less = (sum(1 for d in diffs if d >= 0) + 1) / (k + 1)
    verdict, p = Verdict.NO_CHANGE, min(p_greater, p_less)
    if p_greater < alpha and lo > effect:
        verdict, p = Verdict.REGRESSION, p_greater
    elif p_less < alpha and hi < -effect:
        verdict, p = Verdict.IMPROVEMENT, p_less
    return Comparison(metric, verdict, point_before, point_after, point_after - point_before, lo, hi, p,
                      n_before, n_after, effect, level, test="bootstrap")
