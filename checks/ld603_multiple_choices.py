"""LD603: n or best_of above 1 — several answers generated per request."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS


class MultipleChoices(Check):
    """Several choices: ``n`` or ``best_of`` above 1 multiplies the decode work.

    ## What it checks
    The ``n`` and ``best_of`` fields of every ``--request`` body; fires when
    either is above 1.

    ## Why it adds latency
    Each extra sequence is decoded alongside the first: it takes batch slots
    and KV cache, and ``best_of`` must finish every candidate before it can
    answer (so it cannot stream). On a busy server that work delays everyone,
    this request included.

    ## Example
    ``"n": 4`` to pick the best of four summaries: four times the decode work
    and four times the KV-cache of one answer.

    ## Fix
    Ask for one answer; if you need alternatives, request them only when the
    first is rejected, or use a cheaper model for the candidates.

    ## Caveats
    On an idle GPU extra sequences share the forward passes and cost less than
    their count suggests; the impact is the upper bound under load.
    """

    id = "LD603"
    name = "multiple-choices"
    title = "Several sequences per request (n / best_of)"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        many = [r for r in requests.requests if r.params.choices > 1]
        if not many:
            return
        choices = max(r.params.choices for r in many)
        typical = ctx.options.workload.typical_output_tokens
        costs = token_costs(ctx)
        extra_tokens = (choices - 1) * typical
        impact = costs.decode(extra_tokens)
        best_of = any((r.params.best_of or 1) > 1 for r in many)
        yield Finding(
            Severity.WARNING, Confidence.LOW,
            f"{choices} sequences generated per request (n / best_of)",
            f"{requests.describe(many)} ask for {choices} sequences: {choices - 1} extra answers of decode work"
            + (" and best_of cannot stream until every candidate is done" if best_of else "")
            + (f"; up to {impact:,.0f} ms under load." if impact is not None else "."),
            Fix("Generate one answer per request.",
                ("Drop n / best_of; ask again only when the first answer is rejected.",)),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"upper bound: {extra_tokens:,} extra output tokens × {costs.decode_basis}",
            evidence=(Evidence("sequences per request", choices, "", "n / best_of"),
                      Evidence("requests", len(many), "", "--request")),
            cause=Cause.LONG_OUTPUT,
        )
