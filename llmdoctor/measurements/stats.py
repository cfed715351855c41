"""Small, dependency-free statistics used by probes and checks.

- `percentile` / `median`;
- `fit_line`: least squares (kept for comparisons of old recordings and the bootstrap of regressions);
- `robust_fit`: the Theil–Sen line with an interval for both coefficients, the flat-latency fit: one
  request delayed by a busy host moves a median of pairwise slopes very little, where it drags a
  least-squares line anywhere (a fixed cost of −2,187 ms was seen on a real llama.cpp under load);
- `two_clusters`: whether a sample holds two populations (one slow replica behind a balancer), so
  that no floor or queueing conclusion is drawn from mixed samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.findings import Confidence

__all__ = ["median", "percentile", "LinearFit", "fit_line", "robust_fit", "Split", "two_clusters",
           "INTERVAL_Z"]

#: The normal quantile of the fit intervals (about 90% two-sided).
INTERVAL_Z = 1.645


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation; None for no values."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float | None:
    """The median; None for no values."""
    return percentile(values, 50)


@dataclass
class LinearFit:
    """``y ≈ fixed_ms + per_token_ms × x``, by least squares or by Theil–Sen with intervals.

    A Theil–Sen fit (`method` ``"theil-sen"``) carries an interval (about 90%) for each coefficient;
    a coefficient is *determined* only when it is positive and its interval is no wider than the
    estimate itself — otherwise the report says "not determined", never a negative fixed cost.
    """

    fixed_ms: float
    per_token_ms: float
    r2: float
    points: int
    method: str = "least squares"
    fixed_low_ms: float | None = None
    fixed_high_ms: float | None = None
    per_token_low_ms: float | None = None
    per_token_high_ms: float | None = None

    def predict(self, tokens: float) -> float:
        """Predicted latency for `tokens` output tokens."""
        return self.fixed_ms + self.per_token_ms * tokens

    @property
    def robust(self) -> bool:
        """Whether this is a Theil–Sen fit (with intervals)."""
        return self.method == "theil-sen"

    @property
    def fixed_determined(self) -> bool:
        """The fit determines a fixed cost: positive, and (robust fit) an interval no wider than it."""
        return _determined(self.fixed_ms, self.fixed_low_ms, self.fixed_high_ms, self.robust)

    @property
    def per_token_determined(self) -> bool:
        """The fit determines a cost per token: positive, and (robust fit) an interval no wider than it."""
        return _determined(self.per_token_ms, self.per_token_low_ms, self.per_token_high_ms, self.robust)

    @property
    def fixed_interval(self) -> tuple[float, float] | None:
        """(low, high) of the fixed cost, when the fit has an interval."""
        if self.fixed_low_ms is None or self.fixed_high_ms is None:
            return None
        return self.fixed_low_ms, self.fixed_high_ms

    @property
    def per_token_interval(self) -> tuple[float, float] | None:
        """(low, high) of the cost per token, when the fit has an interval."""
        if self.per_token_low_ms is None or self.per_token_high_ms is None:
            return None
        return self.per_token_low_ms, self.per_token_high_ms

    def confidence(self) -> Confidence:
        """How far to trust the line: by goodness of fit and number of points (low when not determined)."""
        if self.robust and not (self.fixed_determined or self.per_token_determined):
            return Confidence.LOW
        if self.r2 >= 0.9 and self.points >= 6:
            return Confidence.HIGH
        if self.r2 >= 0.6 and self.points >= 3:
            return Confidence.MEDIUM
        return Confidence.LOW

    def fixed_share(self, tokens: float) -> float:
        """Share (0-1) of a request of `tokens` output tokens that is fixed cost."""
        total = self.predict(tokens)
        return max(0.0, min(1.0, self.fixed_ms / total)) if total > 0 else 0.0

    def note(self) -> str:
        """Why a coefficient is not given ("" when both are determined)."""
        notes = []
        for name, value, interval, determined in (
                ("fixed cost", self.fixed_ms, self.fixed_interval, self.fixed_determined),
                ("cost per token", self.per_token_ms, self.per_token_interval, self.per_token_determined)):
            if determined:
                continue
            if interval is None and self.robust:
                notes.append(f"{name} not determined: too few points ({self.points}) for an interval")
            elif value <= 0:
                shown = f" (interval {interval[0]:,.1f} to {interval[1]:,.1f})" if interval else ""
                notes.append(f"{name} not determined: the line's estimate is {value:,.1f}{shown}, not a cost")
            elif interval is not None:
                notes.append(f"{name} not determined: {value:,.1f} with an interval of {interval[0]:,.1f} to "
                             f"{interval[1]:,.1f}, wider than the estimate")
        return "; ".join(notes)


def _determined(estimate: float, low: float | None, high: float | None, robust: bool) -> bool:
    if not estimate > 0:
        return False
    if low is None or high is None:
        return not robust  # a least-squares fit has no interval: positivity is all it can show
    return high - low <= estimate


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
    """Ordinary least squares; None when the x values do not vary."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return LinearFit(fixed_ms=intercept, per_token_ms=slope, r2=r2, points=n)


def _r2(xs: Sequence[float], ys: Sequence[float], intercept: float, slope: float) -> float:
    my = sum(ys) / len(ys)
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0


def _rank_bounds(n_pairs: int, xs: Sequence[float], ys: Sequence[float]) -> tuple[int, int] | None:
    """0-based ranks of the interval's ends among `n_pairs` sorted pairwise values (Sen 1968).

    The variance of Kendall's S with the correction for tied x (repeats at one length) and tied y;
    None when the points are too few for the interval to exclude anything (it would be every value).
    """
    n = len(xs)

    def ties(values: Sequence[float]) -> float:
        counts: dict[float, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        return sum(t * (t - 1) * (2 * t + 5) for t in counts.values())

    var_s = (n * (n - 1) * (2 * n + 5) - ties(xs) - ties(ys)) / 18.0
    if var_s <= 0:
        return None
    c = INTERVAL_Z * math.sqrt(var_s)
    low = math.floor((n_pairs - c) / 2)  # the low-th value (1-based)
    high = math.ceil((n_pairs + c) / 2) + 1  # the high-th value (1-based)
    if low < 1 or high > n_pairs:
        return None
    return low - 1, high - 1


def robust_fit(xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
    """The Theil–Sen line through the points, with an interval (about 90%) for each coefficient.

    Slope: the median of the slopes of every pair of points with different x; fixed part: the median
    of ``y - slope × x``. Intervals: the order statistics of the pairwise slopes at Sen's ranks, and
    of the pairwise lines' intercepts at the same ranks. With too few points for an interval (fewer
    than about six), the interval is left out and the coefficients count as not determined.
    None when x does not vary.
    """
    n = len(xs)
    if n < 2 or n != len(ys):
        return None
    slopes: list[float] = []
    intercepts: list[float] = []
    for i in range(n):
        for j in range(i + 1, n):
            if xs[j] == xs[i]:
                continue
            pair_slope = (ys[j] - ys[i]) / (xs[j] - xs[i])
            slopes.append(pair_slope)
            intercepts.append(ys[i] - pair_slope * xs[i])
    if not slopes:
        return None
    slope = float(median(slopes) or 0.0)
    intercept = float(median([y - slope * x for x, y in zip(xs, ys)]) or 0.0)
    fit = LinearFit(fixed_ms=intercept, per_token_ms=slope, r2=_r2(xs, ys, intercept, slope), points=n,
                    method="theil-sen")
    bounds = _rank_bounds(len(slopes), xs, ys)
    if bounds is not None:
        lo, hi = bounds
        slopes.sort()
        intercepts.sort()
        fit.per_token_low_ms = min(slopes[lo], slope)
        fit.per_token_high_ms = max(slopes[hi], slope)
        fit.fixed_low_ms = min(intercepts[lo], intercept)
        fit.fixed_high_ms = max(intercepts[hi], intercept)
    return fit


@dataclass(frozen=True)
class Split:
    """A sample that holds two populations: the fast values and the slow ones."""

    fast: tuple[float, ...]
    slow: tuple[float, ...]

    @property
    def fast_median(self) -> float:
        """Median of the fast population."""
        return float(median(self.fast) or 0.0)

    @property
    def slow_median(self) -> float:
        """Median of the slow population."""
        return float(median(self.slow) or 0.0)

    @property
    def slower_by(self) -> float:
        """How much slower the slow population is (difference of the medians)."""
        return self.slow_median - self.fast_median

    def is_slow(self, value: float) -> bool:
        """Whether `value` belongs to the slow population."""
        return value >= min(self.slow)


#: Two populations must be at least this far apart (ms), and this many times their own spread.
CLUSTER_MIN_GAP = 30.0
CLUSTER_GAP_RATIO = 3.0
#: ... and the slow median at least this many times the fast one.
CLUSTER_MIN_RATIO = 1.3


def two_clusters(values: Sequence[float], *, min_size: int = 2, min_gap: float = CLUSTER_MIN_GAP,
                 min_ratio: float | None = CLUSTER_MIN_RATIO) -> Split | None:
    """The split of `values` into a fast and a slow population, or None when it is one population.

    The widest gap between consecutive sorted values that leaves at least `min_size` values on each
    side counts when it is at least `min_gap`, at least `CLUSTER_GAP_RATIO` times the wider range of
    the two sides, and the slow side's median at least `min_ratio` times the fast side's (None: no
    ratio, for residuals around zero). A jittery single population (gaps like its spread) and one
    outlier (a side of one) are no split.
    """
    data = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if len(data) < 2 * min_size:
        return None
    cut = max(range(min_size, len(data) - min_size + 1), key=lambda i: (data[i] - data[i - 1], -i))
    fast, slow = data[:cut], data[cut:]
    gap = slow[0] - fast[-1]
    spread = max(fast[-1] - fast[0], slow[-1] - slow[0])
    split = Split(tuple(fast), tuple(slow))
    if gap < min_gap or gap < CLUSTER_GAP_RATIO * spread:
        return None
    if min_ratio is not None and split.slow_median < min_ratio * split.fast_median:
        return None
    return split
