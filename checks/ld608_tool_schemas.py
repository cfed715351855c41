"""LD608: tool (function) schemas that make up much of every prompt."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS

CHARS_PER_TOKEN = 4.0
WARN_TOKENS = 2000
INFO_TOKENS = 500
MANY_TOOLS = 20


class ToolSchemas(Check):
    """Tool schemas: the ``tools`` / ``functions`` definitions inflating every prompt.

    ## What it checks
    The JSON size of ``tools`` (and legacy ``functions``) in every
    ``--request`` body, at four characters a token. Warns at 2,000 tokens or
    20 tools; reports at 500 tokens when the schemas outweigh the messages.

    ## Why it adds latency
    The chat template renders every tool schema into the prompt, so each
    request prefills them before the first token, whether a tool is called or
    not.

    ## Example
    An agent sends all 45 tools of its registry with every turn: 9,000 tokens
    of schemas in front of a 40-token question.

    ## Fix
    Send only the tools relevant to the turn (route first, or group tools);
    shorten descriptions; keep the tool list identical and first so a prefix
    cache can reuse it.

    ## Caveats
    Templates render schemas differently (some compactly); the size is an
    estimate. Prefix caching makes an identical tool block cheap after the
    first request.
    """

    id = "LD608"
    name = "tool-schemas"
    title = "Tool schemas inflating the prompt"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        with_tools = [r for r in requests.requests if r.params.tools_chars]
        if not with_tools:
            return
        worst = max(with_tools, key=lambda r: r.params.tools_chars)
        tokens = round(worst.params.tools_chars / CHARS_PER_TOKEN)
        count = worst.params.tools + worst.params.functions
        outweigh = worst.params.tools_chars > worst.prompt_chars
        if tokens >= WARN_TOKENS or count >= MANY_TOOLS:
            severity = Severity.WARNING
        elif tokens >= INFO_TOKENS and outweigh:
            severity = Severity.INFO
        else:
            return
        costs = token_costs(ctx)
        impact = costs.prefill(tokens)
        yield Finding(
            severity, Confidence.MEDIUM,
            f"Tool schemas add ~{tokens:,} prompt tokens ({count} tools)",
            f"{requests.describe(with_tools)} carry tool definitions; the largest set is {count} tools, "
            f"{worst.params.tools_chars:,} characters (~{tokens:,} tokens)"
            + (", more than the messages themselves" if outweigh else "")
            + (f"; about {impact:,.0f} ms of prefill per request." if impact is not None else "."),
            Fix("Send fewer, smaller tool schemas.",
                ("Send only the tools relevant to this turn.", "Shorten descriptions and parameter docs.",
                 "Keep the tool list identical and first so the prefix cache can reuse it.")),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"{tokens:,} tokens (chars/4) × {costs.prefill_basis}",
            evidence=(Evidence("tools", count, "", worst.source),
                      Evidence("schema size", worst.params.tools_chars, "chars", worst.source)),
            cause=Cause.LONG_PREFILL,
        )
