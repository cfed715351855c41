"""How much a busy client host can explain, and what that does to a conclusion's confidence.

Two readings of the client's own noise (`llmdoctor.measurements.client_host`): the run's verdict (the client
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
from llmdoctor.measurements.client_host import ClientHostResult
from llmdoctor.measurements.timing import RequestTiming

__all__ = ["LAG_FACTOR", "NOISE_SHARE", "NOISY_LAG_MS", "Lagged", "explained_by_lag", "lag_noisy", "lower",
           "measured_noise_ms", "noise_confidence", "noisy", "timing_confidence"]

#: Requests whose median worst lag reached this (ms) were timed by a starved client.
NOISY_LAG_MS = 5.0
#: A difference up to this many times the worst lag of the requests compared is explained by the lag.
LAG_FACTOR = 2.0
#: A conclusion is trusted one step less when the noise measured could move its effect by more than this share
#: (the tolerance within which a floor or a per-token cost is named).
NOISE_SHARE = 0.25


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


def measured_noise_ms(timings: Iterable[Lagged], host: ClientHostResult | None = None) -> float | None:
    """What the client's own lag can add to one of these requests: `LAG_FACTOR` × the median of their worst
    lags while they ran; without per-request lags, × the run's lag p99; None when no lag was measured."""
    lags = [t.client_lag_ms for t in timings if t.client_lag_ms is not None]
    if lags:
        return LAG_FACTOR * statistics.median(lags)
    if host is not None and host.lag_p99_ms is not None:
        return LAG_FACTOR * host.lag_p99_ms
    return None


def noise_confidence(confidence: Confidence, effect_ms: float, *, timings: Sequence[Lagged] = (),
                     host: ClientHostResult | None = None, spread_ms: float | None = None,
                     short: bool = False) -> Confidence:
    """A timing conclusion's confidence against the noise the run measured, not the host's verdict.

    One step lower when the noise measured (the client's lag, `measured_noise_ms`, or `spread_ms`, the
    spread of repeats) could move `effect_ms` by more than `NOISE_SHARE` of it: a 500 ms floor is as sure on
    a host whose lag is 15 ms as on a quiet one. Only when nothing was measured does the run's verdict (a
    saturated host) lower it. One more step on short samples.
    """
    noise = [n for n in (measured_noise_ms(timings, host), spread_ms) if n is not None]
    loud = max(noise) > NOISE_SHARE * abs(effect_ms) if noise else noisy(host, timings)
    return lower(confidence, int(loud) + int(short))
