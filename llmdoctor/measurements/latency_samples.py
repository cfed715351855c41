"""The latency samples of the baseline probes: the "Say ok." floor and the output-length sweep.

The data of the ``baseline`` and ``sweep`` probes (`llmdoctor.probes.baseline`), with the
statistics read from them (percentiles, two populations, the fit total = fixed + per_token x n).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.measurements.stats import LinearFit, Split, percentile, two_clusters
from llmdoctor.measurements.timing import ErrorKind, RequestTiming

__all__ = ["BaselineResult", "SweepPoint", "SweepResult", "describe_failure", "failures_line"]


def failures_line(timings: list[RequestTiming]) -> str:
    """What failed among `timings`, counted by outcome: ``"2 × HTTP 429, 1 × read timeout"`` ("" if none)."""
    counts: dict[str, int] = {}
    for t in timings:
        if not t.ok:
            label = f"HTTP {t.status}" if t.status is not None else (t.error or "error").replace("_", " ")
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def describe_failure(timing: RequestTiming) -> str:
    """One line saying how a request failed."""
    if timing.error == ErrorKind.HTTP_STATUS:
        head = f"HTTP {timing.status}"
        if timing.error_detail.startswith(head):
            return timing.error_detail  # the client already names the status ("HTTP 401: ...")
        detail = f": {timing.error_detail}" if timing.error_detail else ""
        return f"{head}{detail}"
    kind = (timing.error or "unknown error").replace("_", " ")
    detail = timing.error_detail
    if not detail or detail.lower().startswith(kind):
        return detail or kind
    return f"{kind}: {detail}"


@dataclass
class BaselineResult:
    """Warm-up and measured samples of the minimal "Say ok." request."""

    model: str
    max_tokens: int
    warmup: list[RequestTiming] = field(default_factory=list)
    samples: list[RequestTiming] = field(default_factory=list)
    #: Samples asked for (``--samples``); 0 in recordings made before it was kept.
    asked: int = 0

    @property
    def ok_samples(self) -> list[RequestTiming]:
        """Samples that completed successfully."""
        return [s for s in self.samples if s.ok]

    @property
    def samples_asked(self) -> int:
        """How many samples were asked for (the samples sent, for old recordings)."""
        return self.asked or len(self.samples)

    @property
    def short(self) -> bool:
        """Fewer successful samples than asked: statistics on them say so and are trusted less."""
        return len(self.ok_samples) < self.samples_asked

    @property
    def warm(self) -> list[RequestTiming]:
        """Every successful warm request (warm-up after the first, then the samples), in the order sent."""
        return [t for t in (*self.warmup[1:], *self.samples) if t.ok and t.total_ms is not None]

    def mixed(self) -> Split | None:
        """Two populations among the warm requests' totals (one slow replica), or None."""
        return two_clusters([t.total_ms or 0.0 for t in self.warm])

    def alternating(self, split: Split) -> bool:
        """Slow and fast warm requests take turns (round-robin over two replicas): never two of a kind in a row."""
        order = [split.is_slow(t.total_ms or 0.0) for t in sorted(self.warm, key=lambda t: t.started_at)]
        return len(order) >= 4 and all(a != b for a, b in zip(order, order[1:]))

    def samples_note(self) -> str:
        """``"5 samples"``, or ``"2 of 5 samples asked (3 × HTTP 429)"`` when some failed or were not sent."""
        got, asked = len(self.ok_samples), self.samples_asked
        if got >= asked:
            return f"{got} sample{'' if got == 1 else 's'}"
        failed = failures_line(self.samples)
        return f"{got} of {asked} samples asked" + (f" ({failed})" if failed else "")

    def _pct(self, attr: str, q: float) -> float | None:
        return percentile([getattr(s, attr) for s in self.ok_samples if getattr(s, attr) is not None], q)

    @property
    def ttft_p50_ms(self) -> float | None:
        """Median time to first token."""
        return self._pct("ttft_ms", 50)

    @property
    def ttft_p90_ms(self) -> float | None:
        """90th percentile time to first token."""
        return self._pct("ttft_ms", 90)

    @property
    def total_p50_ms(self) -> float | None:
        """Median total latency."""
        return self._pct("total_ms", 50)

    @property
    def total_p90_ms(self) -> float | None:
        """90th percentile total latency."""
        return self._pct("total_ms", 90)


@dataclass
class SweepPoint:
    """One request of the output-length sweep."""

    max_tokens: int
    timing: RequestTiming


@dataclass
class SweepResult:
    """The output-length sweep and its fit total ≈ fixed + per_token × n."""

    points: list[SweepPoint] = field(default_factory=list)
    ignore_eos: bool = True
    fit: LinearFit | None = None
    #: Requests asked for (repeats × lengths); 0 in recordings made before it was kept.
    asked: int = 0

    @property
    def ok_points(self) -> list[SweepPoint]:
        """Points whose request completed."""
        return [p for p in self.points if p.timing.ok and p.timing.total_ms is not None]

    @property
    def distinct_lengths(self) -> int:
        """How many different output lengths were actually generated."""
        return len({p.timing.output_tokens for p in self.ok_points})

    @property
    def separable_fit(self) -> LinearFit | None:
        """The fit, when at least two output lengths make fixed and per-token cost separable."""
        return self.fit if self.fit is not None and self.distinct_lengths >= 2 else None

    @property
    def short(self) -> bool:
        """Fewer successful requests than asked."""
        return len(self.ok_points) < (self.asked or len(self.points))

    def samples_note(self) -> str:
        """``"6 requests"``, or ``"3 of 6 requests asked (3 × HTTP 429)"``."""
        got, asked = len(self.ok_points), self.asked or len(self.points)
        if got >= asked:
            return f"{got} requests"
        failed = failures_line([p.timing for p in self.points])
        return f"{got} of {asked} requests asked" + (f" ({failed})" if failed else "")

    def residuals(self) -> list[float]:
        """Each successful request's total minus the fit's line (in the order sent); empty without a fit."""
        if self.fit is None:
            return []
        fit = self.fit
        return [(p.timing.total_ms or 0.0) - fit.predict(p.timing.output_tokens) for p in self.ok_points]

    def mixed(self) -> Split | None:
        """Two populations among the residuals of the fit (some requests far above the line), or None."""
        return two_clusters(self.residuals(), min_ratio=None)

    def not_separable_reason(self) -> str:
        """Why fixed and per-token cost cannot be told apart: the true reason, from what happened.

        Too few requests succeeded (failures, a budget or deadline cut the sweep short), or they did
        succeed at several lengths and the server still generated the same number of tokens.
        """
        ok = self.ok_points
        asked_lengths = {p.max_tokens for p in self.points}
        ok_lengths = {p.max_tokens for p in ok}
        if len(ok_lengths) < 2:
            failed = failures_line([p.timing for p in self.points])
            what = f"only {len(ok)} of {self.asked or len(self.points)} sweep requests succeeded"
            if failed:
                what += f" ({failed})"
            elif len(asked_lengths) < 2:
                what += " (the budget or deadline stopped the sweep)"
            return f"{what}: too few output lengths to separate fixed and per-token cost"
        tokens = sorted({p.timing.output_tokens for p in ok})
        return (f"every sweep request generated {tokens[0]} tokens whatever max_tokens asked (the server "
                "ignores ignore_eos and min_tokens and stops early): fixed and per-token cost cannot be separated")
