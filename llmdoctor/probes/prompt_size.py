"""Probe ``prompt_size``: how many filler words fit the model's window, by the server's own tokenizer.

The long prompts of the prefill and repeated-prompt probes are filler words (`filler_prompt`).
Tokens a word differ severalfold between tokenizers: common BPE vocabularies spend ~1.3 tokens on
an English word; the small byte-level BPE of the vLLM tier spends 3.06 on these filler words (vLLM
0.32 ``/tokenize``, measured by tests/integration/test_vllm.py), plus 50 for the nonce, the
instruction and the chat template. The old 512-word prompt was then ~1,600 tokens: over a
1,024-token window, and vLLM answered HTTP 400 (issue 16).

When the window is small enough for that to matter (under `SIZE_BELOW_TOKENS`), this probe sends
two filler prompts, with no filler words and with `SAMPLE_WORDS`, to the server's tokenizer — vLLM
``POST /tokenize`` with the chat messages (the template applied), else llama-cpp-python, llama.cpp
or TGI (`llmdoctor.probes.tokens.count_messages`) — and keeps the fixed part (nonce, instruction,
template) and the tokens a filler word costs. Above the threshold, or with no window known, it
sends nothing and is unavailable, saying why; the prompts keep their default sizes then.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.probes.catalog import CONTEXT_WINDOW, DISCOVERY, PROMPT_SIZE

__all__ = [
    "LONG_SHARE", "SAMPLE_WORDS", "SIZED_MARGIN", "SIZE_BELOW_TOKENS", "WORST_TOKENS_PER_WORD", "PromptSize",
    "filler_prompt", "long_prompt_words", "prompt_size", "window_of",
]

#: The share of the context window a long probe prompt may fill.
LONG_SHARE = 0.5
#: Filler words in the sample sent to the tokenizer.
SAMPLE_WORDS = 200
#: The share of that budget a sized prompt aims at: random filler words (and the random nonce) do not
#: all cost the sample's mean; on the real vLLM tier a prompt sized for 512 tokens at the sample's
#: 3.06 tokens a word counted 529 (CI, 2026-12-01), about one standard deviation of the two samples.
SIZED_MARGIN = 0.9
#: The tokens a word assumed without the server's count: above the vLLM tier's 3.06.
WORST_TOKENS_PER_WORD = 4.0
#: Windows from this size up hold the longest probe prompt (1,000 words, ~50 fixed tokens) at the
#: worst rate: no sizing.
SIZE_BELOW_TOKENS = 4096

_WORDS = (
    "river stone garden window paper light music forest winter summer table simple yellow "
    "orange market bridge silver planet letter number morning evening doctor teacher window "
    "country village ocean mountain valley island harbor castle engine rocket signal pocket"
).split()


def filler_prompt(body_words: int, rng: random.Random) -> str:
    """A prompt of `body_words` filler words after a fresh random prefix (no prefix-cache hit) and an
    instruction to answer "ok" (so the answer stays short whatever the length)."""
    nonce = f"{rng.getrandbits(64):016x}"
    body = " ".join(rng.choice(_WORDS) for _ in range(body_words))
    return f"[{nonce}] Ignore the following words and reply with ok. {body}"


@dataclass
class PromptSize:
    """The window, and the server's count of a filler prompt with no filler words and with `sample_words`."""

    window: int
    window_source: str
    sample_words: int
    #: Tokens of the prompt with no filler words (the nonce, the instruction, the chat template).
    fixed_tokens: int
    #: Tokens of the prompt with `sample_words` filler words.
    sample_tokens: int
    counted_by: str

    @property
    def tokens_per_word(self) -> float:
        """Tokens a filler word costs by the server's tokenizer."""
        return max(0.1, (self.sample_tokens - self.fixed_tokens) / self.sample_words)

    def tokens_for(self, filler_words: int) -> int:
        """Tokens of a filler prompt of `filler_words` filler words at this rate (nonce, instruction, template)."""
        return round(self.fixed_tokens + filler_words * self.tokens_per_word)

    def words_for(self, tokens: int) -> int:
        """Filler words of a prompt (nonce, instruction and template included) that stays within `tokens` tokens."""
        return max(1, math.floor((tokens - self.fixed_tokens) / self.tokens_per_word))


def window_of(ctx: Context) -> tuple[int | None, str]:
    """The context window from ``--context-window``, ``/v1/models`` or llama.cpp's ``/props`` (the
    ``context_window`` probe: ``default_generation_settings.n_ctx``); None: not known, and a long probe
    prompt may then be refused, which teaches the window (`llmdoctor.probes.window`)."""
    if ctx.options.workload.context_window:
        return ctx.options.workload.context_window, "--context-window"
    info = ctx.optional(DISCOVERY)
    window = getattr(info, "context_window", None)
    if isinstance(window, int) and window > 0:
        return window, "/v1/models max_model_len"
    stated = ctx.optional(CONTEXT_WINDOW)
    return (stated.tokens, stated.source) if stated is not None else (None, "")


def prompt_size(ctx: Context) -> PromptSize:
    """Count two filler prompts with the server's tokenizer when the window is small (at most 6 requests)."""
    from llmdoctor.probes.tokens import count_messages

    window, source = window_of(ctx)
    if window is None:
        raise ProbeUnavailable("the context window is not known: probe prompts keep their default sizes")
    if window >= SIZE_BELOW_TOKENS:
        raise ProbeUnavailable(f"the {window:,}-token window holds every probe prompt: nothing to size")
    info = ctx.optional(DISCOVERY)
    model = getattr(info, "model", None) or (ctx.target.model if ctx.target else None)
    rng = random.Random()
    chats = [[{"role": "user", "content": filler_prompt(n, rng)}] for n in (0, SAMPLE_WORDS)]
    counted = count_messages(ctx, chats, model)
    if counted is None:
        raise ProbeUnavailable("the server offers no tokenizer endpoint: probe prompts sized for "
                               f"{WORST_TOKENS_PER_WORD:g} tokens a word")
    (fixed, sample), how = counted
    if not 0 < fixed < sample:
        raise ProbeUnavailable(f"{how} counted {fixed} and {sample} tokens for prompts of 0 and "
                               f"{SAMPLE_WORDS} filler words")
    return PromptSize(window, source, SAMPLE_WORDS, fixed, sample, how)


def long_prompt_words(ctx: Context, words: int, *, share: float = LONG_SHARE, min_words: int = 60) -> int:
    """Words (the instruction's 12 included) of a long probe prompt: `words`, fewer if they would not fit
    `share` of the window — counted by the server's tokenizer (``prompt_size``) when the window is small
    (aiming at `SIZED_MARGIN` of that share, as random words vary),
    else assuming `WORST_TOKENS_PER_WORD` (a window of `SIZE_BELOW_TOKENS` or more holds them as they are).
    At least `min_words`."""
    size = ctx.optional(PROMPT_SIZE)
    if size is not None:
        fits = size.words_for(int(size.window * share * SIZED_MARGIN)) + 12  # callers count the instruction as 12
    else:
        window, _ = window_of(ctx)
        if window is None or window >= SIZE_BELOW_TOKENS:
            return words
        fits = int(window * share / WORST_TOKENS_PER_WORD)
    return max(min_words, min(words, fits))
