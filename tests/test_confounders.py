"""The differential diagnosis weighs what else looks like queueing or a floor (issue 15, item 3).

Unit tests of the readings, on hand-made results (each states the case it stands for): a parallel
request's own connection set-up is not queueing, a difference the noise explains confirms nothing,
the server's own queue time decides over the client's inference, two populations say nothing of a
queue, and preemptions make KV pressure, not queueing. The real components meet these rules in
tests/test_replica_noise.py and the vLLM tier.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmdoctor.diagnosis.confounders import Confounders, first_pass_confounders
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState
from llmdoctor.diagnosis.planner import restatus
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, status, update
from llmdoctor.measurements.stats import Split
from llmdoctor.probes.catalog import FOLLOWUP_CONCURRENCY
from llmdoctor.probes.client_limits import ConcurrencyResult


def _facts(**confounders: Any) -> Facts:
    return Facts(warm_ttft_ms=40.0, warm_total_ms=50.0, ttft_p90_ms=45.0, decode_ms=None, first_ttft_ms=None,
                 first_setup_ms=0.0, models_ms=None, fresh=1, reused=4,
                 confounders=Confounders(jitter_ms=4.0, **confounders))


def _read_concurrency(r: ConcurrencyResult, f: Facts) -> dict[str, float]:
    test = next(t for t in FOLLOWUPS if t.probe is FOLLOWUP_CONCURRENCY)
    seen, _ = test.read(r, f)  # type: ignore[attr-defined]
    return {hyp: lr for hyp, lr, _ in seen}


def test_parallel_connection_set_up_is_not_queueing() -> None:
    """Two parallel requests each open a connection (a 60 ms handshake): totals look 2.2x slower, the
    service after connect is not."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[50.0, 52.0], parallel_ms=[112.0, 110.0],
                          single_service_ms=[50.0, 52.0], parallel_service_ms=[52.0, 51.0],
                          parallel_setup_ms=[60.0, 59.0], parallel_wall_ms=113.0, lag_ms=1.0)
    seen = _read_concurrency(r, _facts())
    assert seen.get("queueing", 1.0) < 1.0, seen  # served in parallel: evidence against


def test_served_in_turn_after_connect_is_queueing() -> None:
    """The control: from the first byte after connect the second request takes twice as long."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[50.0, 52.0], parallel_ms=[52.0, 104.0],
                          single_service_ms=[50.0, 52.0], parallel_service_ms=[52.0, 104.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=105.0, lag_ms=1.0)
    assert _read_concurrency(r, _facts())["queueing"] == DECISIVE


def test_a_difference_the_client_lag_explains_confirms_nothing() -> None:
    """The same served-in-turn shape, but llmdoctor itself woke 40 ms late (a busy host): not decisive."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[50.0, 52.0], parallel_ms=[52.0, 104.0],
                          single_service_ms=[50.0, 52.0], parallel_service_ms=[52.0, 104.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=105.0, lag_ms=40.0)
    seen = _read_concurrency(r, _facts(lag_ms=8.0))
    assert seen.get("queueing", 1.0) < DECISIVE, seen


def test_the_servers_own_queue_time_decides_over_the_clients_inference() -> None:
    """The client saw the second request twice as long; vLLM's histogram says it waited 0.02 ms."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[50.0], parallel_ms=[52.0, 104.0],
                          single_service_ms=[50.0], parallel_service_ms=[52.0, 104.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=105.0, lag_ms=1.0,
                          server_queue_ms=0.02, server_queue_requests=2.0)
    seen = _read_concurrency(r, _facts())
    assert seen["queueing"] < 1.0, seen
    r.server_queue_ms = 48.0
    assert _read_concurrency(r, _facts())["queueing"] == DECISIVE


def test_two_populations_say_nothing_of_a_queue() -> None:
    """Round-robin over a fast and a slow replica: the parallel pair landed on both."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[50.0, 450.0], parallel_ms=[52.0, 455.0],
                          single_service_ms=[50.0, 450.0], parallel_service_ms=[52.0, 455.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=456.0, lag_ms=1.0)
    split = Split((50.0, 52.0), (450.0, 455.0))
    assert _read_concurrency(r, _facts(split=split)) == {}


def test_mixed_warm_requests_are_replica_imbalance_not_a_floor() -> None:
    seen, impacts = first_pass_confounders(
        Confounders(split=Split((25.0, 26.0, 27.0), (455.0, 456.0)), alternating=True, warm_requests=5), None)
    lrs = {hyp: lr for hyp, lr, _ in seen if hyp == "replica_imbalance"}
    assert lrs and "replica_imbalance" in impacts
    assert round(impacts["replica_imbalance"][0]) == round(2 / 5 * (456.0 - 26.0))


def test_one_population_is_evidence_against_a_slow_replica() -> None:
    seen, _ = first_pass_confounders(Confounders(warm_requests=5), None)
    assert [(h, lr) for h, lr, _ in seen if h == "replica_imbalance"] == [("replica_imbalance", 1 / 3.0)]


def test_preemptions_are_kv_pressure_and_queueing_stands_down() -> None:
    """vLLM preempted requests during the run and requests waited: KV pressure, and the waiting is its
    symptom, so queueing is not confirmed beside it even when its own evidence would."""
    seen, _ = first_pass_confounders(Confounders(preemptions=12.0, kv_usage=0.97), 3.0)
    kv = [lr for h, lr, _ in seen if h == "kv_cache_pressure"]
    assert DECISIVE in kv and STRONG in kv
    d = Diagnosis(symptom="")
    d.hypotheses = [HypothesisState("kv_cache_pressure", "kv", 0.1, 0.1, "open"),
                    HypothesisState("queueing", "q", 0.2, 0.2, "open")]
    for lr in kv:
        d.hypotheses[0].probability = update(d.hypotheses[0].probability, lr)
    d.hypotheses[1].probability = update(0.2, DECISIVE)
    restatus(d)
    assert status(d.hypotheses[1].probability) == "confirmed"
    assert [h.status for h in d.hypotheses] == ["confirmed", "open"]


def test_a_roomy_cache_without_preemption_is_evidence_against_kv_pressure() -> None:
    seen, _ = first_pass_confounders(Confounders(preemptions=0.0, kv_usage=0.2), None)
    assert [(h, lr) for h, lr, _ in seen if h == "kv_cache_pressure"] == [("kv_cache_pressure", 1 / STRONG)]


def _queue_facts(**confounders: Any) -> Facts:
    """A one-slot server behind another client on a busy host (the simulator's ``queueing`` profile, 2 busy
    loops on 2 cores, no metrics): warm "Say ok." requests that waited 0, 1 or 2 other requests."""
    return Facts(warm_ttft_ms=348.0, warm_total_ms=379.0, ttft_p90_ms=369.0, decode_ms=4.0, first_ttft_ms=None,
                 first_setup_ms=0.0, models_ms=None, fresh=0, reused=5,
                 floor_samples_ms=[262.0, 287.0, 199.0, 379.0, 394.0, 417.0],
                 confounders=Confounders(jitter_ms=130.0, lag_ms=27.0, warm_requests=5, **confounders))


def test_a_queue_behind_other_clients_is_not_its_own_noise() -> None:
    """The waits behind another client's requests spread identical requests by a whole request (jitter
    130 ms, doubled on the lagging client): that spread is the queue, not noise against it. The pair sent
    together finished 205 ms apart, a whole service, four times what the client's worst lag explains."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[351.0, 386.0], parallel_ms=[373.5, 578.3],
                          single_service_ms=[351.0, 386.0], parallel_service_ms=[373.5, 578.3],
                          parallel_setup_ms=[0.5, 0.0], parallel_wall_ms=581.6, lag_ms=46.0)
    test = next(t for t in FOLLOWUPS if t.probe is FOLLOWUP_CONCURRENCY)
    seen, impacts = test.read(r, _queue_facts())  # type: ignore[attr-defined]
    assert {hyp: lr for hyp, lr, _ in seen}["queueing"] == DECISIVE
    assert impacts["queueing"][0] == pytest.approx(578.3 - 368.5)  # the slowest of the pair over alone


def test_every_request_behind_other_clients_waits_alone_too() -> None:
    """Each warm request of ours waited a whole request of the other client (363-365 ms, the first 186):
    the pair's extra wait (one service, 150 ms) leaves out what every request pays, alone too; the impact is
    the typical request over the fastest identical one."""
    f = _queue_facts()
    f.warm_total_ms, f.floor_samples_ms = 365.0, [186.0, 363.0, 365.0, 365.0, 365.0, 365.0]
    r = ConcurrencyResult(n=2, requested=2, single_ms=[364.0, 365.0], parallel_ms=[365.0, 515.0],
                          single_service_ms=[364.0, 365.0], parallel_service_ms=[365.0, 515.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=516.0, lag_ms=6.0)
    test = next(t for t in FOLLOWUPS if t.probe is FOLLOWUP_CONCURRENCY)
    seen, impacts = test.read(r, f)  # type: ignore[attr-defined]
    assert {hyp: lr for hyp, lr, _ in seen}["queueing"] == DECISIVE
    assert impacts["queueing"][0] == 365.0 - 186.0 and "fastest identical" in impacts["queueing"][1]


def test_requests_sent_together_that_finish_together_are_no_queue_whatever_the_jitter() -> None:
    """The control: the same wide jitter, but the pair finished 20 ms apart: served side by side."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[351.0, 386.0], parallel_ms=[373.5, 393.5],
                          single_service_ms=[351.0, 386.0], parallel_service_ms=[373.5, 393.5],
                          parallel_setup_ms=[0.5, 0.0], parallel_wall_ms=395.0, lag_ms=46.0)
    assert _read_concurrency(r, _queue_facts()).get("queueing", 1.0) < DECISIVE


def test_a_pair_apart_by_less_than_a_request_is_not_in_turn() -> None:
    """Apart by 120 ms, over what the lag explains (92 ms), but under the half of the fastest request
    (199 ms) that waiting for it would take: not read as one after the other."""
    r = ConcurrencyResult(n=2, requested=2, single_ms=[351.0, 386.0], parallel_ms=[373.5, 493.5],
                          single_service_ms=[351.0, 386.0], parallel_service_ms=[373.5, 493.5],
                          parallel_setup_ms=[0.5, 0.0], parallel_wall_ms=495.0, lag_ms=46.0)
    assert _read_concurrency(r, _queue_facts()).get("queueing", 1.0) < DECISIVE


def test_two_populations_made_by_a_queue() -> None:
    """Waits behind another client split the warm requests in two (186, 188 | 339-380 ms), which reads as
    two replicas; but the pair sent together was served in turn, the first of it already slow (365 ms,
    then 549): over two replicas the first to finish would be a fast one. A queue made the split."""
    split = Split((186.0, 188.0), (339.0, 374.0, 380.0))
    r = ConcurrencyResult(n=2, requested=2, single_ms=[374.0, 360.0], parallel_ms=[365.0, 549.0],
                          single_service_ms=[374.0, 360.0], parallel_service_ms=[365.0, 549.0],
                          parallel_setup_ms=[0.0, 0.0], parallel_wall_ms=551.0, lag_ms=22.0)
    assert _read_concurrency(r, _queue_facts(split=split))["queueing"] == DECISIVE
    # the control: over two replicas the pair ran side by side, the first of it a fast one
    r.parallel_ms = r.parallel_service_ms = [187.0, 372.0]
    assert _read_concurrency(r, _queue_facts(split=split)) == {}


def _network_evidence(models_ms: float, models_lag_ms: float | None, **confounders: Any) -> list[float]:
    from dataclasses import replace

    from llmdoctor.diagnosis.evidence import first_pass

    f = replace(_facts(**confounders), models_ms=models_ms, models_lag_ms=models_lag_ms)
    seen, _ = first_pass(f)
    return [lr for hyp, lr, _ in seen if hyp == "slow_network"]


def test_a_slow_trivial_request_the_clients_lag_explains_is_no_slow_network() -> None:
    """Recorded at four busy loops per core on a healthy loopback simulator (bench/noise.py): GET /v1/models
    took 205 ms while llmdoctor itself woke up to 114 ms late; it confirmed a slow network that is not there."""
    assert STRONG not in _network_evidence(205.0, 114.0, lag_ms=30.0)


def test_control_a_slow_trivial_request_on_a_quiet_client_is_evidence_of_a_far_server() -> None:
    assert STRONG in _network_evidence(205.0, 1.5, lag_ms=0.8)


def _lone_evidence(outside_lag_ms: float) -> dict[str, float]:
    from llmdoctor.diagnosis.evidence import FOLLOWUPS
    from llmdoctor.measurements.timing import RequestTiming
    from llmdoctor.probes.catalog import LONE_REQUEST
    from llmdoctor.probes.followup import LoneRequestResult

    test = next(t for t in FOLLOWUPS if t.probe is LONE_REQUEST)
    timing = RequestTiming("POST", "/v1/chat/completions", status=200, ttft_ms=121.0, total_ms=130.0,
                           client_lag_ms=outside_lag_ms)
    r = LoneRequestResult(backend="vllm", request=timing, requests_seen=1, server_ttft_ms=40.0)
    seen, _ = test.read(r, _facts())  # type: ignore[attr-defined]
    return {hyp: lr for hyp, lr, _ in seen}


def test_time_outside_the_server_the_clients_lag_explains_is_no_path() -> None:
    """81 ms outside the server (client 121 ms, server 40 ms) while the client lagged 60 ms: no evidence."""
    seen = _lone_evidence(60.0)
    assert seen.get("slow_network", 1.0) <= 1.0 and seen.get("gateway_overhead", 1.0) <= 1.0, seen


def test_control_time_outside_the_server_on_a_quiet_client_is_a_path() -> None:
    assert _lone_evidence(1.0).get("slow_network") == STRONG
