"""LD607: reasoning (thinking) switched on for trivial prompts."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import REQUESTS

TRIVIAL_USER_CHARS = 300
# Assumed hidden reasoning tokens per effort level (reasoning models' typical short-task usage).
REASONING_TOKENS = {"minimal": 0, "none": 0, "low": 200, "medium": 1000, "high": 4000, "thinking": 1000}


class ReasoningEffort(Check):
    """Reasoning effort: thinking enabled on prompts that do not need it.

    ## What it checks
    ``reasoning_effort`` (or ``reasoning.effort``), ``chat_template_kwargs``
    ``enable_thinking`` and ``thinking`` of every ``--request`` body. Fires
    when reasoning is on at medium effort or more (or thinking is enabled) for
    a trivial prompt: under 300 characters of user text and no tools.

    ## Why it adds latency
    Reasoning models write hidden "thinking" tokens before the answer; each
    costs the same decode time as a visible token, and the answer's first token
    waits for all of them.

    ## Example
    ``"reasoning_effort": "high"`` on "What is 2+2?": a few thousand thinking
    tokens, tens of seconds, for a one-token answer.

    ## Fix
    Use ``low`` / ``minimal`` effort or disable thinking for simple prompts;
    route only hard tasks to high effort.

    ## Caveats
    The reasoning tokens are an assumption (200 / 1,000 / 4,000 for low /
    medium / high), not a measurement; a non-reasoning model ignores the field.
    """

    id = "LD607"
    name = "reasoning-effort"
    title = "Reasoning on for trivial prompts"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        hits = []
        for r in requests.requests:
            level = (r.params.reasoning_effort or "").lower() or ("thinking" if r.params.thinking else "")
            if REASONING_TOKENS.get(level, 0) >= 1000 and r.user_chars < TRIVIAL_USER_CHARS and not r.params.tools:
                hits.append((r, level))
        if not hits:
            return
        tokens = max(REASONING_TOKENS[level] for _, level in hits)
        levels = sorted({level for _, level in hits})
        costs = token_costs(ctx)
        impact = costs.decode(tokens)
        yield Finding(
            Severity.WARNING, Confidence.LOW,
            f"Reasoning ({', '.join(levels)}) on for trivial prompts",
            f"{requests.describe([r for r, _ in hits])}: reasoning {', '.join(levels)} on prompts of under "
            f"{TRIVIAL_USER_CHARS} characters; about {tokens:,} hidden thinking tokens before the answer"
            + (f", {impact:,.0f} ms." if impact is not None else "."),
            Fix("Lower the reasoning effort for simple prompts.",
                ('Send "reasoning_effort": "low" (or "minimal"), or chat_template_kwargs enable_thinking: false.',
                 "Route only hard tasks to high effort.")),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"assumed {tokens:,} reasoning tokens × {costs.decode_basis}",
            evidence=(Evidence("requests", len(hits), "", "--request"),
                      Evidence("effort", ", ".join(levels), "", "reasoning_effort / thinking")),
            cause=Cause.LONG_OUTPUT,
        )
