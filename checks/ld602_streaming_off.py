"""LD602: responses not streamed, so users wait for the whole answer."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS


class StreamingOff(Check):
    """Streaming off: ``stream`` is false or missing, so nothing is shown until the answer ends.

    ## What it checks
    The ``stream`` field of every ``--request`` body. A missing field means
    false in the OpenAI API. Fires when any request is not streamed.

    ## Why it adds latency
    Without streaming the first byte arrives only when the last token is
    generated: the user-visible wait is the whole decode, not the time to first
    token. Streaming is the article's first remedy for perceived latency; it
    also lets clients measure TTFT and time out early.

    ## Example
    A chat UI sends ``"stream": false``; answers of 200 tokens at 25 ms each
    show nothing for 5 s, where streaming would show the first words in 0.4 s.

    ## Fix
    Send ``"stream": true`` (with ``"stream_options": {"include_usage": true}``
    to keep token counts) and render tokens as they arrive.

    ## Caveats
    Batch jobs and calls whose answer is parsed whole (JSON, a label) gain
    nothing from streaming; there the finding is informational.
    """

    id = "LD602"
    name = "streaming-off"
    title = "Streaming off"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        off = [r for r in requests.requests if not r.params.stream]
        if not off:
            return
        typical = ctx.options.workload.typical_output_tokens
        answer = min([r.params.output_cap or typical for r in off] + [typical])
        costs = token_costs(ctx)
        impact = costs.decode(max(0, answer - 1))
        structured = all(r.params.response_format in ("json_object", "json_schema") or r.short_answer_hint for r in off)
        explicit = sum(1 for r in off if r.params.stream is False)
        yield Finding(
            Severity.INFO if structured else Severity.WARNING, Confidence.MEDIUM,
            "Responses are not streamed: users wait for the whole answer",
            f"{requests.describe(off)} are sent with stream off ({explicit} explicit, {len(off) - explicit} by "
            f"default): the first byte arrives only after the last of ~{answer} tokens"
            + (f", about {impact:,.0f} ms after it could have." if impact is not None else "."),
            Fix(
                'Send "stream": true and render tokens as they arrive.',
                ('Add "stream_options": {"include_usage": true} to keep the usage counts.',
                 "Show the first tokens at once; time out on time-to-first-token, not on the whole answer."),
            ),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"{max(0, answer - 1)} output tokens after the first × {costs.decode_basis}",
            evidence=(Evidence("requests not streamed", len(off), "", "--request"),
                      Evidence("first", off[0].source, "", "stream")),
            cause=Cause.NO_STREAMING,
        )
