"""A timing conclusion's confidence against the noise the run measured (issue 27 item 1), not the host's verdict."""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.analysis.noise import measured_noise_ms, noise_confidence
from llmdoctor.findings import Confidence
from llmdoctor.measurements.client_host import ClientHostResult


@dataclass
class _Lagged:
    client_lag_ms: float | None


SATURATED = ClientHostResult(cpu_count=2, seconds=3.0, lag_samples=300, lag_p99_ms=40.0, cpu_busy=1.0,
                             late_share=0.3)


def test_a_floor_far_above_the_lag_keeps_its_confidence_on_a_saturated_host() -> None:
    assert SATURATED.saturated
    lags = [_Lagged(15.0)] * 5
    assert noise_confidence(Confidence.HIGH, 500.0, timings=lags, host=SATURATED) is Confidence.HIGH


def test_an_effect_the_lag_could_move_by_more_than_a_quarter_is_trusted_one_step_less() -> None:
    lags = [_Lagged(15.0)] * 5
    assert noise_confidence(Confidence.HIGH, 100.0, timings=lags) is Confidence.MEDIUM


def test_the_repeat_spread_counts_as_noise_too() -> None:
    lags = [_Lagged(1.0)] * 5
    assert noise_confidence(Confidence.HIGH, 500.0, timings=lags, spread_ms=200.0) is Confidence.MEDIUM
    assert noise_confidence(Confidence.HIGH, 500.0, timings=lags, spread_ms=50.0) is Confidence.HIGH


def test_without_per_request_lags_the_runs_lag_p99_is_the_noise() -> None:
    assert measured_noise_ms([_Lagged(None)], SATURATED) == 80.0
    assert noise_confidence(Confidence.HIGH, 500.0, host=SATURATED) is Confidence.HIGH
    assert noise_confidence(Confidence.HIGH, 200.0, host=SATURATED) is Confidence.MEDIUM


def test_with_nothing_measured_only_the_hosts_verdict_lowers_it_and_short_samples_one_more() -> None:
    bare = ClientHostResult(cpu_count=2, seconds=3.0, lag_samples=0, cpu_busy=1.0)
    assert noise_confidence(Confidence.HIGH, 500.0, host=bare) is (
        Confidence.MEDIUM if bare.saturated else Confidence.HIGH)
    assert noise_confidence(Confidence.HIGH, 500.0, short=True) is Confidence.MEDIUM
