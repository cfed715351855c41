"""The noise-aware comparison: exact rank-test p-values, bootstrap intervals, verdicts."""

from __future__ import annotations

import math
import random

import pytest

from llmdoctor.analysis.regress import Verdict, bootstrap_interval, compare_samples, mann_whitney_u


def test_exact_p_value_of_complete_separation() -> None:
    # 5 vs 5, every "after" larger: only 1 of C(10, 5) = 252 orderings is as extreme.
    u, p_greater, p_less = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert u == 25
    assert p_greater == pytest.approx(1 / 252)
    assert p_less == 1.0


def test_exact_distribution_sums_to_one_and_is_symmetric() -> None:
    a, b = [1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0]
    _, pg, pl = mann_whitney_u(a, b)
    # U = 6 = m*n/2: the middle of a symmetric distribution
    assert pg == pytest.approx(pl)
    assert pg + pl - 1.0 == pytest.approx(_point_mass(a, b))


def _point_mass(a: list[float], b: list[float]) -> float:
    """P(U == u) by brute force over all orderings."""
    from itertools import combinations

    pooled = sorted(a + b)
    u_obs = sum(1 for x in b for y in a if x > y)
    hits = total = 0
    for idx in combinations(range(len(pooled)), len(b)):
        after = [pooled[i] for i in idx]
        before = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += sum(1 for x in after for y in before if x > y) == u_obs
    return hits / total


def test_ties_use_the_normal_approximation() -> None:
    _, pg, pl = mann_whitney_u([1, 2, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 7, 8, 9])
    assert 0.0 < pg < 0.1 < pl < 1.0 and not math.isnan(pg)


def test_bootstrap_interval_is_deterministic_and_covers_the_shift() -> None:
    rng = random.Random(3)
    before = [100 + rng.gauss(0, 5) for _ in range(10)]
    after = [x + 50 for x in before]
    lo, hi = bootstrap_interval(before, after)
    assert (lo, hi) == bootstrap_interval(before, after)
    assert lo < 50 < hi + 10 and lo > 30


def test_noise_does_not_flag_many_times_over() -> None:
    """The gate must not flap: 100 pairs of runs from one distribution, no regression."""
    rng = random.Random(7)
    flagged = 0
    for _ in range(100):
        before = [300 + rng.uniform(-10, 10) for _ in range(8)]
        after = [300 + rng.uniform(-10, 10) for _ in range(8)]
        flagged += compare_samples("ttft", before, after).verdict != Verdict.NO_CHANGE
    assert flagged == 0


def test_thirty_percent_slower_is_a_regression() -> None:
    rng = random.Random(8)
    before = [300 + rng.uniform(-10, 10) for _ in range(8)]
    after = [390 + rng.uniform(-10, 10) for _ in range(8)]
    c = compare_samples("ttft", before, after)
    assert c.verdict == Verdict.REGRESSION
    assert c.rel_change == pytest.approx(0.3, abs=0.05)
    assert c.ci_low_ms is not None and c.ci_low_ms > c.min_effect_ms == pytest.approx(30, abs=2)
    assert compare_samples("ttft", after, before).verdict == Verdict.IMPROVEMENT


def test_significant_but_tiny_change_is_not_a_regression() -> None:
    before = [300.0 + i * 0.01 for i in range(10)]
    after = [x + 3.0 for x in before]  # always larger (p tiny) but 1%: under the minimum effect
    c = compare_samples("ttft", before, after)
    assert c.p_value is not None and c.p_value < 0.01
    assert c.verdict == Verdict.NO_CHANGE


def test_too_few_samples_is_insufficient() -> None:
    assert compare_samples("ttft", [1, 2, 3], [10, 20, 30]).verdict == Verdict.INSUFFICIENT
