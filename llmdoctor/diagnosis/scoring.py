"""The scoring: independent hypotheses, odds times likelihood ratios, expected information.

Each hypothesis is a yes/no question ("requests queue at the server") with its own
probability; several causes can be true at once, so they are not forced to sum to one.

- **Prior**: `PRIOR` for every hypothesis (`PRIOR_SECONDARY` for the prefix-cache miss, which
  only matters for long prompts).
- **Evidence**: every observation carries a likelihood ratio: how much more likely it is when
  the hypothesis is true than when it is false. Posterior odds = prior odds × the product of
  the ratios. Ratios are coarse on purpose, so a reader can redo the arithmetic:
  `DECISIVE` (100: the test measured the mechanism itself), `STRONG` (10), `WEAK` (3), and
  their inverses for evidence against. A value in a grey zone between a rule's thresholds
  gives 1 (no update).
- **Verdicts**: confirmed at p ≥ `CONFIRM` (0.95), refuted at p ≤ `REFUTE` (0.05). From the
  prior 0.2, one decisive result confirms or refutes; four consistent weak ones confirm.
- **Choosing a test**: each follow-up declares, per hypothesis it separates, how often it
  comes out positive when the hypothesis is true (sensitivity) and when it is false (false
  positive rate). Its expected information is the expected drop of binary entropy over those
  hypotheses (bits). The planner orders the test with the most bits per unit of cost
  (requests + seconds / `SECONDS_PER_REQUEST`), cheapest and then catalog order on ties.
"""

from __future__ import annotations

import math

from llmdoctor.diagnosis.model import HypothesisStatus

__all__ = [
    "PRIOR", "PRIOR_SECONDARY", "DECISIVE", "STRONG", "WEAK", "CONFIRM", "REFUTE", "MIN_BITS",
    "SECONDS_PER_REQUEST", "update", "status", "expected_bits", "cost_units",
]

PRIOR = 0.2
PRIOR_SECONDARY = 0.1
DECISIVE = 100.0
STRONG = 10.0
WEAK = 3.0
CONFIRM = 0.95
REFUTE = 0.05
#: A test expected to yield less than this (bits) is not worth ordering. 0.09 keeps a healthy
#: endpoint from being sent a 2 s idle test for a cold start the first pass already argued
#: against (≈0.08 bits), while every test that separates a live hypothesis (≥0.1) still runs.
MIN_BITS = 0.09
#: Seconds of waiting that weigh as much as one request when comparing costs.
SECONDS_PER_REQUEST = 5.0


def update(p: float, likelihood_ratio: float) -> float:
    """Posterior probability from `p` and one likelihood ratio (Bayes in odds form)."""
    p = min(max(p, 1e-9), 1 - 1e-9)
    odds = p / (1 - p) * likelihood_ratio
    return odds / (1 + odds)


def status(p: float) -> HypothesisStatus:
    """Confirmed, refuted or open, by the probability alone."""
    if p >= CONFIRM:
        return HypothesisStatus.CONFIRMED
    if p <= REFUTE:
        return HypothesisStatus.REFUTED
    return HypothesisStatus.OPEN


def _h2(p: float) -> float:
    if p <= 0 or p >= 1:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def expected_bits(p: float, sensitivity: float, false_positive: float) -> float:
    """Expected entropy drop about one hypothesis from a binary test (0 for a settled one)."""
    if status(p) is not HypothesisStatus.OPEN:
        return 0.0
    q = p * sensitivity + (1 - p) * false_positive
    if q <= 0 or q >= 1:
        return 0.0
    after_pos = p * sensitivity / q
    after_neg = p * (1 - sensitivity) / (1 - q)
    return max(0.0, _h2(p) - (q * _h2(after_pos) + (1 - q) * _h2(after_neg)))


def cost_units(requests: int, seconds: float) -> float:
    """One number for a test's cost (a floor keeps free tests from dividing by zero)."""
    return max(0.2, requests + seconds / SECONDS_PER_REQUEST)
