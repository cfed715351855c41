"""The phase a server clock places a fixed cost in names its cause (LD702; issue 26)."""

from __future__ import annotations

import pytest

from llmdoctor.analysis.floor_phase import floor_phase
from llmdoctor.analysis.waterfall import IN_FRONT, Joined
from llmdoctor.causes import Cause
from llmdoctor.reporting.report import Phase
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import run_cli


def _joined(*phases: Phase, in_front: float | None = 1.0) -> Joined:
    return Joined(list(phases), sum(p.ms for p in phases), in_front_ms=in_front)


PREFILL = Phase("prefill", 356.0, "", "server_body", "metrics.time_to_first_token_ms")
QUEUE = Phase("queue", 2400.0, "", "server_body", "metrics.queue_time_ms")
DECODE = Phase("decode", 35.0)


def test_prefill_by_the_requests_own_clock_is_the_server_floor() -> None:
    found = floor_phase(_joined(Phase(IN_FRONT, 0.6, "", "inferred", "x"), PREFILL, DECODE), fixed_ms=353)
    assert found is not None and found.cause is Cause.SERVER_FLOOR and found.phase == "prefill"
    assert "356 of the typical request's 392 ms is prefill" == found.words


def test_a_queue_is_queueing_and_the_biggest_phase_wins() -> None:
    found = floor_phase(_joined(PREFILL, QUEUE, DECODE), fixed_ms=2000)
    assert found is not None and found.cause is Cause.QUEUEING


@pytest.mark.parametrize("joined, why", [
    (_joined(PREFILL, DECODE, in_front=None), "no server clock anchors the split"),
    (_joined(Phase("prefill", 356.0, "", "server_metrics",
                   "vllm:request_prefill_time_seconds (shared traffic: averaged over 40 requests, 5 ours)"), DECODE),
     "a mean over other clients' requests is not ours"),
    (_joined(Phase("wait for first token", 356.0), DECODE), "the client's clock names no phase"),
    (_joined(Phase("prefill", 100.0, "", "server_body", "metrics.time_to_first_token_ms"), DECODE),
     "under half of the fixed cost"),
])
def test_no_phase_is_named_without_a_server_clock_of_our_own_holding_the_cost(joined: Joined, why: str) -> None:
    assert floor_phase(joined, fixed_ms=353) is None, why


FAST_FLOOR = {"fixed_ms": 300.0, "per_prompt_token_ms": 0.01, "per_output_token_ms": 3.0}


def _ld702(capsys: pytest.CaptureFixture[str], flavor: str, **knobs: object) -> dict:
    with SimServer(get_profile("healthy", flavor=flavor, **{**FAST_FLOOR, **knobs})) as server:
        report = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD702", "--no-followup").report
    (finding,) = [f for f in report["findings"] if f["check_id"] == "LD702"]
    return finding


def test_ld702_names_the_phase_by_vllms_per_request_clock(capsys: pytest.CaptureFixture[str]) -> None:
    finding = _ld702(capsys, "vllm", per_request_metrics=True)
    assert finding["cause"] == "server_floor" and not finding["symptom"]
    assert "in prefill by the server's own clock" in finding["title"]
    assert "metrics.time_to_first_token_ms" in finding["message"]


def test_ld702_stays_a_symptom_when_no_server_clock_places_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The control: an OpenAI-style server reports only the time to start its stream (0 ms)."""
    finding = _ld702(capsys, "openai")
    assert not finding["cause"] and finding["symptom"] == "fixed_cost"
