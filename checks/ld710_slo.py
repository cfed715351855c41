"""LD710: SLO breached — a measured latency is above the limit the user set."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.measures import metric
from llmdoctor.check import Category, Check, CheckSkipped, Reads
from llmdoctor.context import Context
from llmdoctor.findings import Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.inputs.slo import SloError, parse_slo
from llmdoctor.options import Options
from llmdoctor.probes.catalog import BASELINE, SWEEP


class SloBreached(Check):
    """SLO breached: a latency objective given with --slo or in llmdoctor.toml is exceeded.

    ## What it checks
    Compares each service-level objective with what this run measured:
    ``ttft_p50``/``ttft_p90`` and ``total_p50``/``total_p90`` from the warm
    "Say ok." baseline samples, ``fixed_cost`` and ``per_token`` from the
    flat-latency fit. Objectives come from ``--slo METRIC=LIMIT`` (units ms or
    s) or from the ``[slo]`` table of ``llmdoctor.toml`` (or
    ``[tool.llmdoctor.slo]`` in ``pyproject.toml``). Every breached objective
    is a critical finding with the measured value, the limit and a confidence
    drawn from the number of samples behind the value.

    ## Why it adds latency
    It does not add latency; it says the latency is already more than the
    service promised. As a pre-deploy gate it stops a release whose floor or
    tail is above the objective before users see it.

    ## Example
    ``--slo ttft_p90=800ms``: TTFT p90 is 1,240 ms over 10 samples → critical,
    440 ms over the limit, confidence medium.

    ## Fix
    Read the other findings of the same run: they say where the time goes
    (queueing, cold start, prefill, network, a fixed cost per request). If the
    objective is new, measure with more ``--samples`` before tightening it.

    ## Caveats
    Percentiles of a few samples are noisy: a p90 needs about 20 samples for
    high confidence (``--samples 20``), a median about 10. The values are
    measured from this machine, so they include its network path. A metric
    that was not measured (e.g. the sweep failed) is reported as skipped.
    """

    id = "LD710"
    name = "slo-breached"
    title = "Latency SLOs"
    category = Category.BASELINE
    optional = (BASELINE, SWEEP)

    @classmethod
    def reads(cls, options: Options) -> Reads:
        """Only the probes behind the given objectives (none without ``--slo``)."""
        try:
            sources = {metric(parse_slo(s).metric).source.name for s in options.gate.slos}
        except SloError:
            return Reads()
        return Reads((), tuple(p for p in cls.optional if p.name in sources))

    def run(self, ctx: Context) -> Iterator[Finding]:
        specs = ctx.options.gate.slos
        if not specs:
            raise CheckSkipped("no SLOs given (--slo METRIC=LIMIT or an [slo] table in llmdoctor.toml)")
        try:
            slos = [parse_slo(s) for s in specs]
        except SloError as exc:
            raise CheckSkipped(str(exc)) from None
        need_sweep = any(metric(s.metric).source is SWEEP for s in slos)
        need_base = any(metric(s.metric).source is BASELINE for s in slos)
        base = ctx.get(BASELINE) if need_base else None
        sweep = ctx.get(SWEEP) if need_sweep else None
        unmeasured = []
        for slo in slos:
            m = metric(slo.metric)
            got = m.measure(base, sweep)
            if got is None:
                unmeasured.append(slo.metric)
                continue
            if got.value_ms <= slo.limit_ms:
                continue
            over = got.value_ms - slo.limit_ms
            unit = m.unit
            yield Finding(
                Severity.CRITICAL,
                got.confidence,
                f"SLO breached: {slo.metric} {got.value_ms:,.1f} {unit} > {slo.limit_ms:,.1f} {unit}",
                f"{m.description.capitalize()} is {got.value_ms:,.1f} {unit} against an objective of "
                f"{slo.limit_ms:,.1f} {unit} ({over / slo.limit_ms:.0%} over, from {got.samples} samples).",
                Fix(
                    "Bring the latency back under the objective before deploying.",
                    (
                        "Read this run's other findings: they rank where the time goes.",
                        "Compare with the last good build: --compare baseline.json (LD711).",
                        "For a percentile objective, confirm with more samples (--samples 20).",
                    ),
                ),
                impact_ms=over if m.unit == "ms" else None,
                # a percentile above the median is paid by the slowest requests, the median by about every one
                frequency=Frequency.SLOW_TAIL if m.tail else Frequency.EVERY_REQUEST,
                impact_basis=f"measured {slo.metric} minus its objective",
                evidence=(
                    Evidence("metric", slo.metric),
                    Evidence("measured", round(got.value_ms, 3), unit, got.source),
                    Evidence("limit", slo.limit_ms, unit, "--slo"),
                    Evidence("samples", got.samples, "", got.source),
                ),
                symptom=m.symptom,
            )
        if unmeasured and len(unmeasured) == len(slos):
            raise CheckSkipped(f"not measured in this run: {', '.join(unmeasured)}")

