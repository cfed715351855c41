"""How much a busy client host can explain, and what that does to a conclusion's confidence.

Two readings of the client's own noise (`llmdoctor.probes.lag`): the run's verdict (the client
host was saturated: its cores busy, tasks waiting for a CPU, or llmdoctor itself waking late) and,
per request, the worst scheduling lag llmdoctor suffered while it ran. A timing-based conclusion
drawn on a saturated host, or on fewer samples than asked, is trusted one step less; a measured
difference that the lag itself could produce is no evidence at all (`explained_by_lag`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Protocol

from llmdoctor.findings import Confidence
from llmdoctor.probes.lag import ClientHostResult
from llmdoctor.probes.timing import RequestTiming

__all__ = ["LAG_FACTOR", "NOISY_LAG_MS", "Lagged", "explained_by_lag", "lag_noisy", "lower", "noisy",
           "timing_confidence"]

#: Requests whose median worst lag reached this (ms) were timed by a starved client.
NOISY_LAG_MS = 5.0
#: A difference up to this many times the worst lag of the requests compared is explained by the lag.
LAG_FACTOR = 2.0


class Lagged(Protocol):
    """Anything stamped with the client's worst scheduling lag while it ran (a request, a stream's shape)."""

    @property
    def client_lag_ms(self) -> float | None:
        """The worst lag (ms), None when it was not measured."""


_STEP_DOWN = {Confidence.HIGH: Confidence.MEDIUM, Confidence.MEDIUM: Confidence.LOW, Confidence.LOW: Confidence.LOW}


def lower(confidence: Confidence, steps: int = 1) -> Confidence:
    """`confidence` lowered by `steps` (never below low)."""
    for _ in range(steps):
        confidence = _STEP_DOWN[confidence]
    return confidence


def lag_noisy(timings: Iterable[Lagged]) -> bool:
    """Whether the client lagged while these requests ran (median of their worst lags ≥ `NOISY_LAG_MS`)."""
    lags = [t.client_lag_ms for t in timings if t.client_lag_ms is not None]
    return bool(lags) and statistics.median(lags) >= NOISY_LAG_MS


def noisy(host: ClientHostResult | None, timings: Iterable[Lagged] = ()) -> bool:
    """Whether the client host was saturated (the run's verdict), or lagged while `timings` ran."""
    return (host is not None and host.saturated) or lag_noisy(timings)


def timing_confidence(confidence: Confidence, *, host: ClientHostResult | None = None,
                      timings: Sequence[RequestTiming] = (), short: bool = False) -> Confidence:
    """A timing conclusion's confidence: one step lower on a noisy client, one more on short samples."""
    return lower(confidence, int(noisy(host, timings)) + int(short))


def explained_by_lag(difference_ms: float, lag_ms: float | None) -> bool:
    """Whether a measured difference is within what the client's own lag can produce."""
    return lag_ms is not None and lag_ms > 0 and abs(difference_ms) <= LAG_FACTOR * lag_ms
