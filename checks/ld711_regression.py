"""LD711: latency regression against a saved baseline, by a noise-aware test."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.measures import compare_runs, metric
from llmdoctor.analysis.regress import Comparison, Verdict
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import BASELINE, REFERENCE, SWEEP

CRITICAL_REL = 0.5


def _confidence(c: Comparison) -> Confidence:
    if c.p_value is not None and c.p_value < 0.001 and min(c.n_before, c.n_after) >= 8:
        return Confidence.HIGH
    return Confidence.MEDIUM


class Regression(Check):
    """Latency regression: this run is slower than the saved baseline, beyond noise.

    ## What it checks
    With ``--compare FILE`` (a file written earlier by ``--save-baseline``),
    compares this run with that baseline metric by metric: time to first
    token and total latency of the warm "Say ok." samples, and the fixed and
    per-token cost of the flat-latency fit. A metric has regressed only when
    a one-sided Mann-Whitney U rank test on the per-request samples gives
    p < 0.01 *and* the 95% bootstrap interval of the difference of medians
    lies entirely above a minimum effect of 10% of the baseline (at least
    10 ms). The fit's costs use a bootstrap of the fit itself.

    ## Why it adds latency
    A new model build, server flag, driver, network path or load balancer can
    add a fixed cost to every request; comparing with the last good run finds
    it before users do. The rank test and the minimum effect keep the gate
    from flapping on run-to-run noise.

    ## Example
    ttft 355 ms → 461 ms (+30%), 95% interval of the difference +98..+112 ms,
    p = 0.0002 over 10 + 10 samples → warning (critical from +50%).

    ## Fix
    Look at what changed between the baseline and this run (deployment,
    image, flags, hardware, region), and at the phases of the waterfall:
    ``llmdoctor compare --endpoint OLD --endpoint NEW`` shows which phase
    grew, with both measured interleaved.

    ## Caveats
    Fewer than 5 samples on either side cannot show a regression (the check
    reports ``insufficient``): use ``--samples 10`` for a gate. Both runs
    should be taken from the same machine and network path. Improvements are
    not findings.
    """

    id = "LD711"
    name = "latency-regression"
    title = "Regression against a saved baseline"
    category = Category.BASELINE
    requires = (REFERENCE,)
    optional = (BASELINE, SWEEP)

    def run(self, ctx: Context) -> Iterator[Finding]:
        ref = ctx.get(REFERENCE)
        base = ctx.get(BASELINE) if ref.baseline is not None else None
        sweep = ctx.optional(SWEEP) if ref.sweep is not None else None
        comparisons = compare_runs(ref.baseline, ref.sweep, base, sweep)
        if not comparisons:
            raise CheckSkipped("nothing to compare: the baseline file and this run share no measured metric")
        if all(c.verdict == Verdict.INSUFFICIENT for c in comparisons):
            c = comparisons[0]
            raise CheckSkipped(
                f"too few samples to compare ({c.n_before} in the baseline, {c.n_after} now; need 5 each)"
            )
        elsewhere = ""
        if ref.endpoint and ctx.target is not None and ref.endpoint != ctx.target.base_url:
            elsewhere = f" Note: the baseline was recorded against {ref.endpoint}, not this endpoint."
        for c in comparisons:
            if c.verdict != Verdict.REGRESSION:
                continue
            assert c.before_ms is not None and c.after_ms is not None and c.ci_low_ms is not None
            rel = c.rel_change or 0.0
            m = metric(c.metric)
            unit = m.unit
            severity = Severity.CRITICAL if rel >= CRITICAL_REL else Severity.WARNING
            yield Finding(
                severity,
                _confidence(c),
                f"Regression: {c.metric} {c.before_ms:,.1f} → {c.after_ms:,.1f} {unit} (+{rel:.0%})",
                f"The {m.description} grew from {c.before_ms:,.1f} to {c.after_ms:,.1f} {unit} against the baseline of "
                f"{ref.recorded_at or ref.source}; the difference is between {c.ci_low_ms:+,.1f} and "
                f"{c.ci_high_ms:+,.1f} {unit} with {c.level:.0%} confidence "
                f"({c.test}, {c.n_before} vs {c.n_after} samples).{elsewhere}",
                Fix(
                    "Find what changed since the baseline and which phase grew.",
                    (
                        "Diff the deployment: image, model build, server flags, driver, region, proxies.",
                        "Run `llmdoctor compare --endpoint OLD --endpoint NEW` for a phase-by-phase comparison.",
                        "If the change is intended, save a new baseline with --save-baseline.",
                    ),
                ),
                impact_ms=c.diff_ms if m.unit == "ms" else None,
                frequency=Frequency.EVERY_REQUEST,  # a shift of the median
                impact_basis=f"median {c.metric} now minus the baseline's",
                evidence=(
                    Evidence("metric", c.metric),
                    Evidence("before", round(c.before_ms, 3), unit, ref.source),
                    Evidence("after", round(c.after_ms, 3), unit, "this run"),
                    Evidence("interval low", round(c.ci_low_ms, 3), unit, c.test),
                    Evidence("interval high", round(c.ci_high_ms or 0.0, 3), unit, c.test),
                    Evidence("p-value", float(f"{c.p_value:.3g}"), "", c.test, statistic=True),
                    Evidence("minimum effect", round(c.min_effect_ms, 3), unit, "gate rule"),
                    Evidence("samples", f"{c.n_before} vs {c.n_after}", "", c.test),
                ),
                symptom=m.symptom,
            )
