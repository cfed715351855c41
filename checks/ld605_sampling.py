"""LD605: sampling settings — temperature above 0 and penalties cost a little per token."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS

SAMPLING_SHARE = 0.02  # assumed decode-time share of sampling vs greedy
PENALTY_SHARE = 0.05


class Sampling(Check):
    """Sampling: temperature above 0 (or unset) and penalties, versus greedy decoding.

    ## What it checks
    ``temperature``, ``top_p``, ``top_k`` and the frequency / presence /
    repetition penalties of every ``--request`` body. Reports (for
    information) when most requests sample instead of decoding greedily
    (``temperature: 0``), and names the penalties in use.

    ## Why it adds latency
    Greedy decoding picks the most likely token; sampling sorts and filters
    the distribution first, and penalties rescan the generated tokens each
    step. The article notes greedy is slightly faster. The difference is a few
    percent of decode time, but it is free to take when answers should be
    deterministic anyway (extraction, classification).

    ## Example
    A classifier sent with the SDK default temperature 1.0 and a frequency
    penalty: slower, and different labels for the same input.

    ## Fix
    Use ``temperature: 0`` where determinism is wanted; drop penalties that
    were copied from examples.

    ## Caveats
    Informational: creative tasks need sampling. The cost is an assumption
    (2% of decode, 5% with penalties), not a measurement.
    """

    id = "LD605"
    name = "sampling"
    title = "Sampling settings (temperature, penalties)"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        sampling = [r for r in requests.requests if r.params.temperature is None or r.params.temperature > 0]
        if len(sampling) * 2 <= len(requests.requests):
            return
        penalties = sorted({p for r in sampling for p in r.params.penalties})
        share = PENALTY_SHARE if penalties else SAMPLING_SHARE
        typical = ctx.options.workload.typical_output_tokens
        costs = token_costs(ctx)
        decode = costs.decode(typical)
        impact = None if decode is None else decode * share
        unset = sum(1 for r in sampling if r.params.temperature is None)
        yield Finding(
            Severity.INFO, Confidence.LOW,
            "Requests sample (temperature > 0)" + (f" with {', '.join(penalties)}" if penalties else ""),
            f"{requests.describe(sampling)} sample rather than decode greedily ({unset} leave temperature unset, "
            f"which means 1.0). Greedy decoding (temperature 0) is slightly faster and deterministic"
            + (f"; about {impact:,.0f} ms per {typical}-token answer." if impact is not None else "."),
            Fix("Use temperature 0 where answers should be deterministic.",
                ("Set temperature: 0 for extraction, classification and tool routing.",
                 "Drop frequency / presence / repetition penalties that were not chosen deliberately.")),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"assumed {share:.0%} of a {typical}-token decode; {costs.decode_basis}",
            evidence=(Evidence("sampling requests", len(sampling), "", "--request"),
                      Evidence("penalties", ", ".join(penalties) or "none", "", "--request")),
            cause=Cause.DECODE_EXTRAS,
        )
