"""Decode per token from the stream or from the server's inter-token histogram; queue share over our requests.

The check cases (fixtures/LD703/*_vllm_032_*, fixtures/LD203/*_vllm_032_*, written by
fixtures/vllm/make_cases.py from the vLLM 0.32.0 recordings) assert the outcomes; these tests
assert what the outcomes rest on: which clock was read, and which evidence is (not) shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmdoctor.analysis.decode import server_decode, stream_decode
from llmdoctor.measurements.latency_samples import BaselineResult
from llmdoctor.measurements.server_metrics import ServerMetricsResult
from llmdoctor.serde import from_data
from tests.test_vllm_recorded import run_check

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _case(rel: str) -> dict[str, Any]:
    return json.loads((FIXTURES / rel).read_text())["measurements"]


def _recorded(rel: str) -> tuple[BaselineResult, ServerMetricsResult]:
    m = _case(rel)
    return from_data(BaselineResult, m["baseline"]), from_data(ServerMetricsResult, m["server_metrics"])


def test_a_merged_stream_is_seen_as_merged_and_a_token_per_read_stream_is_not() -> None:
    base, _ = _recorded("LD703/passes_vllm_032_merged_stream.json")
    merged = stream_decode(base.samples)
    assert merged.merged and merged.gaps == 5 * 7 and merged.gaps_seen == 0 and merged.per_token_ms == 0.0
    queue_base, _ = _recorded("LD203/fires_vllm_032_queue_other_traffic.json")  # 10 ms a token, one read each
    spaced = stream_decode(queue_base.samples)
    assert not spaced.merged and spaced.gaps_seen == spaced.gaps == 3 * 7
    assert spaced.per_token_ms is not None and abs(spaced.per_token_ms - 10.0) < 1e-6


def test_the_servers_histogram_is_ours_only_when_it_gained_exactly_our_gaps() -> None:
    base, metrics = _recorded("LD703/passes_vllm_032_merged_stream.json")
    everyone = server_decode(metrics, (*base.warmup, *base.samples))
    assert everyone is not None and not everyone.ours  # ~210 generations of other traffic in the window
    assert metrics.after is not None and metrics.after.inter_token is not None
    assert everyone.gaps == metrics.after.inter_token.count  # the first scrape had none
    assert 5 < everyone.per_token_ms < 20  # vLLM's own 10.8 ms (the recording)
    base, metrics = _recorded("LD703/fires_vllm_032_merged_stream_slow_server.json")
    ours = server_decode(metrics, (*base.warmup, *base.samples))
    # The first request came before the first scrape: its gaps are not expected in the window.
    assert ours is not None and ours.ours and ours.our_gaps == 35


def test_decode_reads_the_servers_histogram_when_the_stream_is_merged() -> None:
    outcome = run_check("LD703", _case("LD703/fires_vllm_032_merged_stream_slow_server.json"))
    (finding,) = outcome.findings
    labels = {e.label: e.value for e in finding.evidence}
    assert labels["per output token (server, our requests)"] == 45.0
    assert labels["baseline stream: token gaps seen / generated"] == "0 / 35"
    assert "per output token" not in labels  # the stream's 0 ms is not offered as a decode cost


def test_decode_skips_with_the_reason_when_only_a_merged_stream_is_left() -> None:
    measurements = _case("LD703/passes_vllm_032_merged_stream.json")
    measurements["server_metrics"] = {"unavailable": "no backend metrics"}
    outcome = run_check("LD703", measurements)
    assert outcome.status == "skipped", outcome
    assert "merged" in outcome.reason and "no sweep" in outcome.reason


def test_queue_share_is_shown_only_over_our_own_requests() -> None:
    other = run_check("LD203", _case("LD203/fires_vllm_032_queue_other_traffic.json"))
    (finding,) = other.findings
    labels = {e.label: e.value for e in finding.evidence}
    assert not any("share" in label for label in labels), labels
    assert labels["requests seen / ours"] == "12 / 3"
    assert "all requests the server finished" in " ".join(labels)
    ours = run_check("LD203", _case("LD203/fires_vllm_queue_histogram.json"))
    (finding,) = ours.findings
    share = next(e.value for e in finding.evidence if "share" in e.label)
    assert 0 < share <= 100 and "our requests" in next(e.label for e in finding.evidence if "share" in e.label)
