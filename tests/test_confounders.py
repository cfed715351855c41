"""The differential diagnosis weighs what else looks like queueing or a floor (issue 15, item 3).

Unit tests of the readings, on hand-made results (each states the case it stands for): a parallel
request's own connection set-up is not queueing, a difference the noise explains confirms nothing,
the server's own queue time decides over the client's inference, two populations say nothing of a
queue, and preemptions make KV pressure, not queueing. The real components meet these rules in
tests/test_replica_noise.py and the vLLM tier.
"""

from __future__ import annotations

from typing import Any

from llmdoctor.diagnosis.confounders import Confounders, first_pass_confounders
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts
from llmdoctor.diagnosis.model import Diagnosis, HypothesisState
from llmdoctor.diagnosis.planner import restatus
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, status, update
from llmdoctor.probes.catalog import FOLLOWUP_CONCURRENCY
from llmdoctor.probes.client_limits import ConcurrencyResult
from llmdoctor.stats import Split


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
