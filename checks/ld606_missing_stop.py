"""LD606: short-answer prompts without stop sequences or a small max_tokens."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS

SHORT_ANSWER_TOKENS = 8
SMALL_CAP = 32


class MissingStop(Check):
    """Missing stop: prompts that ask for a one-word answer but let the model go on.

    ## What it checks
    Requests whose system or last user message asks for a short answer ("answer
    yes or no", "one word", "return only the label", "classify ...") but set
    neither ``stop`` sequences nor a ``max_tokens`` of 32 or less.

    ## Why it adds latency
    Models often add an explanation after the answer ("Yes. Because ..."). Each
    extra token costs decode time, and the client waits for all of them before
    it parses the one word it wanted.

    ## Example
    ``"Answer yes or no"`` with ``max_tokens: 512`` and no stop: the model
    answers "Yes, because..." for 120 tokens, 3 s instead of 0.3 s.

    ## Fix
    Set ``max_tokens`` to a few tokens, add ``stop`` sequences (``"\\n"``, ``"."``),
    or constrain the answer (``response_format`` / a grammar / an enum schema).

    ## Caveats
    Found by phrase matching in English; a well-behaved model may stop on its
    own. The impact is the worst case up to the cap.
    """

    id = "LD606"
    name = "missing-stop"
    title = "Short answers without stop sequences"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        open_ended = [
            r for r in requests.requests
            if r.short_answer_hint and not r.params.stop and (r.params.output_cap or 10**9) > SMALL_CAP
            and r.params.response_format not in ("json_schema",)
        ]
        if not open_ended:
            return
        typical = ctx.options.workload.typical_output_tokens
        caps = [r.params.output_cap for r in open_ended if r.params.output_cap]
        room = (min(caps) if caps else typical) - SHORT_ANSWER_TOKENS
        costs = token_costs(ctx)
        impact = costs.decode(room)
        yield Finding(
            Severity.INFO, Confidence.LOW,
            "Short-answer prompts without stop sequences or a small max_tokens",
            f"{requests.describe(open_ended)} ask for a short answer but let the model write up to "
            f"{room + SHORT_ANSWER_TOKENS:,} tokens"
            + (f": up to {impact:,.0f} ms if it explains itself." if impact is not None else "."),
            Fix("Stop generation right after the answer.",
                (f"Set max_tokens to about {SHORT_ANSWER_TOKENS}-{SMALL_CAP}.",
                 'Add stop sequences such as "\\n".',
                 "Constrain the answer with response_format / an enum schema where the server supports it.")),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"worst case: {room:,} tokens past a {SHORT_ANSWER_TOKENS}-token answer × "
            f"{costs.decode_basis}",
            evidence=(Evidence("requests", len(open_ended), "", "short-answer phrasing, no stop"),
                      Evidence("first", open_ended[0].source, "", "--request")),
            cause=Cause.LONG_OUTPUT,
        )
