"""LD101: prompt token count against the context window, and the prefill time it costs."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, distribution, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import PROMPT_TOKENS, REQUESTS
from llmdoctor.probes.requests import RequestSet
from llmdoctor.probes.tokens import known_window

NEAR_SHARE = 0.8  # of the window: little room left for the answer
LARGE_SHARE = 0.5
LARGE_TOKENS = 8000  # without a known window, a prompt this long is worth a look
SLOW_PREFILL_MS = 500.0


class PromptTokenCount(Check):
    """Prompt size: tokens per request, their share of the context window, their prefill time.

    ## What it checks
    Counts the prompt tokens of every ``--request`` body with the best source
    available (the server's own ``/tokenize`` with its chat template, else a
    local tokenizer given with ``--tokenizer``, else characters / 4 with a
    stated band) and compares them with the context window (``/v1/models``
    ``max_model_len``, llama.cpp ``/props`` ``n_ctx`` or ``--context-window``; where
    the server states none, the window its refusal of our own long prefill prompt
    taught, which the evidence quotes).
    Fires when a prompt exceeds the window, fills more than 80% of it, or takes
    more than half of it or 500 ms of prefill (prompt + ``max_tokens`` over the
    window is LD601's).

    ## Why it adds latency
    The first token needs one forward pass over the whole prompt (prefill), so
    time to first token grows with prompt length. A prompt near the window is
    also truncated or rejected by the server, and leaves little room to answer.

    ## Example
    A RAG request that pastes 30 retrieved pages: 27,000 tokens in a 32,768
    window; at 0.15 ms a prompt token it spends 4 s before the first token.

    ## Fix
    Send less: retrieve fewer, shorter chunks; summarise or drop old turns of
    the conversation; keep the system prompt short and stable so a prefix cache
    can reuse it.

    ## Caveats
    Estimates without a tokenizer can be off by a factor of 1.5 either way
    (code and non-English text use more tokens a character). Prefix caching
    makes a repeated prefix cheaper than the measured cost per token.
    The cost per prompt token is the server's own when its clock timed the
    probe's short and long prompt (llama.cpp ``timings.prompt_ms``); otherwise
    it is inferred from the client's times to first token, which also count
    whatever in front of the server grows with the prompt (a gateway that
    scans the body, a slow upload). The evidence names which.
    """

    id = "LD101"
    name = "prompt-tokens"
    title = "Prompt token count vs context window"
    category = Category.INPUT
    requires = (REQUESTS, PROMPT_TOKENS)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        counted = ctx.get(PROMPT_TOKENS)
        costs = token_costs(ctx)
        window, window_source = known_window(ctx, counted)
        confidence = Confidence.LOW if counted.method == "estimate" else Confidence.HIGH
        tokens = [c.tokens for c in counted.counts]
        evidence = [
            Evidence("prompt tokens", distribution(tokens, "tokens"), "", counted.detail),
            Evidence("counted by", counted.method, "", counted.detail),
        ]
        if counted.method == "estimate":
            lows = [c.low for c in counted.counts]
            highs = [c.high for c in counted.counts]
            evidence.append(Evidence("estimate band (largest prompt)", f"{max(lows):,}–{max(highs):,}", "tokens"))
        if window:
            evidence.append(Evidence("context window", window, "tokens", window_source))
        if costs.prefill_ms is not None:
            evidence.append(Evidence(f"prefill per prompt token ({costs.prefill_clock} clock)",
                                     round(costs.prefill_ms, 3), "ms", costs.prefill_basis))
        for note in counted.notes:
            evidence.append(Evidence("note", note))

        over: list[int] = []
        near: list[int] = []
        large: list[int] = []
        for i, count in enumerate(counted.counts):
            if not window:
                if count.tokens >= LARGE_TOKENS:
                    large.append(i)
                continue
            if count.tokens > window:
                over.append(i)
            elif count.tokens >= NEAR_SHARE * window:
                near.append(i)
            elif count.tokens >= LARGE_SHARE * window:
                large.append(i)
        largest = max(tokens)
        prefill_ms = costs.prefill(largest)
        basis = f"{largest:,} prompt tokens × {costs.prefill_basis}"
        fix = Fix(
            "Send fewer prompt tokens.",
            (
                "Retrieve fewer or shorter chunks; trim or summarise old conversation turns.",
                "Keep a short, stable system prompt first so the server's prefix cache can reuse it.",
                "Set max_tokens so prompt + max_tokens fits the window.",
            ),
        )
        if over:
            worst = max(tokens[i] for i in over)
            yield Finding(
                Severity.CRITICAL, confidence,
                f"Prompt over the context window: {worst:,} tokens > {window:,}",
                f"{self._which(requests, over)}: the prompt exceeds the model's {window:,}-token window; "
                "the server rejects such requests (HTTP 400) or truncates the prompt.",
                fix, impact_ms=prefill_ms, impact_basis=basis, evidence=tuple(evidence),
                frequency=Frequency.EVERY_REQUEST,
                cause=Cause.OVERSIZED_PROMPT,
            )
        if near:
            worst = max(tokens[i] for i in near)
            yield Finding(
                Severity.WARNING, confidence,
                f"Prompt near the context window: {worst:,} of {window:,} tokens",
                f"{self._which(requests, near)}: the prompt fills more than {NEAR_SHARE:.0%} of the window, "
                "leaving little room for the answer; a little more history will be rejected or truncated.",
                fix, impact_ms=prefill_ms, impact_basis=basis, evidence=tuple(evidence),
                frequency=Frequency.EVERY_REQUEST,
                cause=Cause.OVERSIZED_PROMPT,
            )
        slow = prefill_ms is not None and prefill_ms >= SLOW_PREFILL_MS
        if large or (slow and not over and not near):
            subject = large or [tokens.index(largest)]
            share = f" ({largest / window:.0%} of the window)" if window else ""
            cost = f"; prefill costs about {prefill_ms:,.0f} ms before the first token" if prefill_ms else ""
            yield Finding(
                Severity.WARNING if slow else Severity.INFO, confidence,
                f"Large prompt: {largest:,} tokens{share}",
                f"{self._which(requests, subject)}: a large prompt{cost}."
                + ("" if prefill_ms is not None else f" ({costs.prefill_basis}.)"),
                fix, impact_ms=prefill_ms, impact_basis=basis, evidence=tuple(evidence),
                frequency=Frequency.EVERY_REQUEST,
                cause=Cause.LONG_PREFILL,
            )

    @staticmethod
    def _which(requests: RequestSet, indexes: list[int]) -> str:
        return requests.describe([requests.requests[i] for i in indexes])
