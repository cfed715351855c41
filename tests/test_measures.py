"""Measures defined once and used in several places: the cold-start penalty, percentiles."""

from __future__ import annotations

import math

from llmdoctor.analysis.costs import distribution
from llmdoctor.analysis.measures import cold_start_noise_ms, cold_start_penalty_ms
from llmdoctor.limits import COLD_START_LIMITS
from llmdoctor.measurements.stats import percentile


def test_cold_start_penalty_excludes_the_first_connection_set_up() -> None:
    # 1,560 ms to the first token of which 60 ms were TCP + TLS, warm median 360 ms: 1,140 ms of warming up.
    assert cold_start_penalty_ms(1560.0, 60.0, 360.0) == 1140.0
    assert cold_start_penalty_ms(350.0, 0.0, 360.0) == -10.0  # not slower: negative, callers decide


def test_cold_start_noise_is_the_floor_the_warm_median_or_three_spreads() -> None:
    """LD301 and LD302 count a penalty only beyond what the warm samples' noise explains."""
    # a fast, steady server: the floor
    assert cold_start_noise_ms(40.0, 45.0) == COLD_START_LIMITS.noise_floor_ms == 100.0
    assert cold_start_noise_ms(360.0, 380.0) == 360.0  # a slow one: its own median
    assert cold_start_noise_ms(100.0, 250.0) == 450.0  # a jittery one: three times its p90 - p50 spread


def test_percentile_has_one_scale_0_to_100_with_interpolation() -> None:
    values = [40.0, 10.0, 30.0, 20.0]
    assert percentile(values, 0) == 10.0 and percentile(values, 100) == 40.0
    assert percentile(values, 50) == 25.0
    assert math.isclose(percentile(values, 90) or 0.0, 37.0)
    assert percentile([], 50) is None and percentile([5.0], 90) == 5.0


def test_distribution_quotes_the_same_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    p50, p90 = percentile(values, 50), percentile(values, 90)
    assert distribution(values, "tokens") == f"p50 {p50:,.0f}, p90 {p90:,.0f}, max 100 tokens over 100 requests"
    assert distribution([7.0], "tokens") == "7 tokens"
