"""LD604: logprobs / top_logprobs requested — extra work and bytes for every token."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS

LOGPROBS_SHARE = 0.05  # assumed share of decode time spent on log-probabilities
BYTES_PER_ALTERNATIVE = 60  # JSON of one {"token", "logprob", "bytes"} entry


class Logprobs(Check):
    """Log-probabilities: ``logprobs`` / ``top_logprobs`` add work and payload to every token.

    ## What it checks
    The ``logprobs`` and ``top_logprobs`` fields of every ``--request`` body
    (chat: ``logprobs: true``; completions: ``logprobs: N``). Fires when any
    request asks for them; warns when 10 or more alternatives per token are
    requested.

    ## Why it adds latency
    The server computes a log-softmax over the whole vocabulary for each
    token, sorts out the top alternatives, and serialises them: each streamed
    chunk grows from tens of bytes to hundreds or thousands.

    ## Example
    ``"top_logprobs": 20`` on a chat UI that never shows them: ~1.2 KB more
    JSON for every token streamed.

    ## Fix
    Request logprobs only where they are used (evaluation, confidence
    scores), with as few alternatives as needed.

    ## Caveats
    The compute cost is small on GPUs; the estimate assumes 5% of decode time
    and is not measured.
    """

    id = "LD604"
    name = "logprobs"
    title = "Log-probabilities requested (logprobs / top_logprobs)"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        asking = [r for r in requests.requests if r.params.logprobs or (r.params.top_logprobs or 0) > 0]
        if not asking:
            return
        top = max(
            max(r.params.top_logprobs or 0, r.params.logprobs if type(r.params.logprobs) is int else 0)
            for r in asking
        )
        typical = ctx.options.workload.typical_output_tokens
        costs = token_costs(ctx)
        decode = costs.decode(typical)
        impact = None if decode is None else decode * LOGPROBS_SHARE
        payload = top * BYTES_PER_ALTERNATIVE
        yield Finding(
            Severity.WARNING if top >= 10 else Severity.INFO, Confidence.LOW,
            f"Log-probabilities requested ({top} alternatives per token)",
            f"{requests.describe(asking)} request logprobs with {top} alternatives: about {payload:,} more "
            f"bytes per token on the wire and a log-softmax per token"
            + (f"; about {impact:,.0f} ms per {typical}-token answer." if impact is not None else "."),
            Fix("Request logprobs only where they are used.",
                ("Drop logprobs / top_logprobs from interactive calls; keep them for evaluation jobs.",)),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"assumed {LOGPROBS_SHARE:.0%} of a {typical}-token decode; {costs.decode_basis}",
            evidence=(Evidence("top_logprobs", top, "", "--request"),
                      Evidence("requests", len(asking), "", "--request")),
            cause=Cause.DECODE_EXTRAS,
        )
