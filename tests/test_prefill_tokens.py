"""The prefill probe's prompt tokens when the streams report no usage (llama-cpp-python).

Found on the real llama.cpp tier (llama-cpp-python 0.3, tests/integration/test_llmdoctor_vs_llamacpp.py): its
streamed chunks carry no ``usage``, the probe assumed 1.3 tokens a filler word where that tokenizer spends
~2.4, and the cost per prompt token — which LD101 multiplies by the request's server-counted tokens — came
out about twice the server's own. Now the two prompts are counted by the tokenizer ``server_tokens`` found
(only with ``--request``: that probe runs then), else at ``prompt_size``'s rate, else at 1.3 tokens a word.

Here a real HTTP server: the simulator with ``stream_usage=False``. Its toy tokenizer spends one token on
each filler word (``llmdoctor.sim.tokens``), so the 1.3 guess and the server's count differ by 30%.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from llmdoctor.checklist.registry import load_registry
from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.plan import plan_probes, plan_requests
from llmdoctor.probes.catalog import PREFILL, PROMPT_SIZE, SERVER_TOKENS
from llmdoctor.probes.prefill import LONG_WORDS, SHORT_WORDS
from llmdoctor.probes.prompt_size import filler_prompt
from llmdoctor.sim import LatencyProfile, SimServer
from llmdoctor.sim import tokens as simtok
from llmdoctor.target import Target
from tests.cliutil import run_cli

TOKENIZE = "/tokenize"


NO_STREAM_USAGE = LatencyProfile(name="no-stream-usage", fixed_ms=2, per_prompt_token_ms=0.2, per_output_token_ms=0.5,
                                 stream_usage=False)


def _profile(**fields: Any) -> LatencyProfile:
    return dataclasses.replace(NO_STREAM_USAGE, **fields)


def _expected_tokens(words: int) -> int:
    """The simulator's count of a prefill prompt of `words` words (the instruction's 12 included)."""
    return simtok.count_chat_tokens([{"role": "user", "content": filler_prompt(words - 12, random.Random(0))}])


def _request_file(tmp_path: Path) -> Path:
    path = tmp_path / "req.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hello " * 40}], "max_tokens": 8}) + "\n")
    return path


@pytest.fixture
def no_usage() -> Iterator[SimServer]:
    with SimServer(_profile()) as server:
        yield server


def _paths(ctx: Context) -> list[str]:
    return [t.path for t in ctx.client.history]


def test_without_usage_the_server_tokenizer_found_for_the_request_counts_both_prompts(tmp_path: Path) -> None:
    with SimServer(_profile(per_prompt_token_ms=0.5)) as server:
        ctx = Context(Target(server.base_url),
                      Options.of(samples=2, warmup=0, request_files=(str(_request_file(tmp_path)),)))
        try:
            assert ctx.get(SERVER_TOKENS).api == "vllm"
            before = _paths(ctx).count(TOKENIZE)
            prefill = ctx.get(PREFILL)
            after = _paths(ctx).count(TOKENIZE)
        finally:
            ctx.close()
    assert prefill.tokens_source == "server tokenizer (vllm /tokenize (chat template))", prefill
    assert (prefill.short_tokens, prefill.long_tokens) == (_expected_tokens(SHORT_WORDS), _expected_tokens(LONG_WORDS))
    assert after - before == 2  # one count each, no detection: server_tokens found the API
    # The simulator charges 0.5 ms a prompt token by its own count; the 1.3 guess would read ~0.385.
    assert prefill.reliable and 0.42 < prefill.per_token_ms < 0.75, prefill


def test_control_without_a_request_file_nothing_is_tokenized_and_the_guess_says_so(no_usage: SimServer) -> None:
    ctx = Context(Target(no_usage.base_url), Options.of(samples=2, warmup=0))
    try:
        prefill = ctx.get(PREFILL)
    finally:
        ctx.close()
    assert ctx.optional(SERVER_TOKENS) is None and ctx.optional(PROMPT_SIZE) is None
    assert TOKENIZE not in _paths(ctx)
    assert prefill.tokens_source == "estimate (1.3 tokens a word)"
    assert prefill.long_tokens == round(LONG_WORDS * 1.3)


def test_control_with_usage_the_answers_count_and_nothing_more_is_tokenized(tmp_path: Path) -> None:
    with SimServer(_profile(stream_usage=True)) as server:
        ctx = Context(Target(server.base_url),
                      Options.of(samples=2, warmup=0, request_files=(str(_request_file(tmp_path)),)))
        try:
            ctx.get(SERVER_TOKENS)
            before = _paths(ctx).count(TOKENIZE)
            prefill = ctx.get(PREFILL)
            after = _paths(ctx).count(TOKENIZE)
        finally:
            ctx.close()
    assert prefill.tokens_source == "usage" and after == before
    assert prefill.long_tokens == _expected_tokens(LONG_WORDS)


def test_a_small_window_without_usage_prices_the_prompts_at_the_measured_rate() -> None:
    """No --request: ``prompt_size`` counted two filler prompts for the window; its rate, no more requests."""
    with SimServer(_profile(context_window=600)) as server:
        ctx = Context(Target(server.base_url), Options.of(samples=2, warmup=0))
        try:
            prefill = ctx.get(PREFILL)
            size = ctx.get(PROMPT_SIZE)
        finally:
            ctx.close()
    assert _paths(ctx).count(TOKENIZE) == 2  # prompt_size's two, none for the prefill probe
    assert prefill.tokens_source.startswith("server tokenizer's rate (1.00 tokens a filler word"), prefill
    assert size.tokens_per_word == pytest.approx(1.0)
    # The long prompt was sized for 90% of half the window at that rate, and is priced at it.
    assert 0.8 * 270 <= prefill.long_tokens <= 270 and prefill.short_tokens == _expected_tokens(SHORT_WORDS)


def test_the_dry_run_plan_covers_the_prefill_counts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A whole check with --request against usage-less streams sends no request its dry-run plan lacks."""
    request = _request_file(tmp_path)
    with SimServer(_profile()) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--request", str(request))
        by_path = server.requests_by_path
        target = Target(base_url=server.base_url)
    options = Options.of(request_files=(str(request),))
    planned = plan_requests(target, options, plan_probes(load_registry().checks, options))
    planned_paths = {urlsplit(u.strip()).path for r in planned for u in r.url.split(",")}
    assert result.report["requests"]["sent"] == sum(by_path.values()) <= min(
        sum(r.count for r in planned), options.request.max_requests)
    assert set(by_path) <= planned_paths, (by_path, planned_paths)
    assert by_path[TOKENIZE] >= 3  # server_tokens' one and the prefill probe's two
