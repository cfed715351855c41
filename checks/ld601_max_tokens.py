"""LD601: max_tokens far larger than the answer needs, missing, or larger than the window."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, TokenCosts, distribution, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import BASELINE, PROMPT_TOKENS, REQUESTS
from llmdoctor.probes.requests import RequestSet
from llmdoctor.probes.tokens import PromptTokens, known_window

OVERSIZE_FACTOR = 16  # a cap this many times the typical answer is no cap at all
MIN_FLAGGED = 1024
WINDOW_SHARE = 0.5
#: The answer a request's cap allows is its own cost when it is this many times the fixed floor (the
#: median "Say ok." request, 8 tokens) and at least `ANSWER_MIN_MS`: a 16-token cap costs about 2 floors.
ANSWER_FLOORS = 4.0
ANSWER_MIN_MS = 250.0


class MaxTokens(Check):
    """max_tokens: the cap on the answer, compared with a typical answer and the window.

    ## What it checks
    What the application's own request costs (issue 25): its answer cap × the
    measured decode rate (the output-length sweep's fit), beside its prompt
    tokens × the measured prefill rate and the fixed floor (the median "Say
    ok." request); it fires when the answer the cap allows costs 4 floors or
    more (and 250 ms or more), saying whether a stop sequence can end it
    sooner and whether streaming is off (the user then waits for all of it).
    This is the user's cost, ranked by it, above findings measured only on
    the doctor's own probes. Also, the ``max_tokens`` / ``max_completion_tokens`` of every ``--request`` body:
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
    is the worst case, hence low confidence (medium for the request's own
    cost when nothing but the cap ends its answer: no stop sequence).
    """

    id = "LD601"
    name = "max-tokens"
    title = "Answer cap (max_tokens) vs the answer and the window"
    category = Category.PARAMS
    requires = (REQUESTS,)
    optional = (PROMPT_TOKENS, BASELINE, *TOKEN_COSTS)

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
        own = _own_cost(ctx, requests, counted, costs, fix)
        if own is not None:
            yield own
        if large and own is None:
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


def _own_cost(ctx: Context, requests: RequestSet, counted: PromptTokens | None, costs: TokenCosts,
              fix: Fix) -> Finding | None:
    """The request whose cap lets its answer cost the most, priced at the measured rates against the floor."""
    base = ctx.optional(BASELINE)
    floor = base.total_p50_ms if base is not None else None
    priced: list[tuple[float, int]] = []
    for i, r in enumerate(requests.requests):
        ms = costs.decode(r.params.output_cap) if r.params.output_cap else None
        if ms is not None:
            priced.append((ms, i))
    if not priced or floor is None:
        return None
    answer_ms, i = max(priced)
    if answer_ms < max(ANSWER_MIN_MS, ANSWER_FLOORS * floor):
        return None
    r = requests.requests[i]
    cap = r.params.output_cap or 0
    prompt = counted.counts[i].tokens if counted is not None and len(counted.counts) > i else None
    prompt_ms = costs.prefill(prompt) if prompt is not None else None
    stream_off = r.params.stream is not True
    parts = [f"{cap:,} output tokens × {costs.decode_ms or 0:.1f} ms = {answer_ms:,.0f} ms"]
    if prompt_ms is not None:
        parts.append(f"{prompt:,} prompt tokens × {costs.prefill_ms or 0:.2f} ms = {prompt_ms:,.0f} ms")
    parts.append(f"the fixed floor {floor:,.0f} ms")
    ends = ("a stop sequence may end it sooner" if r.params.stop else
            "no stop sequence: only the cap or the model's own end of answer stops it")
    steps = [f"Set max_tokens to the longest answer this call needs (each token costs {costs.decode_ms or 0:.1f} ms)."]
    if not r.params.stop:
        steps.append("Add stop sequences that end the answer where the application stops reading.")
    if stream_off:
        steps.append("Stream the answer (stream: true), so the user reads the first tokens while the rest decode.")
    evidence = [Evidence("max_tokens", cap, "tokens", r.source),
                Evidence("decode per output token", round(costs.decode_ms or 0.0, 3), "ms", costs.decode_basis),
                Evidence("answer at the cap", round(answer_ms, 1), "ms", "max_tokens × decode per output token"),
                Evidence("fixed floor (median 'Say ok.' request)", round(floor, 1), "ms", "baseline"),
                Evidence("stop sequences", ", ".join(r.params.stop) or "none", "", r.source),
                Evidence("streamed", "no" if stream_off else "yes", "", r.source)]
    if prompt_ms is not None:
        evidence.append(Evidence("prompt at the measured prefill rate", round(prompt_ms, 1), "ms", costs.prefill_basis))
    return Finding(
        Severity.WARNING, Confidence.LOW if r.params.stop else Confidence.MEDIUM,
        f"Your request's answer can cost {answer_ms / 1000:,.1f} s: max_tokens {cap:,} at "
        f"{costs.decode_ms or 0:.1f} ms an output token",
        f"{requests.describe([r])}: {'; '.join(parts)}. The answer the cap allows is "
        f"{answer_ms / floor:,.0f}× the fixed floor; {ends}"
        + ("; streaming is off, so nothing arrives before the whole answer." if stream_off else "."),
        Fix(fix.summary, tuple(steps)), impact_ms=round(answer_ms, 1),
        impact_basis=f"max_tokens {cap:,} × {costs.decode_basis}", evidence=tuple(evidence),
        frequency=Frequency.EVERY_REQUEST, cause=Cause.LONG_OUTPUT,
    )
