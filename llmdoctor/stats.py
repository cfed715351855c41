"""Small, dependency-free statistics used by probes and checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.findings import Confidence

__all__ = ["median", "percentile", "LinearFit", "fit_line"]


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
    """``y ≈ fixed_ms + per_token_ms × x`` fitted by least squares."""

    fixed_ms: float
    per_token_ms: float
    r2: float
    points: int

    def predict(self, tokens: float) -> float:
        """Predicted latency for `tokens` output tokens."""
        return self.fixed_ms + self.per_token_ms * tokens

    def confidence(self) -> Confidence:
        """How far to trust the line: by goodness of fit and number of points."""
        if self.r2 >= 0.9 and self.points >= 6:
            return Confidence.HIGH
        if self.r2 >= 0.6 and self.points >= 3:
            return Confidence.MEDIUM
        return Confidence.LOW

    def fixed_share(self, tokens: float) -> float:
        """Share (0-1) of a request of `tokens` output tokens that is fixed cost."""
        total = self.predict(tokens)
        return max(0.0, min(1.0, self.fixed_ms / total)) if total > 0 else 0.0


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
