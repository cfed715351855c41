"""A context window learned from the server's refusal of one of our own probe prompts.

Many servers publish no window (llama-cpp-python 0.3.36 has no ``/props`` and no
``max_model_len``), so a long probe prompt can be larger than the model's window. The server
then refuses it, and that refusal is the doctor's own doing, never the server failing: the
probe that sent it marks it (`RequestTiming.misfit`), reads the window from the refusal's
text, and resizes its prompt to fit (`refit_words`).

The wordings read (`parse_refusal`), each from the server's own source or measured here:

- llama-cpp-python 0.3.36 (measured, non-streamed, HTTP 400) and vLLM up to 0.5
  (``vllm/entrypoints/openai/serving_engine.py``): "This model's maximum context length is 512
  tokens. However, you requested 837 tokens (821 in the messages, 16 in the completion)."
- vLLM 0.32 (``vllm/renderers/params.py``, read in the CPU tier's venv): "This model's maximum
  context length is 1024 tokens. However, your prompt contains 1300 input tokens, which exceeds
  this limit even without any output tokens."; vLLM 0.6-0.1x "… your request has 1300 input tokens".
- llama.cpp server (``tools/server``, ``exceed_context_size_error``): "request (4476 tokens)
  exceeds the available context size (4096 tokens), try increasing it", with ``n_prompt_tokens``
  and ``n_ctx`` in the error object.
- TGI (``router/src/validation.rs``, ``MaxTotalTokens``): "Input validation error: `inputs` tokens +
  `max_new_tokens` must be <= 4096. Given: 4031 `inputs` tokens and 200 `max_new_tokens`" (HTTP 422).
- SGLang (``python/sglang/srt/managers/tokenizer_manager.py``): "The input (1500 tokens) is longer
  than the model's context length (1024 tokens)."; and "Requested token count exceeds the model's
  maximum context length of 1024 tokens. You requested a total of … tokens: 900 tokens from the
  input messages and …".
- Ollama truncates an over-long prompt to its ``num_ctx`` instead of refusing it: nothing to read.

llama-cpp-python refuses a *streamed* over-long request differently: HTTP 200, then a stream that
ends before its first event (the exception is raised inside the stream). `learn_window` then asks
once more without streaming, with ``max_tokens`` 1, to read the refusal's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.measurements.timing import RequestTiming

__all__ = ["LearnedWindow", "Refusal", "Sent", "learn_window", "parse_refusal", "refit_words", "send_fitting"]

_N = r"(\d[\d,]*)"
#: (window pattern, prompt-tokens pattern or None); the first that matches the window wins.
_WINDOW_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (rf"maximum context length (?:is|of) {_N}", None),                       # vLLM, llama-cpp-python, SGLang
    (rf"exceeds the available context size \({_N} tokens\)", rf"request \({_N} tokens\)"),   # llama.cpp
    (rf'"?n_ctx"?\s*[:=]\s*{_N}', rf'"?n_prompt_tokens"?\s*[:=]\s*{_N}'),      # llama.cpp's error fields
    (rf"`inputs` tokens \+ `max_new_tokens` must be <= {_N}", rf"Given: {_N} `inputs` tokens"),  # TGI
    (rf"longer than the model's context length \({_N} tokens\)", rf"The input \({_N} tokens\)"),  # SGLang
)
#: Our prompt's tokens as the refusal counts them (the first that matches).
_PROMPT_PATTERNS = (
    rf"\({_N} in the messages",                      # llama-cpp-python, vLLM ≤ 0.5
    rf"your prompt contains (?:at least )?{_N} input tokens",   # vLLM 0.32
    rf"your request has {_N} input tokens",          # vLLM 0.6–0.1x
    rf"{_N} tokens from the input",                  # SGLang
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass(frozen=True)
class Refusal:
    """What a context-length refusal says: the window, and the prompt's tokens when it says them."""

    window: int
    prompt_tokens: int | None = None


def parse_refusal(text: str) -> Refusal | None:
    """The window (and the refused prompt's tokens) stated by a context-length refusal; None otherwise."""
    for window_pattern, prompt_pattern in _WINDOW_PATTERNS:
        found = re.search(window_pattern, text, re.IGNORECASE)
        if found is None:
            continue
        window = _int(found.group(1))
        if window <= 0:
            continue
        prompt = re.search(prompt_pattern, text, re.IGNORECASE) if prompt_pattern else None
        if prompt is None:
            prompt = next((m for m in (re.search(p, text, re.IGNORECASE) for p in _PROMPT_PATTERNS) if m), None)
        return Refusal(window, _int(prompt.group(1)) if prompt else None)
    return None


@dataclass(frozen=True)
class LearnedWindow:
    """A context window read from the server's refusal of our own prompt."""

    tokens: int
    #: Where it was read: "the server's refusal of the prefill probe's 1,000-word prompt (HTTP 400: '…')".
    source: str
    #: Our prompt's tokens as the refusal counted them (None: the refusal did not say).
    prompt_tokens: int | None = None
    #: The words of the refused prompt.
    prompt_words: int = 0


def _refusal_of(timing: RequestTiming) -> Refusal | None:
    if timing.status is None or timing.status < 400 or timing.status >= 500:
        return None
    return parse_refusal(timing.error_detail)


def learn_window(ctx: Context, failed: RequestTiming, prompt: str, words: int, probe: str,
                 extra: dict[str, Any] | None) -> LearnedWindow | None:
    """The window, when `failed` (our chat request of `prompt`, `words` words) did not fit it.

    A refusal with its text is read at once; a failure without one (llama-cpp-python's cut stream)
    is asked again once, without streaming and with ``max_tokens`` 1. The refused requests are
    marked `misfit` (our probe did not fit: not the server failing). None: not a window refusal.
    """
    from llmdoctor.measurements.timing import FailedBy

    refusal = _refusal_of(failed)
    read_from = failed
    history = ctx.client.history
    since = len(history)
    if refusal is None and failed.status is not None and 200 <= failed.status < 300:
        again = ctx.client.chat(prompt, max_tokens=1, stream=False, extra=extra)
        refusal = _refusal_of(again)
        read_from = again
    if refusal is None:
        return None
    quote = read_from.error_detail[:160]
    why = f"our {probe} prompt ({words:,} words) did not fit the {refusal.window:,}-token window"
    # The refused requests, and any attempt in between that the refusal broke (the client no longer reuses
    # the connection of a broken stream, which llama-cpp-python resets: none is expected).
    for t in [failed, *history[since:], read_from]:
        if not t.ok:
            t.misfit, t.failed_by = why, FailedBy.CLIENT  # our probe's misfit: this client's failure
    return LearnedWindow(refusal.window, f"the server's refusal of the {probe} probe's {words:,}-word prompt "
                         f"({quote!r})", refusal.prompt_tokens, words)


def refit_words(learned: LearnedWindow, share: float, margin: float, worst_tokens_per_word: float) -> int:
    """Words of a prompt that fills `share` of the learned window (aiming at `margin` of it): at the
    refused prompt's own tokens a word when the refusal counted them, else at the worst rate assumed."""
    per_word = worst_tokens_per_word
    if learned.prompt_tokens and learned.prompt_words:
        per_word = learned.prompt_tokens / learned.prompt_words
    return max(1, int(learned.tokens * share * margin / per_word))


@dataclass
class Sent:
    """A long probe prompt as finally sent: its request, words and text, and the window its refusal taught."""

    timing: RequestTiming
    words: int
    prompt: str
    learned: LearnedWindow | None = None


def send_fitting(ctx: Context, words: int, make_prompt: Callable[[int], str], probe: str,
                 extra: dict[str, Any] | None, *, min_words: int) -> Sent:
    """Send a streamed ``max_tokens=1`` chat of ``make_prompt(words)``; when the server refuses it as
    larger than its window, learn the window (`learn_window`: at most 1 more request) and send once
    more a prompt resized to `LONG_SHARE` of it (at least `min_words`). At most 3 requests."""
    from llmdoctor.probes.prompt_size import LONG_SHARE, SIZED_MARGIN, WORST_TOKENS_PER_WORD

    prompt = make_prompt(words)
    timing = ctx.client.chat(prompt, max_tokens=1, stream=True, extra=extra)
    if timing.ok and timing.ttft_ms is not None:
        return Sent(timing, words, prompt)
    learned = learn_window(ctx, timing, prompt, words, probe, extra)
    if learned is None:
        return Sent(timing, words, prompt)
    fits = max(min_words, refit_words(learned, LONG_SHARE, SIZED_MARGIN, WORST_TOKENS_PER_WORD))
    if fits >= words:  # the refusal leaves no smaller prompt to try
        return Sent(timing, words, prompt, learned)
    prompt = make_prompt(fits)
    return Sent(ctx.client.chat(prompt, max_tokens=1, stream=True, extra=extra), fits, prompt, learned)
