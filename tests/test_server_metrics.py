"""Backend metrics: parsing of recorded texts, and the probe against real loopback servers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llmdoctor.context import Context
from llmdoctor.measurements.server_metrics import ServerMetrics, parse_time
from llmdoctor.options import Options
from llmdoctor.probes.catalog import BASELINE, GPU_METRICS, SERVER_METRICS
from llmdoctor.probes.gpu import parse_dcgm
from llmdoctor.probes.metrics import apply_llamacpp_slots, normalize, parse_ollama_ps, parse_samples
from llmdoctor.serde import from_data, to_data
from llmdoctor.target import Target

M = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


def text(name: str) -> str:
    return (M / name).read_text()


# -- parsing every recorded text ---------------------------------------------------------------
EXPECTED = {
    "vllm-v1-datadog.prom": dict(backend="vllm", requests_running=0.0, requests_waiting=0.0, kv_cache_usage=0.0,
                                 preemptions_total=0.0, engine_sleeping=False, prefix_cache_hits=64.0,
                                 prefix_cache_queries=117.0, process_start_time=1.7181405583e09),
    "vllm-v0-datadog.prom": dict(backend="vllm", requests_running=0.0, kv_cache_usage=0.0, preemptions_total=0.0,
                                 engine_sleeping=None, queue_time=None, prefill_time=None, prefix_cache_hits=None),
    "vllm-old-names-datadog.prom": dict(backend="vllm", requests_running=0.0, requests_waiting=0.0, kv_cache_usage=0.0,
                                        preemptions_total=0.0, prefix_cache_hits=None, queue_time=None),
    "tgi-datadog.prom": dict(backend="tgi", requests_running=0.0, requests_waiting=0.0, kv_cache_usage=None,
                             preemptions_total=None, ttft=None),
    "sglang-0.5.10.prom": dict(backend="sglang", requests_running=0.0, requests_waiting=0.0, kv_cache_usage=0.25,
                               retracted=0.0, preemptions_total=None, startup_s=9.2, prefix_cache_hits=1.0),
    "llamacpp-ik-pr695.prom": dict(backend="llamacpp", requests_running=0.0, requests_waiting=0.0,
                                   kv_cache_usage=0.491063),
    "llamacpp-upstream-readme.prom": dict(backend="llamacpp", requests_running=4.0, requests_waiting=46.0,
                                          kv_cache_usage=None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_text_normalises(name: str) -> None:
    m = normalize(text(name), "/metrics")
    for attr, want in EXPECTED[name].items():
        got = getattr(m, attr)
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, (attr, got)


def test_every_recorded_text_has_an_expectation() -> None:
    assert {p.name for p in M.glob("*.prom")} - {"dcgm-t4-datadog.prom"} == set(EXPECTED)


def test_vllm_histograms_read_sum_and_count() -> None:
    m = normalize(text("vllm-v1-datadog.prom"))
    assert m.ttft is not None and m.ttft.count == 1 and m.ttft.mean_ms == pytest.approx(313.267, abs=0.01)
    assert m.queue_time is not None and m.queue_time.count == 6
    assert m.prefill_time is not None and m.prefill_time.sum == pytest.approx(0.2140041133388877)
    assert m.decode_time is not None and m.model_names == ["facebook/opt-125m"]
    assert 'vllm:num_requests_waiting{model_name="facebook/opt-125m"}' in m.samples


def test_absent_is_not_zero() -> None:
    tgi = normalize(text("tgi-datadog.prom"))
    vllm = normalize(text("vllm-v1-datadog.prom"))
    assert tgi.preemptions_total is None and vllm.preemptions_total == 0.0


def test_v1_kv_name_wins_over_v0_name() -> None:
    both = text("vllm-v1-datadog.prom").replace(
        'vllm:kv_cache_usage_perc{model_name="facebook/opt-125m"} 0.0',
        'vllm:kv_cache_usage_perc{model_name="facebook/opt-125m"} 0.83',
    )
    assert normalize(both).kv_cache_usage == pytest.approx(0.83)
    assert normalize(text("vllm-v0-datadog.prom")).kv_cache_usage == 0.0  # falls back to gpu_cache_usage_perc


def test_gauges_sum_over_label_sets_and_ratios_take_max() -> None:
    two = (
        "# TYPE sglang:num_queue_reqs gauge\n"
        'sglang:num_queue_reqs{tp_rank="0"} 3\nsglang:num_queue_reqs{tp_rank="1"} 4\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{tp_rank="0"} 0.5\nsglang:token_usage{tp_rank="1"} 0.9\n'
    )
    m = normalize(two)
    assert m.requests_waiting == 7 and m.kv_cache_usage == 0.9


def test_not_prometheus_raises() -> None:
    with pytest.raises(ValueError):
        parse_samples("<html><body>404 page not found {</body></html>\nfoo{ bar\n")


def test_unknown_backend_keeps_nothing() -> None:
    m = normalize("# TYPE up gauge\nup 1\n")
    assert m.backend == "unknown" and m.requests_waiting is None and m.samples == {}


def test_ollama_ps_docs_and_offload() -> None:
    docs = parse_ollama_ps(json.loads(text("ollama-ps-docs.json")))
    assert [x.name for x in docs] == ["mistral:latest"] and docs[0].cpu_fraction == 0.0
    assert docs[0].expires_unix == pytest.approx(parse_time("2024-06-04T21:38:31.83753Z"))
    off = parse_ollama_ps(json.loads(text("ollama-ps-offload.json")))
    assert off[0].cpu_fraction == pytest.approx(0.4444, abs=0.001) and off[0].context_length == 4096
    with pytest.raises(ValueError):
        parse_ollama_ps({"error": "not found"})


def test_llamacpp_slots_fill_running() -> None:
    m = ServerMetrics(backend="llamacpp")
    apply_llamacpp_slots(m, json.loads(text("llamacpp-slots-readme.json")))
    assert (m.slots_total, m.slots_busy, m.requests_running) == (2, 2, 2.0)


def test_dcgm_t4() -> None:
    snap = parse_dcgm(text("dcgm-t4-datadog.prom"))
    (g,) = snap.gpus
    assert g.name == "Tesla T4" and g.util_samples == [0.0] and g.xid_last == 0
    assert g.memory_total_bytes == 15109 * 1024 * 1024 and g.memory_fraction == 0.0


def test_server_metrics_roundtrips_through_serde() -> None:
    from llmdoctor.measurements.server_metrics import ServerMetricsResult

    m = normalize(text("sglang-0.5.10.prom"))
    data = json.loads(json.dumps(to_data(ServerMetricsResult("sglang", "/metrics", m))))
    back = from_data(ServerMetricsResult, data)
    assert back.before.queue_time == m.queue_time and back.before.kv_cache_usage == 0.25


# -- the probe against real loopback servers -----------------------------------------------------
class _Routes(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, str, str]] = {}
    hits: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        status, ctype, body = type(self).routes.get(self.path, (404, "text/plain", "404 page not found"))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(routes: dict[str, tuple[int, str, str]]) -> tuple[str, type[_Routes]]:
        handler = type("Handler", (_Routes,), {"routes": routes, "hits": []})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", handler

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


PROM = "text/plain; version=0.0.4"
JSON = "application/json"


def _ctx(url: str, **options: object) -> Context:
    return Context(target=Target(base_url=url + "/v1", model="m"), options=Options.of(max_requests=20, **options))


def test_probe_scrapes_vllm_twice(serve) -> None:
    url, handler = serve({"/metrics": (200, PROM, text("vllm-v1-datadog.prom"))})
    ctx = _ctx(url)
    result = ctx.get(SERVER_METRICS)
    assert result.backend == "vllm" and result.after is not None
    assert handler.hits.count("/metrics") == 2
    assert result.delta is not None and result.delta.requests == 0 and not result.delta.counter_reset
    assert any("baseline unavailable" in n for n in result.notes)


def test_probe_falls_back_to_ollama_ps(serve) -> None:
    url, handler = serve({"/api/ps": (200, JSON, text("ollama-ps-docs.json"))})
    result = _ctx(url).get(SERVER_METRICS)
    assert result.backend == "ollama" and [x.name for x in result.latest.models] == ["mistral:latest"]
    assert result.latest.requests_waiting is None


def test_probe_reads_llamacpp_props_and_slots_without_metrics(serve) -> None:
    url, _ = serve({
        "/metrics": (501, JSON, '{"error":{"code":501,"message":"This server does not support metrics endpoint."}}'),
        "/props": (200, JSON, text("llamacpp-props-readme.json")),
        "/slots": (200, JSON, text("llamacpp-slots-readme.json")),
    })
    result = _ctx(url).get(SERVER_METRICS)
    assert result.backend == "llamacpp" and result.before.slots_total == 2 and result.before.requests_running == 2


def test_probe_unavailable_with_reason(serve) -> None:
    url, _ = serve({})
    ctx = _ctx(url)
    assert ctx.optional(SERVER_METRICS) is None
    (status,) = [s for s in ctx.statuses() if s.name == "server_metrics"]
    assert "no backend metrics" in status.reason and "--metrics-url" in status.reason


def test_metrics_url_on_another_port_and_dcgm(serve) -> None:
    endpoint, endpoint_hits = serve({})
    exporter, hits = serve({
        "/vm": (200, PROM, text("sglang-0.5.10.prom")),
        "/metrics": (200, PROM, text("dcgm-t4-datadog.prom")),
    })
    ctx = _ctx(endpoint, metrics_url=exporter + "/vm", gpu_metrics_url=exporter + "/metrics")
    assert ctx.get(SERVER_METRICS).backend == "sglang"
    snap = ctx.get(GPU_METRICS)
    assert snap.source == "dcgm" and snap.gpus[0].name == "Tesla T4"
    # Other origins are read directly (without the endpoint's credentials), twice around the baseline.
    assert hits.hits == ["/vm", "/vm", "/metrics"]
    assert "/vm" not in endpoint_hits.hits


def test_probe_against_the_simulator_sees_our_requests() -> None:
    sim_mod = pytest.importorskip("llmdoctor.sim.server")
    from llmdoctor.sim.profiles import get_profile

    with sim_mod.SimServer(get_profile("healthy")) as sim:
        ctx = Context(target=Target(base_url=sim.base_url), options=Options.of(samples=3, max_requests=30))
        result = ctx.get(SERVER_METRICS)
        base = ctx.get(BASELINE)
    assert base is not None and result.backend == "vllm"
    d = result.delta
    # Here the probe ran first, so the baseline's first request came after the first scrape too.
    assert d is not None and d.our_requests == len(base.samples) + len(base.warmup)
    assert d.requests == d.our_requests  # nobody else talks to this simulator
    assert d.prefill_ms is not None and d.decode_ms is not None and d.e2e_ms is not None
    assert d.ttft_ms is not None and d.ttft_ms > 0


def test_exporter_on_another_origin_is_counted_and_gets_no_credentials(tmp_path) -> None:
    """Every request is counted, and the endpoint's key never travels to another host/port."""
    from llmdoctor.context import Context
    from llmdoctor.options import Options
    from llmdoctor.probes.metrics import fetch_text
    from llmdoctor.target import Target
    from tests.rawserver import ScriptedServer, http_response, play

    body = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 97\n"
    with ScriptedServer(play([(0.0, http_response(200, {"Content-Type": "text/plain"}, body))])) as exporter:
        ctx = Context(Target(base_url="http://127.0.0.1:9/v1", api_key="canary-key-123",
                             headers=(("x-api-key", "canary-2"),)), Options())
        text = fetch_text(ctx, exporter.url + "/metrics")
        sent = ctx.requests_sent
        raw = b"".join(exporter.requests).decode("latin-1").lower()
    assert text is not None and "DCGM_FI_DEV_GPU_UTIL" in text
    assert sent == 1
    assert "canary" not in raw and "authorization" not in raw
