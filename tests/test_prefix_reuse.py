"""Prefix reuse (issue 25 item 5) on the simulator: a prompt re-prefilled every time against one it reuses.

The simulator's ``prefix_cache`` serves a prompt it has seen from its cache (only the last token is
prefilled again); without it every repeat pays the whole prefill. The real server is vLLM CPU with
``--no-enable-prefix-caching`` against its default (tests/integration/test_prefix_reuse_at_vllm.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.probes.prefix_reuse import volatile_prefix
from llmdoctor.sim import LatencyProfile, SimServer
from tests.cliutil import run_cli

PROFILE = LatencyProfile(name="prefix", fixed_ms=3, per_prompt_token_ms=0.4, per_output_token_ms=0.5)
SYSTEM = " ".join(["You are a careful assistant for the billing team; answer from the policy below."] * 60)


def _request(tmp_path: Path, system: str = SYSTEM) -> Path:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"messages": [{"role": "system", "content": system},
                                             {"role": "user", "content": "Can I get a refund?"}],
                                "max_tokens": 32, "temperature": 0, "stream": True}))
    return path


def _ld212(capsys: pytest.CaptureFixture[str], profile: LatencyProfile, request: Path) -> list[dict[str, Any]]:
    with SimServer(profile) as server:
        result = run_cli(capsys, "check", "--endpoint", server.url, "--request", str(request), "--json",
                         "--no-followup")
    assert result.code in (0, 1, 2), result.err
    report = json.loads(result.out)
    probe = next(p for p in report["probes"] if p["name"] == "prefix_reuse")
    assert probe["available"], probe
    return [f for f in report["findings"] if f["check_id"] == "LD212"]


def test_a_prompt_prefilled_again_every_time_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    found = _ld212(capsys, PROFILE, _request(tmp_path))
    assert [f["title"].split(":")[0] for f in found] == ["Prefix caching off or prefix not reused"]
    assert found[0]["impact_ms"] > 100
    assert any("--no-enable-prefix-caching" in step for step in found[0]["fix"]["steps"])


def test_control_a_cache_that_reuses_the_prompt_is_silent(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _ld212(capsys, dataclasses.replace(PROFILE, prefix_cache=True), _request(tmp_path)) == []


def test_a_timestamp_at_the_top_defeats_a_working_cache(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    found = _ld212(capsys, dataclasses.replace(PROFILE, prefix_cache=True),
                   _request(tmp_path, "Time: 2026-12-02 06:40:11. " + SYSTEM))
    assert [f["title"].split(":")[0] for f in found] == ["Volatile prefix"]


def test_volatile_prefixes_are_found_by_pattern_and_by_comparison() -> None:
    assert volatile_prefix(["Now: 2026-12-02T06:40 " + SYSTEM]).startswith("a date and time")
    assert volatile_prefix([f"request {i:08x}-1234-5678-9abc-def012345678 " + SYSTEM for i in range(2)])
    assert "differ at character" in volatile_prefix([f"user {name}. " + SYSTEM for name in ("ann", "bob")])
    assert volatile_prefix([SYSTEM]) == ""
    assert volatile_prefix([SYSTEM + " 2026-12-02"]) == ""  # at the end: the prefix stays stable
    assert volatile_prefix(["2026-12-02 short"]) == ""  # a short message has no prefix worth caching
