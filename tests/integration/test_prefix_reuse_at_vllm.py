"""Prefix reuse on a REAL vLLM server (0.32 CPU): caching off is named with its cost; on, LD212 is silent.

A ~700-token system prompt (counted by the server's own ``/tokenize``) in the ``--request``; the
doctor sends it three times. With ``--no-enable-prefix-caching`` every sending pays the whole prefill
(measured here before: ~600 ms each); with vLLM's default every repeat is served from the cache
(570-690 ms first, 110-170 ms after). The counters ``vllm:prefix_cache_queries``/``hits`` are read
where exported. Both cases are judged against the noise the run measured, never an absolute time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cliutil import run_process
from tests.vllm_server import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SYSTEM_TOKENS = (600, 780)
POLICY = ("Refunds are given within thirty days of purchase when the item is unused and the receipt is shown. "
          "Store credit is offered after thirty days. Damaged items are replaced at no cost. ")


def _system_prompt(server: VllmServer) -> str:
    text = POLICY
    for _ in range(40):
        count = httpx.post(f"{server.url}/tokenize", json={"model": "tiny-llama", "prompt": text}, timeout=30).json()
        tokens = int(count["count"])
        if SYSTEM_TOKENS[0] <= tokens <= SYSTEM_TOKENS[1]:
            return text
        text += POLICY
    raise AssertionError(f"no system prompt of {SYSTEM_TOKENS} tokens (last {tokens})")


def _run(tiny_hf_model: Path, tmp: Path, extra_args: tuple[str, ...]) -> dict[str, Any]:
    with VllmServer(tiny_hf_model, log_path=tmp / "server.log", extra_args=extra_args) as server:
        request = tmp / "req.json"
        request.write_text(json.dumps({"model": "tiny-llama", "max_tokens": 16, "temperature": 0, "stream": True,
                                       "messages": [{"role": "system", "content": _system_prompt(server)},
                                                    {"role": "user", "content": "Can I get a refund?"}]}))
        result = run_process("check", "--endpoint", server.url, "--request", str(request), "--json",
                             "--timeout", "60", timeout=400)
    assert result.code in (0, 1, 2), result.err
    report: dict[str, Any] = result.report
    probe = next(p for p in report["probes"] if p["name"] == "prefix_reuse")
    assert probe["available"], probe
    return report


def _ld212(report: dict[str, Any]) -> list[dict[str, Any]]:
    found = [f for f in report["findings"] if f["check_id"] == "LD212"]
    for f in found:
        print(f"\n{f['title']}: " + "; ".join(f"{e['label']}={e['value']}" for e in f["evidence"]))
    return found


@pytest.fixture(scope="module")
def caching_off(vllm_version: str, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory,
                ) -> Iterator[dict[str, Any]]:
    yield _run(tiny_hf_model, tmp_path_factory.mktemp("vllm-nocache"), ("--no-enable-prefix-caching",))


@pytest.fixture(scope="module")
def caching_on(vllm_version: str, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory,
               ) -> Iterator[dict[str, Any]]:
    yield _run(tiny_hf_model, tmp_path_factory.mktemp("vllm-cache"), ())


def test_caching_off_is_named_with_its_cost(caching_off: dict[str, Any]) -> None:
    found = _ld212(caching_off)
    assert [f["title"].split(":")[0] for f in found] == ["Prefix caching off or prefix not reused"]
    f = found[0]
    noise = next(e["value"] for e in f["evidence"] if e["label"] == "noise")
    assert f["impact_ms"] >= 3 * noise
    assert any("--no-enable-prefix-caching" in step for step in f["fix"]["steps"])


def test_control_caching_on_is_silent(caching_on: dict[str, Any]) -> None:
    assert _ld212(caching_on) == []
