"""LD601: max_tokens far larger than the answer needs, missing, or larger than the window."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.costs import TOKEN_COSTS, distribution, token_costs
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import PROMPT_TOKENS, REQUESTS
from llmdoctor.probes.tokens import known_window

OVERSIZE_FACTOR = 16  # a cap this many times the typical answer is no cap at all
MIN_FLAGGED = 1024
WINDOW_SHARE = 0.5


class MaxTokens(Check):
    """max_tokens: the cap on the answer, compared with a typical answer and the window.

    ## What it checks
    The ``max_tokens`` / ``max_completion_tokens`` of every ``--request`` body:
    prompt + max_tokens over the context window (rejected), missing (the
    answer is bounded only by the window), 1,024 or more and 16 times the
    typical answer (``--typical-output-tokens``, 64 by default), or half the
    context window or more.

    ## Why it adds latency
    A run-away answer (a loop, a model that ignores "be brief") decodes until
    the cap: every extra token costs the measured per-token time. Servers that
    reserve KV-cache space for the whole cap (TGI's max_new_tokens budget)
    admit fewer requests at once, so others queue.

    ## Example
    ``max_tokens: 8192`` on a classification call whose answers are one word:
    a model that starts explaining itself can spend 8,000 × 20 ms = 160 s.

    ## Fix
    Set max_tokens a little above the longest answer you expect, per call site;
    add stop sequences for structured answers.

    ## Caveats
    A generous cap costs nothing while the model stops on its own; the impact
    is the worst case, hence low confidence.
    """

    id = "LD601"
    name = "max-tokens"
    title = "Answer cap (max_tokens) vs the answer and the window"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = (PROMPT_TOKENS, *TOKEN_COSTS)

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        typical = ctx.options.workload.typical_output_tokens
        costs = token_costs(ctx)
        counted = ctx.optional(PROMPT_TOKENS)
        window, window_source = known_window(ctx, counted)
        caps = [r.params.output_cap for r in requests.requests]
        missing = [r for r, c in zip(requests.requests, caps) if c is None]
        limit = max(MIN_FLAGGED, OVERSIZE_FACTOR * typical)
        if window:
            limit = min(limit, int(window * WINDOW_SHARE))
        large = [r for r, c in zip(requests.requests, caps) if c is not None and c >= limit]
        over = []
        if window and counted is not None:
            for r, c, n in zip(requests.requests, caps, counted.counts):
                if c is not None and n.tokens <= window < n.tokens + c:
                    over.append((r, n.tokens, c))
        if over and counted is not None and window:
            r, prompt, cap = max(over, key=lambda x: x[1] + x[2])
            yield Finding(
                Severity.CRITICAL, Confidence.HIGH if counted.method != "estimate" else Confidence.MEDIUM,
                f"Prompt + max_tokens exceed the window: {prompt:,} + {cap:,} > {window:,} tokens",
                f"{requests.describe([x[0] for x in over])}: vLLM and similar servers reject a request whose "
                "prompt plus max_tokens does not fit the context window (HTTP 400); others cut the answer short.",
                Fix("Lower max_tokens so prompt + max_tokens fits the window.",
                    (f"Set max_tokens to at most {window - prompt:,} for this prompt, or shorten the prompt.",)),
                impact_ms=None, impact_basis="the request fails: a retry costs a full round trip",
                frequency=Frequency.EVERY_REQUEST,
                evidence=(Evidence("prompt tokens", prompt, "tokens", counted.detail),
                          Evidence("max_tokens", cap, "tokens", r.source),
                          Evidence("context window", window, "tokens", window_source)),
                cause=Cause.OVERSIZED_PROMPT,
            )
        fix = Fix(
            "Cap the answer near the longest you expect.",
            ("Set max_tokens per call site from observed answer lengths (p99 plus a margin).",
             "Add stop sequences for structured or one-word answers."),
        )
        if large:
            cap = max(c for c in caps if c is not None)
            excess = cap - typical
            impact = costs.decode(excess)
            share = f", {cap / window:.0%} of the {window:,}-token window" if window else ""
            yield Finding(
                Severity.WARNING, Confidence.LOW,
                f"max_tokens {cap:,} is far above a typical {typical}-token answer{share}",
                f"{requests.describe(large)}: max_tokens "
                f"{distribution([c for c in caps if c is not None and c >= limit])}. A run-away answer decodes "
                f"{excess:,} tokens more than a typical one"
                + (f": about {impact:,.0f} ms." if impact is not None else "."),
                fix, frequency=Frequency.EVERY_REQUEST, impact_ms=impact,
                impact_basis=f"worst case: {excess:,} extra output tokens × {costs.decode_basis}",
                evidence=(Evidence("largest max_tokens", cap, "tokens", "--request"),
                          Evidence("typical answer", typical, "tokens", "--typical-output-tokens")),
                cause=Cause.LONG_OUTPUT,
            )
        if missing:
            bound = f"the {window:,}-token window" if window else "the context window"
            yield Finding(
                Severity.INFO, Confidence.LOW,
                "No max_tokens: the answer is bounded only by the context window",
                f"{requests.describe(missing)} set no max_tokens: a run-away answer can decode until it fills "
                f"{bound}.",
                fix, impact_ms=None, impact_basis="unbounded: depends on the model stopping on its own",
                frequency=Frequency.EVERY_REQUEST,
                evidence=(Evidence("requests without max_tokens", len(missing), "", "--request"),),
                cause=Cause.LONG_OUTPUT,
            )
