"""Probe ``prefill``: what one prompt token costs before the first answer token.

Two streamed chat requests with ``max_tokens=1``: a short prompt (~30 words)
and a long one (1,000 words, fewer when they would fill more than half of the
context window: counted by the server's tokenizer, probe ``prompt_size``, when
the window is small). The difference of their times to first token over the difference of
their prompt lengths is the prefill cost per prompt token, which the input and
parameter checks multiply by the tokens a request spends.

When the server's own clock timed the prompt of both requests (llama.cpp's
``timings.prompt_ms`` in the final stream chunk), the same difference by that
clock is kept too (`server_rate`): it excludes whatever the client's clock adds
in front of the server (a gateway that scans the body, a slow upload), so the
costs prefer it (`llmdoctor.analysis.costs`). A clock that cannot be true for the
client's own measurement of the request (`llmdoctor.analysis.clocks.judge`: negative,
longer than the client's wait for the first token) is set aside, and a prompt
clock that does not grow with the prompt is not used; the note says why.
Metrics histograms are not used here: they are means over scrapes around the
baseline's short prompts, not timings of these two requests.

Prompt tokens come from the answers' usage; streams without usage (llama-cpp-python) are
counted by the server's tokenizer when ``server_tokens`` found one (two more requests,
only with ``--request``), else by ``prompt_size``'s tokens a filler word, else at 1.3 tokens a
word. That guess matters: this filler costs ~2.4 tokens a word with the tiny llama.cpp tier's
tokenizer, and a rate per token over half the true tokens is twice the true rate.

A server that publishes no window may refuse the long prompt as larger than its window
(llama-cpp-python ``--n_ctx 512``: ~2,500 tokens against 512). That refusal is ours, not the
server failing: the window is read from its text (`llmdoctor.probes.window`: one more request,
non-streamed, when the refusal came as a cut stream), the refused requests are marked ``misfit``
(LD002 does not count them), and the long prompt is sent once more, resized to half the learned
window; the result keeps the window and the refusal it came from (LD101, LD601 judge the
application's requests against it).

Each prompt starts with a fresh random nonce so a prefix cache cannot serve it
(a prefix both share, the chat template's, cancels out in the difference).
The probe runs only after the baseline succeeded, so a dead endpoint costs no
extra requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmdoctor.analysis.clocks import judge
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.latency_samples import describe_failure
from llmdoctor.measurements.timing import ClockKind, RequestTiming
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, PROMPT_SIZE, SERVER_TOKENS
from llmdoctor.probes.prompt_size import filler_prompt, long_prompt_words
from llmdoctor.probes.window import send_fitting

__all__ = ["PrefillResult", "ServerRate", "prefill", "server_rate"]

SHORT_WORDS = 30
LONG_WORDS = 1000


@dataclass
class PrefillResult:
    """Time to first token of a short and a long prompt, and the cost per prompt token."""

    short_tokens: int
    long_tokens: int
    short_ttft_ms: float
    long_ttft_ms: float
    per_token_ms: float
    #: "usage" (the answers' prompt_tokens), "server tokenizer (…)" (the prompts counted by the tokenizer
    #: ``server_tokens`` found), "server tokenizer's rate (…)" (``prompt_size``'s tokens a filler word) or
    #: "estimate (1.3 tokens a word)".
    tokens_source: str
    #: The worst scheduling lag of llmdoctor while the two requests ran (ms; None: not measured).
    lag_ms: float | None = None
    #: The same cost by the server's own prompt clock (None: no usable server clock; `server_note` says why).
    server_per_token_ms: float | None = None
    #: That clock's field (``timings.prompt_ms``) and origin (``server_body``, ``server_header``).
    server_source: str = ""
    server_clock: str = ""
    server_note: str = ""
    #: The context window the server's refusal of our long prompt taught (None: it fitted the first time),
    #: and that refusal, quoted (`llmdoctor.probes.window`).
    window: int | None = None
    window_source: str = ""

    @property
    def reliable(self) -> bool:
        """False when the long prompt was not measurably slower (noise dominates)."""
        return self.long_ttft_ms > self.short_ttft_ms and self.per_token_ms > 0


@dataclass(frozen=True)
class ServerRate:
    """The prefill cost per prompt token by the server's own clock, or why there is none."""

    per_token_ms: float | None
    source: str = ""
    clock: str = ""
    note: str = ""


def server_rate(short: RequestTiming, long: RequestTiming, short_tokens: int, long_tokens: int) -> ServerRate:
    """(long prompt's server prefill − short's) / (long_tokens − short_tokens), when the server timed both.

    Only a request's own clocks count (its headers and body, judged against the client's clock of the
    same request); a clock set aside for one of them leaves no rate, with the reason.
    """
    clocks, aside = [], []
    for t in (short, long):
        cs = judge(t)
        clocks.append(cs.own(ClockKind.PREFILL))
        own = {c.source for c in t.server_clocks if c.kind == ClockKind.PREFILL}
        aside += [why for why in cs.set_aside if any(why.startswith(source) for source in own)]
    if aside:
        return ServerRate(None, note="; ".join(aside))
    a, b = clocks
    if a is None or b is None:
        return ServerRate(None, note="no server clock timed the prompt of these requests")
    if long_tokens <= short_tokens or b.ms <= a.ms:
        return ServerRate(None, a.source, a.origin,
                          f"the server's {a.source} did not grow with the prompt ({a.ms:,.1f} ms for "
                          f"{short_tokens:,} tokens, {b.ms:,.1f} ms for {long_tokens:,}): not used")
    return ServerRate((b.ms - a.ms) / (long_tokens - short_tokens), a.source, a.origin)


def _filler_words(words: int) -> int:
    """Filler words of a prompt of about `words` words in all (the instruction counts 12)."""
    return max(1, words - 12)


def _prompt(words: int, rng: random.Random) -> str:
    """A prompt of about `words` words in all."""
    return filler_prompt(_filler_words(words), rng)


def _count_prompts(ctx: Context, prompts: list[str], words: tuple[int, int], model: str | None,
                   ) -> tuple[int, int, str]:
    """Tokens of the two prompts when the answers reported none: the server's tokenizer when
    `server_tokens` found it (2 requests; 4 for llama.cpp), else its rate per filler word when
    `prompt_size` measured one (no request), else 1.3 tokens a word."""
    from llmdoctor.probes.tokens import count_with

    found = ctx.optional(SERVER_TOKENS)
    if found is not None:
        counted = count_with(ctx, found, [[{"role": "user", "content": p}] for p in prompts], model)
        if counted is not None:
            (short_tokens, long_tokens), how = counted
            if long_tokens > short_tokens > 0:
                return short_tokens, long_tokens, f"server tokenizer ({how})"
    size = ctx.optional(PROMPT_SIZE)
    if size is not None:
        short_tokens, long_tokens = (size.tokens_for(_filler_words(n)) for n in words)
        return short_tokens, long_tokens, (f"server tokenizer's rate ({size.tokens_per_word:.2f} tokens a filler "
                                           f"word, {size.counted_by})")
    # Common English words are about 1.3 tokens each with BPE vocabularies.
    return round(words[0] * 1.3), round(words[1] * 1.3), "estimate (1.3 tokens a word)"


def prefill(ctx: Context) -> PrefillResult:
    """Measure the prefill cost per prompt token with one short and one long prompt."""
    if ctx.optional(BASELINE) is None:
        raise ProbeUnavailable("no successful baseline request: not measuring prefill")
    info = ctx.optional(DISCOVERY)
    model = getattr(info, "model", None)
    long_words = long_prompt_words(ctx, LONG_WORDS, min_words=SHORT_WORDS * 2)
    rng = random.Random()
    extra = {"model": model} if model else None
    short_prompt = _prompt(SHORT_WORDS, rng)
    short = ctx.client.chat(short_prompt, max_tokens=1, stream=True, extra=extra)
    if not short.ok or short.ttft_ms is None:
        raise ProbeUnavailable(f"prefill request ({SHORT_WORDS} words) failed: {describe_failure(short)}")
    sent = send_fitting(ctx, long_words, lambda words: _prompt(words, rng), "prefill", extra,
                        min_words=SHORT_WORDS * 2)
    long, long_words = sent.timing, sent.words
    if not long.ok or long.ttft_ms is None:
        learned = f" (after its refusal taught a {sent.learned.tokens:,}-token window)" if sent.learned else ""
        raise ProbeUnavailable(f"prefill request ({long_words} words) failed{learned}: {describe_failure(long)}")
    timings, prompts = [short, long], [short_prompt, sent.prompt]
    if short.prompt_tokens and long.prompt_tokens and long.prompt_tokens > short.prompt_tokens:
        short_tokens, long_tokens, source = short.prompt_tokens, long.prompt_tokens, "usage"
    else:
        short_tokens, long_tokens, source = _count_prompts(ctx, prompts, (SHORT_WORDS, long_words), model)
    assert short.ttft_ms is not None and long.ttft_ms is not None
    per_token = max(0.0, (long.ttft_ms - short.ttft_ms) / (long_tokens - short_tokens))
    lags = [t.client_lag_ms for t in timings if t.client_lag_ms is not None]
    rate = server_rate(short, long, short_tokens, long_tokens)
    return PrefillResult(short_tokens, long_tokens, short.ttft_ms, long.ttft_ms, per_token, source,
                         lag_ms=max(lags) if lags else None, server_per_token_ms=rate.per_token_ms,
                         server_source=rate.source, server_clock=rate.clock, server_note=rate.note,
                         window=sent.learned.tokens if sent.learned else None,
                         window_source=sent.learned.source if sent.learned else "")
