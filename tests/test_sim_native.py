"""The simulator's native APIs per flavor, exercised over real loopback HTTP by llmdoctor's own adapters."""

from __future__ import annotations

import json

import httpx
import pytest

from llmdoctor.probes.client import ClientSettings, ProbeClient
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.cliutil import run_cli

FAST = {"fixed_ms": 5.0, "per_prompt_token_ms": 0.01, "per_output_token_ms": 4.0}


def sim(flavor: str, **knobs) -> SimServer:
    return SimServer(get_profile("healthy", flavor=flavor, **{**FAST, **knobs}))


def test_unknown_flavor_is_rejected() -> None:
    with pytest.raises(ValueError, match="flavor"):
        get_profile("healthy", flavor="triton")


def test_tgi_generate_headers_are_parsed_by_the_probe_client() -> None:
    with sim("tgi", natural_output_tokens=50) as server, \
            ProbeClient(Target(server.url + "/v1"), ClientSettings(timeout_s=10, max_requests=5)) as client:
        timing, body = client.post_json("/generate", {"inputs": "Why is my endpoint slow?",
                                                      "parameters": {"max_new_tokens": 10}}, root=True)
        assert timing.ok, timing
        st = timing.server_timing
        assert st["tgi.generated_tokens"] == 10 and st["tgi.prompt_tokens"] > 0
        assert st["tgi.time_per_token_ms"] == pytest.approx(4, abs=2)
        assert st["tgi.compute_ms"] == pytest.approx(st["tgi.inference_ms"], abs=1.5)
        assert st["tgi.inference_ms"] >= 40 and st["tgi.total_ms"] >= st["tgi.inference_ms"]
        assert isinstance(body, dict) and body["details"]["generated_tokens"] == 10


def test_tgi_generate_stream_sends_token_events_and_a_final_text() -> None:
    with sim("tgi") as server:
        with httpx.stream("POST", server.url + "/generate_stream",
                          json={"inputs": "hi", "parameters": {"max_new_tokens": 5}}) as resp:
            assert resp.headers["x-compute-type"] and "x-inference-time" not in resp.headers
            events = [json.loads(line[5:]) for line in resp.iter_lines() if line.startswith("data:")]
    assert len(events) == 5 and all("token" in e for e in events)
    assert events[-1]["generated_text"] == "".join(e["token"]["text"] for e in events)


def test_ollama_generate_reports_nanosecond_durations_and_load_on_first_request() -> None:
    with sim("ollama", cold_start_ms=150, natural_output_tokens=6, model="llama3.2") as server:
        assert httpx.get(server.url + "/api/ps").json() == {"models": []}
        assert httpx.get(server.url + "/metrics").status_code == 404
        first = httpx.post(server.url + "/api/generate",
                           json={"model": "llama3.2", "prompt": "hi", "stream": False}).json()
        second = httpx.post(server.url + "/api/chat",
                            json={"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}],
                                  "stream": False, "options": {"num_predict": 3}}).json()
        lines = []
        with httpx.stream("POST", server.url + "/api/generate", json={"model": "llama3.2", "prompt": "x"}) as r:
            lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
        ps = httpx.get(server.url + "/api/ps").json()
    assert first["done"] and first["eval_count"] == 6
    assert first["load_duration"] == pytest.approx(150e6, rel=0.01) and second["load_duration"] == 0
    assert first["eval_duration"] >= 20e6 and first["total_duration"] > first["load_duration"]
    assert second["message"]["role"] == "assistant" and second["eval_count"] == 3
    assert len(lines) == 7 and lines[-1]["done"] and not any(x["done"] for x in lines[:-1])
    assert ps["models"][0]["name"] == "llama3.2" and ps["models"][0]["expires_at"].endswith("Z")


def test_llamacpp_props_slots_and_timings() -> None:
    with sim("llamacpp", max_concurrency=2, context_window=2048) as server, \
            ProbeClient(Target(server.url + "/v1"), ClientSettings(timeout_s=10, max_requests=5)) as client:
        props = httpx.get(server.url + "/props").json()
        slots = httpx.get(server.url + "/slots").json()
        streamed = client.chat("hi", max_tokens=5, extra={"ignore_eos": True})
        plain = client.chat("hi", max_tokens=5, stream=False, extra={"ignore_eos": True})
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 2048
    assert [s["is_processing"] for s in slots] == [False, False]
    for t in (streamed, plain):
        assert t.ok, t
        assert t.server_timing["llamacpp.predicted_n"] == 5
        # llama.cpp's arithmetic, on the simulator's own clock (no absolute time: a busy host lets the
        # simulator's sleeps catch up, so the per-token figure moves, never its relation to the others).
        predicted_ms = t.server_timing["llamacpp.predicted_ms"]
        assert t.server_timing["llamacpp.predicted_per_token_ms"] == pytest.approx(predicted_ms / 5, abs=0.001)
        assert 0 < predicted_ms < t.total_ms


@pytest.mark.parametrize(("flavor", "backend", "metrics_path"), [
    ("vllm", "vllm", "/metrics"),
    ("tgi", "tgi", "/metrics"),
    ("llamacpp", "llamacpp", "/metrics"),
    ("ollama", "ollama", None),
])
def test_check_reads_each_flavors_metrics_end_to_end(
    flavor: str, backend: str, metrics_path: str | None, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "m.json"
    with sim(flavor) as server:
        args = ["check", "--endpoint", server.url, "--json", "--select", "LD203,LD207",
                "--save-measurements", str(saved)]
        if metrics_path:
            args += ["--metrics-url", server.url + metrics_path]
        result = run_cli(capsys, *args)
    report = result.report
    probes = {p["name"]: p for p in report["probes"]}
    assert probes["server_metrics"]["available"], probes["server_metrics"]
    metrics = json.loads(saved.read_text())["measurements"]["server_metrics"]
    assert metrics["backend"] == backend
    before = metrics["before"]
    if flavor == "ollama":
        assert before["models"] is not None
    else:
        assert before["requests_running"] is not None and before["requests_waiting"] is not None
    if flavor == "llamacpp":
        assert before["slots_total"] == 1 and before["kv_cache_usage"] is not None
    if flavor == "tgi":
        assert metrics["delta"]["queue_ms"] is not None


def test_sweep_forces_length_with_min_tokens_where_ignore_eos_is_ignored(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama-cpp-python accepts ignore_eos and ignores it; the sweep's min_tokens still forces the length."""
    saved = tmp_path / "m.json"
    with sim("llamacpp", honours_ignore_eos=False, natural_output_tokens=3) as server:
        assert httpx.post(server.base_url + "/chat/completions", json={
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 10, "ignore_eos": True,
        }).json()["usage"]["completion_tokens"] == 3
        result = run_cli(capsys, "check", "--endpoint", server.url, "--json", "--select", "LD702",
                         "--save-measurements", str(saved))
    statuses = {c["check_id"]: c["status"] for c in result.report["checks"]}
    assert statuses["LD702"] in ("passed", "failed")
    sweep = json.loads(saved.read_text())["measurements"]["sweep"]
    assert all(p["timing"]["completion_tokens"] == p["max_tokens"] for p in sweep["points"])
    assert result.report["breakdown"]["per_token_ms"] == pytest.approx(4, abs=1.5)
