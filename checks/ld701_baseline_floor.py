"""LD701: the "Say ok." floor — the least latency the endpoint can give."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.noise import LAG_FACTOR, explained_by_lag, noise_confidence
from llmdoctor.causes import Symptom
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.stats import percentile
from llmdoctor.probes.catalog import BASELINE, CLIENT_HOST

WARNING_FLOOR_MS = 500.0
CRITICAL_FLOOR_MS = 2000.0
UNSTABLE_RATIO = 2.0
UNSTABLE_MIN_SPREAD_MS = 200.0


class BaselineFloor(Check):
    """Baseline floor: latency of a minimal "Say ok." request, median and p90.

    ## What it checks
    After a warm-up, sends the minimal prompt "Say ok." several times (default
    5, ``max_tokens`` 8, streamed) and reports the median and p90 of time to
    first token and total. This is the floor every request pays, whatever it
    asks for. It fires when the median total is above 500 ms (warning) or
    2,000 ms (critical), or when the floor is unstable (p90 more than twice
    the median and 200 ms above it).

    ## Why it adds latency
    LLM latency is flat: a two-token answer costs nearly as much as a twenty
    token one, because of this fixed floor (queueing, scheduling,
    tokenization, prefill, network). A high floor makes every interaction
    feel slow; an unstable one points at queueing or contention.

    ## Example
    "Say ok." p50 total 850 ms, TTFT 800 ms: 94% of even the smallest request
    is spent before the first token.

    ## Fix
    Stream responses so users see the first token; cache answers to frequent
    queries; merge small requests; use a continuous-batching backend (vLLM,
    TGI) and a smaller or quantized model for latency-critical paths; keep
    instances warm. For an unstable floor, look at queue depth and GPU
    contention (LD2xx).

    ## Caveats
    Measured from this machine, so it includes the network to the endpoint.
    Hosted APIs typically have floors of a few hundred ms. Samples that fall
    into two populations (one slow replica: LD211) have no floor of their own:
    the check is skipped then. Noise only adds latency: the evidence gives the
    floor's estimate from the lower part of the samples (their lower quartile,
    with the interval from the fastest to the median). With fewer samples than
    asked (refused or failed requests), or when the noise the run measured
    (twice llmdoctor's own median worst scheduling lag while the requests ran,
    or the p90-p50 spread of the repeats) is more than a quarter of the floor,
    the confidence is lowered; a busy host whose lag is small beside the floor
    changes nothing. An unstable floor whose spread is within twice the worst
    lag while the slower repeats ran is the client's own noise: not reported
    (skipped, saying by how much, when no high floor is).
    """

    id = "LD701"
    name = "baseline-floor"
    title = 'Baseline "Say ok." floor'
    category = Category.BASELINE
    requires = (BASELINE,)
    optional = (CLIENT_HOST,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        base = ctx.get(BASELINE)
        p50, p90 = base.total_p50_ms, base.total_p90_ms
        ttft50, ttft90 = base.ttft_p50_ms, base.ttft_p90_ms
        if p50 is None or p90 is None:
            return
        mixed = base.mixed()
        if mixed is not None:
            raise CheckSkipped(
                f"the warm requests fall into two populations (~{mixed.fast_median:,.0f} and "
                f"~{mixed.slow_median:,.0f} ms; LD211): no floor is drawn from mixed samples")
        n = len(base.ok_samples)
        host = ctx.optional(CLIENT_HOST)
        totals = sorted(t.total_ms for t in base.ok_samples if t.total_ms is not None)
        confidence = noise_confidence(Confidence.HIGH if n >= 5 else Confidence.MEDIUM, p50, host=host,
                                      timings=base.ok_samples, spread_ms=p90 - p50, short=base.short)
        samples = base.samples_note()
        evidence = (
            Evidence("total p50", round(p50, 1), "ms", "baseline"),
            Evidence("total p90", round(p90, 1), "ms", "baseline"),
            Evidence("TTFT p50", None if ttft50 is None else round(ttft50, 1), "ms", "baseline"),
            Evidence("TTFT p90", None if ttft90 is None else round(ttft90, 1), "ms", "baseline"),
            Evidence("samples", n, "", "baseline"),
            Evidence("samples asked", base.samples_asked, "", "baseline"),
            # Noise only adds latency: the lower part of the distribution is the floor's estimate.
            Evidence("floor (lower quartile, interval min–p50)",
                     f"{percentile(totals, 25) or p50:,.1f} ({totals[0] if totals else p50:,.1f}–{p50:,.1f})", "ms",
                     "baseline"),
        )
        if p50 >= WARNING_FLOOR_MS:
            severity = Severity.CRITICAL if p50 >= CRITICAL_FLOOR_MS else Severity.WARNING
            share = f"; {ttft50 / p50:.0%} of it before the first token" if ttft50 else ""
            yield Finding(
                severity,
                confidence,
                f"High latency floor: even \"Say ok.\" takes {p50:,.0f} ms",
                f"The minimal request takes {p50:,.0f} ms (p90 {p90:,.0f} ms, {samples}){share}.",
                Fix(
                    "Lower the fixed cost per request, and hide what remains.",
                    (
                        "Always stream, so users see the first token instead of the whole answer.",
                        "Cache answers to frequent queries (a semantic cache for paraphrases).",
                        "Merge small requests, or delay non-urgent ones so the server can batch them.",
                        "Use a continuous-batching backend (vLLM, TGI) and a smaller or quantized model "
                        "for latency-critical paths.",
                    ),
                ),
                impact_ms=p50,
                frequency=Frequency.EVERY_REQUEST,
                impact_basis="paid by every request, however small",
                evidence=evidence,
                symptom=Symptom.HIGH_FLOOR,
            )
        spread = p90 - p50
        if p90 >= UNSTABLE_RATIO * p50 and spread >= UNSTABLE_MIN_SPREAD_MS:
            # The slow repeats' own worst lag: a client that woke late makes identical requests look unequal.
            slow = [t for t in base.ok_samples if (t.total_ms or 0.0) > p50]
            lag = max((t.client_lag_ms for t in slow if t.client_lag_ms is not None), default=None)
            if explained_by_lag(spread, lag):
                if p50 < WARNING_FLOOR_MS:
                    raise CheckSkipped(
                        f"identical minimal requests vary from {p50:,.0f} ms (p50) to {p90:,.0f} ms (p90), but "
                        f"llmdoctor's own worst scheduling lag while the slower ones ran was {lag or 0.0:,.1f} ms: "
                        f"the {spread:,.0f} ms spread is within the {LAG_FACTOR:g}× of it that the lag explains. "
                        "Rerun from a quieter host")
                return
            yield Finding(
                Severity.WARNING,
                noise_confidence(Confidence.MEDIUM if n >= 5 else Confidence.LOW, spread, host=host,
                                 timings=slow, short=base.short),
                f"Unstable floor: p90 {p90:,.0f} ms is {p90 / p50:.1f}× the median",
                f"Identical minimal requests vary from {p50:,.0f} ms (p50) to {p90:,.0f} ms (p90): "
                "requests are waiting for something (queue, batch slot, contended GPU).",
                Fix(
                    "Find what requests wait for.",
                    (
                        "Check queue depth and GPU utilisation (pass --metrics-url; see LD2xx checks).",
                        "Lower the server's batch size (e.g. vLLM --max-num-seqs) if TTFT matters more than "
                        "throughput; add replicas if the queue is long.",
                    ),
                ),
                impact_ms=spread,
                frequency=Frequency.SLOW_TAIL,
                impact_basis="p90 minus p50 of identical requests",
                evidence=evidence,
                symptom=Symptom.UNSTABLE_FLOOR,
            )
