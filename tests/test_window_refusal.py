"""Probes fit the patient: a window the server does not publish is learned from its refusal of our prompt.

Issue 25 item 3, found on real llama.cpp (llama-cpp-python 0.3.36, ``--n_ctx 512``, no published
window): the prefill probe's ~2,500-token prompt was refused, the refusal counted as the server's
generation failures (LD002), and LD101 passed the user's 832-token request that the same server
refuses. Here the parser on each server's wording, and the whole run on the simulator with an
unpublished window (``publish_window=False``); the real server is tests/integration/test_window_at_llamacpp.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes.catalog import PREFILL
from llmdoctor.probes.window import LearnedWindow, Refusal, parse_refusal, refit_words
from llmdoctor.sim import LatencyProfile, SimServer
from llmdoctor.target import Target
from tests.cliutil import run_cli

WORDINGS = [
    # llama-cpp-python 0.3.36, measured here (HTTP 400, non-streamed)
    ("HTTP 400: This model's maximum context length is 512 tokens. However, you requested 2489 tokens (2488 in the "
     "messages, 1 in the completion). Please reduce the length of the messages or completion.", Refusal(512, 2488)),
    # vLLM 0.32 vllm/renderers/params.py _token_len_check
    ("HTTP 400: This model's maximum context length is 1024 tokens. However, your prompt contains 1300 input tokens, "
     "which exceeds this limit even without any output tokens.", Refusal(1024, 1300)),
    ("HTTP 400: This model's maximum context length is 1024 tokens. However, your prompt contains at least 1025 "
     "input tokens, which exceeds this limit even without any output tokens.", Refusal(1024, 1025)),
    # vLLM 0.6-0.1x serving_engine
    ("This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce "
     "the length of the input messages.", Refusal(4096, 5000)),
    # llama.cpp server exceed_context_size_error
    ("HTTP 400: request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
     Refusal(4096, 4476)),
    # TGI router/src/validation.rs MaxTotalTokens (HTTP 422)
    ("HTTP 422: Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4031 `inputs` "
     "tokens and 200 `max_new_tokens`", Refusal(4096, 4031)),
    # SGLang tokenizer_manager
    ("HTTP 400: The input (1500 tokens) is longer than the model's context length (1024 tokens).",
     Refusal(1024, 1500)),
    ("HTTP 400: Requested token count exceeds the model's maximum context length of 2,048 tokens. You requested a "
     "total of 2100 tokens: 1900 tokens from the input messages and 200 tokens for the completion.",
     Refusal(2048, 1900)),
]


@pytest.mark.parametrize(("text", "expected"), WORDINGS)
def test_each_servers_refusal_states_the_window(text: str, expected: Refusal) -> None:
    assert parse_refusal(text) == expected


@pytest.mark.parametrize("text", [
    "HTTP 400: 'max_tokens' must be a positive integer, got 0.",
    "HTTP 400: Unsupported parameter: 'logprobs'",
    "stream cut: the stream ended before its first event (content type text/event-stream)",
])
def test_other_refusals_state_no_window(text: str) -> None:
    assert parse_refusal(text) is None


def test_a_resized_prompt_fills_half_the_learned_window_at_the_refused_prompts_own_rate() -> None:
    learned = LearnedWindow(512, "refusal", prompt_tokens=2488, prompt_words=1000)
    words = refit_words(learned, 0.5, 0.9, 4.0)
    assert words * 2488 / 1000 <= 512 * 0.5
    assert words == int(512 * 0.5 * 0.9 / 2.488)
    # a refusal that did not count our prompt: the worst rate assumed
    assert refit_words(LearnedWindow(512, "refusal"), 0.5, 0.9, 4.0) == int(512 * 0.5 * 0.9 / 4.0)


PROFILE = LatencyProfile(name="unpublished-window", fixed_ms=2, per_prompt_token_ms=0.05, per_output_token_ms=0.3,
                         publish_window=False)


def _request(tmp_path: Path, words: int) -> Path:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "river stone " * (words // 2)}],
                                "max_tokens": 16, "temperature": 0}))
    return path


def _report(capsys: pytest.CaptureFixture[str], url: str, request: Path) -> dict[str, object]:
    result = run_cli(capsys, "check", "--endpoint", url, "--request", str(request), "--json", "--no-followup")
    assert result.code in (0, 1, 2), result.err
    report: dict[str, object] = json.loads(result.out)
    return report


def _findings(report: dict[str, object], check_id: str) -> list[dict[str, object]]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return [f for f in findings if f["check_id"] == check_id]


def test_a_small_unpublished_window_is_learned_from_the_refusal_and_judges_the_request(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with SimServer(dataclasses.replace(PROFILE, context_window=600)) as server:
        report = _report(capsys, server.url, _request(tmp_path, 800))
    over = _findings(report, "LD101")
    assert [f["severity"] for f in over] == ["critical"], over
    window = next(e for e in over[0]["evidence"] if e["label"] == "context window")  # type: ignore[attr-defined]
    assert window["value"] == 600
    assert "refusal of the prefill probe" in window["source"]
    # our refused prompt is not the server failing
    assert not _findings(report, "LD002")
    probes = {p["name"]: p for p in report["probes"]}  # type: ignore[attr-defined]
    assert probes["prefill"]["available"], probes["prefill"]
    # ... and the JSON says so request by request (schema 1.10): our refused prompt is this client's misfit
    requests = report["requests"]
    assert isinstance(requests, dict)
    ours = [r for r in requests["ids"] if r["probe"] == "prefill" and r["outcome"] != "ok"]
    assert ours and all(r["failed_by"] == "client" and "did not fit" in r["misfit"] for r in ours), ours
    # the user's own 800-word request, sent as it is (prefix_reuse), is refused by the server: not a misfit of ours
    users = [r for r in requests["ids"] if r["probe"] == "prefix_reuse"]
    assert users and all(r["failed_by"] == "server" and r["label"] == "HTTP 400" and not r["misfit"] for r in users)
    assert all(r["failed_by"] is None and r["misfit"] == "" for r in requests["ids"] if r["outcome"] == "ok")
    # the tallies agree, and the generation failures count none of ours as the server's
    assert requests["generation"]["failed_by"] == {"client": len(ours), "server": len(users)}, requests["generation"]
    assert requests["troubled_generations"] == 0


def test_a_large_unpublished_window_lets_the_probe_fit_at_once_and_the_request_pass(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with SimServer(dataclasses.replace(PROFILE, context_window=8192)) as server:
        report = _report(capsys, server.url, _request(tmp_path, 800))
        ctx = Context(Target(server.base_url), Options.of(samples=2, warmup=0))
        prefill = ctx.get(PREFILL)
        ctx.close()
    assert not [f for f in _findings(report, "LD101") if f["severity"] == "critical"]
    assert not _findings(report, "LD002")
    assert prefill.window is None and prefill.window_source == ""
