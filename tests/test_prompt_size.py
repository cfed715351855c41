"""Probe prompts sized to the window with the server's own tokenizer (issue 16 item 3).

vLLM 0.32 serving the tiny test model (fixtures/vllm/README.md: ~2 tokens a word, a 1,024-token
window) answered the 512-word long prefill prompt with HTTP 400. Here a real HTTP server — the
simulator, whose vLLM-shaped ``POST /tokenize`` and 400 on an over-window prompt follow
``vllm/entrypoints/serve/tokenize/protocol.py`` and ``vllm/entrypoints/openai/serving_engine.py`` —
with a small window; the control is a window that holds every probe prompt, where nothing is tokenized.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes.catalog import PREFILL, PROMPT_SIZE, REPEAT_PROMPT
from llmdoctor.probes.prompt_size import SAMPLE_WORDS, PromptSize
from llmdoctor.sim import LatencyProfile, SimServer
from llmdoctor.target import Target

TOKENIZE = "/tokenize"


def _profile(window: int) -> LatencyProfile:
    return LatencyProfile(name="small-window", fixed_ms=2, per_prompt_token_ms=0.01, per_output_token_ms=0.5,
                          context_window=window)


@pytest.fixture
def small_window() -> Iterator[SimServer]:
    with SimServer(_profile(300)) as server:
        yield server


def _paths(ctx: Context) -> list[str]:
    return [t.path for t in ctx.client.history]


def test_words_for_stays_inside_the_window_at_the_real_vllm_tier_rate() -> None:
    """The tier's tokenizer: ~2 tokens a word, plus ~40 of instruction, nonce and chat template."""
    size = PromptSize(window=1024, window_source="/v1/models max_model_len", sample_words=SAMPLE_WORDS,
                      fixed_tokens=40, sample_tokens=2 * SAMPLE_WORDS + 40, counted_by="vllm /tokenize (chat template)")
    words = size.words_for(512)
    assert 40 + 2 * words <= 512 < 40 + 2 * (words + 1)  # the most filler words that fit half the window


def test_a_small_window_is_sized_with_two_tokenize_requests_and_the_long_prompts_fit(small_window: SimServer) -> None:
    ctx = Context(target=Target(base_url=small_window.base_url), options=Options.of(samples=2, max_requests=40))
    prefill = ctx.get(PREFILL)
    size = ctx.get(PROMPT_SIZE)
    assert size.window == 300 and size.counted_by.startswith("vllm /tokenize")
    assert _paths(ctx).count(TOKENIZE) == 2
    # The server's own count of the long prompt (usage) fits half of the window, and it did answer.
    assert prefill.tokens_source == "usage" and prefill.long_tokens <= 150 < 2 * prefill.long_tokens
    repeat = ctx.get(REPEAT_PROMPT)
    assert repeat.first.ok and repeat.first.prompt_tokens is not None and repeat.first.prompt_tokens <= 150
    assert _paths(ctx).count(TOKENIZE) == 2  # measured once for both probes


def test_a_window_that_holds_every_prompt_is_not_tokenized() -> None:
    """The control: 4,096 tokens hold the 1,000-word prompt at any tokenizer; no request, the default sizes."""
    with SimServer(_profile(4096)) as server:
        ctx = Context(target=Target(base_url=server.base_url), options=Options.of(samples=2, max_requests=40))
        prefill = ctx.get(PREFILL)
        assert ctx.optional(PROMPT_SIZE) is None
        reason = next(s.reason for s in ctx.statuses() if s.name == "prompt_size")
    assert "holds every probe prompt" in reason
    assert TOKENIZE not in _paths(ctx)
    assert prefill.long_tokens > 1000  # 1,000 words, as before


def test_a_window_stated_only_by_llamacpp_props_sizes_the_probe_prompts_before_any_refusal() -> None:
    """llama.cpp's server states its window in ``GET /props`` (``default_generation_settings.n_ctx``,
    ``tools/server/server.cpp``), not in ``/v1/models``: the probe prompts are sized to it up front, so no
    long prompt is refused (before, only a refusal of the 1,000-word prompt taught the window)."""
    profile = LatencyProfile(name="llamacpp-small", fixed_ms=2, per_prompt_token_ms=0.01, per_output_token_ms=0.5,
                             context_window=300, publish_window=False, flavor="llamacpp")
    with SimServer(profile) as server:
        ctx = Context(target=Target(base_url=server.base_url), options=Options.of(samples=2, max_requests=40))
        prefill = ctx.get(PREFILL)
        size = ctx.get(PROMPT_SIZE)
    assert (size.window, size.window_source) == (300, "/props default_generation_settings.n_ctx")
    refused = [t for t in ctx.client.history if t.status == 400 and t.path.endswith("/chat/completions")]
    assert not refused and prefill.window is None, [t.error_detail for t in refused]
    assert prefill.long_tokens is not None and prefill.long_tokens <= 150
