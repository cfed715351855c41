"""LD702: flat latency — a fixed cost per request dominates."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.floor_phase import floor_phase
from llmdoctor.analysis.noise import noise_confidence
from llmdoctor.causes import Symptom
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import ATTRIBUTION, BASELINE, CLIENT_HOST, SWEEP

FIXED_SHARE_LIMIT = 0.5
MIN_FIXED_MS = 100.0
#: A fixed cost every request pays is at most the whole of the median baseline request (LD701's floor, which
#: pays it plus a prefill and 8 tokens); beyond this factor of it (noise between the two probes) it is not fixed.
FLOOR_SLACK = 1.5


class FlatLatency(Check):
    """Flat latency: how much of a request is a fixed cost, independent of its length.

    ## What it checks
    Sends the same prompt with growing ``max_tokens`` (default 1, 16, 64,
    twice each, interleaved; ``ignore_eos`` where the server accepts it) and
    fits ``total ≈ fixed + per_token × output_tokens`` with a robust line
    (Theil–Sen: medians of pairwise slopes, so one request delayed by a busy
    host cannot drag it) and an interval for each coefficient. Reports the
    fixed cost, the cost per output token and the share of a typical request
    (default 64 output tokens, ``--typical-output-tokens``) that is fixed.
    Fires when the fixed cost is at least 100 ms and half of a typical
    request.

    ## Why it adds latency
    The fixed cost (queueing, scheduling, tokenization, prefill, network) is
    paid by every request whatever it asks for: asking for fewer tokens does
    not make a request proportionally faster. It is the "flat" in flat
    latency.

    ## Example
    fixed 350 ms + 5 ms/token: a 64-token answer takes 670 ms, 52% of it fixed;
    a 2-token answer still takes 360 ms.

    ## Fix
    Reduce what every request pays: stream, cache frequent answers, merge
    small requests to amortise the floor, keep instances warm, use a
    continuous-batching backend and a faster first token (compilation,
    quantization, a smaller model for latency-critical paths).

    ## Caveats
    Servers that stop early and ignore ``ignore_eos`` may generate the same
    length for every ``max_tokens``: the fit is then impossible and the check
    is skipped with that reason; when requests failed instead, the skip says
    how many and why. A fixed cost whose interval is wider than itself (or
    that is not positive, as when the per-token cost grows with the length)
    is "not determined": skipped, unless even its interval's top is under
    100 ms. Samples of two populations (one slow replica, LD211) are not
    fitted as one. A fixed cost above 1.5× the whole of the median
    baseline request (LD701's "Say ok." floor, measured in the same run,
    pays the fixed cost and more) is not paid by every request: skipped, saying
    so (found on real vLLM with ``--max-num-seqs 1`` under other clients'
    streams on a busy host: the sweep's requests waited 5.7 s in the queue,
    the median baseline request took 1.9 s in all).
    When the server's own clock for the typical "Say ok." request
    (vLLM's per-request ``metrics``, llama.cpp's ``timings``, TGI's
    headers, or a histogram over our requests alone, never shared traffic)
    places at least half of the fixed cost in one phase, the finding
    names that phase's cause: the queue (queueing), prefill (a fixed
    per-request server overhead) or the time in front of the model server
    (a gateway); else it is a symptom for another cause to explain.
    When the noise the run measured (twice llmdoctor's own median worst
    scheduling lag while the sweep's requests ran) is more than a quarter
    of the fixed cost, or with fewer requests than asked, the confidence
    is lowered; a busy host whose lag is small beside it changes nothing. The fixed cost includes the sweep
    prompt's prefill and the network round trip from this machine.
    """

    id = "LD702"
    name = "flat-latency"
    title = "Flat-latency fit: fixed vs per-token cost"
    category = Category.BASELINE
    requires = (SWEEP,)
    optional = (CLIENT_HOST, BASELINE, ATTRIBUTION)

    def run(self, ctx: Context) -> Iterator[Finding]:
        sweep = ctx.get(SWEEP)
        fit = sweep.separable_fit
        if fit is None:
            raise CheckSkipped(sweep.not_separable_reason())
        mixed = sweep.mixed()
        if mixed is not None:
            raise CheckSkipped(
                f"the sweep holds two populations ({len(mixed.slow)} of {len(mixed.fast) + len(mixed.slow)} "
                f"requests ~{mixed.slower_by:,.0f} ms above the line of the others): no fixed cost is drawn "
                "from mixed samples (one backend slower than another? see LD211)")
        if not fit.fixed_determined:
            interval = fit.fixed_interval
            if interval is not None and interval[1] < MIN_FIXED_MS:
                return  # whatever the fixed cost is, it is below the threshold
            shortfall = f" (from {sweep.samples_note()})" if sweep.short else ""
            raise CheckSkipped(f"the flat-latency fit does not settle it{shortfall}: {fit.note()}")
        typical = ctx.options.workload.typical_output_tokens
        fixed = fit.fixed_ms
        share = fit.fixed_share(typical)
        if fixed < MIN_FIXED_MS or share < FIXED_SHARE_LIMIT:
            return
        baseline = ctx.optional(BASELINE)
        whole = baseline.total_p50_ms if baseline is not None else None
        if baseline is not None and whole is not None and fixed > FLOOR_SLACK * whole:
            raise CheckSkipped(
                f"the sweep's fixed cost ({fixed:,.0f} ms) is {fixed / whole:.1f}× the whole of a typical warm "
                f"\"Say ok.\" request ({whole:,.0f} ms median, {baseline.samples_note()}): not a cost every "
                "request pays but a wait that grew between the probes (a queue behind other clients' requests, "
                "a busy host); see the queue (LD203) and the floor (LD701)")
        timings = [p.timing for p in sweep.ok_points]
        interval = fit.fixed_interval
        within = f" (interval {interval[0]:,.0f}–{interval[1]:,.0f} ms)" if interval else ""
        shortfall = f" From {sweep.samples_note()}." if sweep.short else ""
        attributed = ctx.optional(ATTRIBUTION)
        where = floor_phase(attributed.typical, fixed) if attributed is not None else None
        title = f"Flat latency: a fixed {fixed:,.0f} ms is {share:.0%} of a typical request"
        placed = ""
        if where is not None:
            title += f", {where.ms:,.0f} ms of it {where.phase_words} by the server's own clock"
            placed = (f" By the server's own clock ({where.source}), {where.words}: that is where the fixed "
                      "cost is paid.")
        yield Finding(
            Severity.WARNING,
            noise_confidence(fit.confidence(), fixed, host=ctx.optional(CLIENT_HOST), timings=timings,
                             short=sweep.short),
            title,
            f"Every request pays about {fixed:,.0f} ms{within} whatever its length, plus {fit.per_token_ms:.1f} ms "
            f"per output token: a {typical}-token answer takes ~{fit.predict(typical):,.0f} ms, "
            f"a 2-token answer still ~{fit.predict(2):,.0f} ms.{placed}{shortfall}",
            Fix(
                "Cut or amortise the fixed cost per request.",
                (
                    "Stream responses so the fixed cost is not followed by waiting for the whole answer.",
                    "Cache answers to frequent queries; merge small requests to amortise the floor.",
                    "Keep instances warm; use a continuous-batching backend (vLLM, TGI) with PagedAttention.",
                    "For a faster first token: compiled engines (TensorRT-LLM), quantization, or a smaller "
                    "model on latency-critical paths.",
                ),
            ),
            impact_ms=fixed,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis="fitted intercept of total latency vs output tokens",
            evidence=(
                Evidence("fixed cost", round(fixed, 1), "ms", "sweep fit"),
                Evidence("per output token", round(fit.per_token_ms, 2), "ms", "sweep fit"),
                Evidence("fit r²", round(fit.r2, 3), "", "sweep fit"),
                Evidence("fit", fit.method, "", "sweep fit"),
                Evidence("points", fit.points, "", "sweep"),
                Evidence("ignore_eos honoured", sweep.ignore_eos, "", "sweep"),
                *((Evidence(f"{where.phase} (typical request, server clock)", round(where.ms, 1), "ms",
                            where.source),) if where is not None else ()),
            ),
            # The server's own clock places it in one phase: that phase is its cause; else a symptom to explain.
            cause=where.cause if where is not None else None, located=where is not None,
            symptom=Symptom.FIXED_COST if where is None else None,
        )
