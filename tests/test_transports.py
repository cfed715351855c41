"""The probe client's layers on an injected transport and an injected clock (no network, no real time)."""

from __future__ import annotations

import httpx
import pytest

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.timing import ErrorKind
from llmdoctor.options import Options
from llmdoctor.probes.client import BudgetExhausted, ClientSettings, DeadlineReached, PlanExceeded, ProbeClient
from llmdoctor.probes.contract import Probe, request
from llmdoctor.target import Target
from tests.clientutil import probe_client
from tests.rawserver import ScriptClock

TARGET = Target("http://127.0.0.1:9/v1", model="m")


class Mock(httpx.BaseTransport):
    """Answers from a list of (status, headers, body) in turn; records what reached it."""

    def __init__(self, *answers: tuple[int, dict[str, str], bytes]) -> None:
        self.answers = list(answers)
        self.seen: list[httpx.Request] = []

    def handle_request(self, req: httpx.Request) -> httpx.Response:
        self.seen.append(req)
        status, headers, body = self.answers[min(len(self.seen), len(self.answers)) - 1]
        return httpx.Response(status, headers=headers, content=body)


OK_JSON = (200, {"content-type": "application/json"}, b'{"data": []}')


def make(network: httpx.BaseTransport, clock: ScriptClock | None = None, **kwargs) -> ProbeClient:
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("max_requests", 10)
    return probe_client(TARGET, clock=clock or ScriptClock(), transport=network, **kwargs)


def test_the_request_budget_refuses_before_anything_reaches_the_network() -> None:
    network = Mock(OK_JSON)
    with make(network, max_requests=2) as c:
        c.get_json("/models")
        c.get_json("/models")
        with pytest.raises(BudgetExhausted, match="budget of 2 spent; not sending GET /models"):
            c.get_json("/models")
    assert len(network.seen) == 2 and c.requests_sent == 2 and c.budget_left == 0 and len(c.history) == 2


def test_the_run_deadline_refuses_before_sending_on_the_injected_clock() -> None:
    clock, network = ScriptClock(), Mock(OK_JSON)
    with make(network, clock, deadline_at=clock.now() + 1.0) as c:
        t, _ = c.get_json("/models")
        assert t.ok and c.time_left() == 1.0
        clock.advance(0.96)  # 40 ms left: under the 50 ms a request needs to start
        with pytest.raises(DeadlineReached, match="deadline has passed; not sending GET /models"):
            c.get_json("/models")
    assert len(network.seen) == 1


def test_a_short_retry_after_is_waited_out_on_the_clock_once_and_both_answers_are_kept() -> None:
    clock = ScriptClock()
    network = Mock((429, {"retry-after": "2"}, b'{"error": {"message": "slow down"}}'),
                   (429, {"retry-after": "2"}, b'{"error": {"message": "still busy"}}'))
    start = clock.now()
    with make(network, clock) as c:
        t, _ = c.get_json("/models")
        again, _ = c.get_json("/models")  # one back-off per run: no second wait
    assert clock.now() - start == pytest.approx(2.0)
    first, retried = c.history[0], c.history[1]
    assert first.status == 429 and not first.retried and "slow down" in first.error_detail
    assert t is retried and t.retried and t.error == ErrorKind.HTTP_STATUS
    assert "also after waiting 2 s as Retry-After asked; first answer: HTTP 429" in t.error_detail
    assert not again.retried and len(network.seen) == 3 == c.requests_sent


def test_the_retry_carries_ids_of_its_own_so_the_servers_log_shows_every_attempt() -> None:
    """Issue 26: the server sees two requests, so each has its own X-Request-Id (the first one's with ``-2``:
    a search of the server's log for the first id finds both) and its own span of the same trace."""
    from llmdoctor.probes.trace_ids import valid_traceparent

    sent: list[dict[str, str]] = []

    class Recording(Mock):
        def handle_request(self, req: httpx.Request) -> httpx.Response:
            sent.append(dict(req.headers))  # the same Request object is sent again: keep what went out
            return super().handle_request(req)

    network = Recording((429, {"retry-after": "1"}, b"slow down"), OK_JSON)
    with make(network) as c:
        t, _ = c.get_json("/models")
    first, again = c.history
    assert [h["x-request-id"] for h in sent] == [first.request_id, again.request_id]
    assert [h["traceparent"] for h in sent] == [first.traceparent, again.traceparent]
    assert t is again and again.retried and not first.retried
    # the retry's id is the first's with its attempt digits 01 made 02: still a UUID (see test_ids_are_uuids)
    assert again.request_id == first.request_id[:-2] + "02" and first.request_id.endswith("01")
    assert len(first.request_id) == 32
    assert again.traceparent.split("-")[1] == first.traceparent.split("-")[1]  # one trace
    assert again.traceparent.split("-")[2] != first.traceparent.split("-")[2]  # two spans
    assert valid_traceparent(again.traceparent)


def test_ids_are_uuids_so_a_server_that_validates_them_answers_every_attempt() -> None:
    """llama-cpp-python 0.3.36's server checks X-Request-Id with starlette-context 0.3.6's RequestIdPlugin
    (validate=True) and answers a non-UUID with a bare HTTP 400: the old "-2" retry id made every retry
    fail there (CI: the window was not learned, our probe's re-ask refused as "HTTP 400: Bad Request")."""
    import uuid

    from llmdoctor.probes.trace_ids import new_ids

    for _ in range(50):
        first = new_ids()
        again = first.for_attempt(2)
        for rid in (first.request_id, again.request_id):
            assert uuid.UUID(rid).version == 4 and len(rid) == 32, rid
        assert again.request_id[:30] == first.request_id[:30] and again.request_id != first.request_id
    plugin = pytest.importorskip("starlette_context.plugins").RequestIdPlugin()  # the real validator, when installed
    plugin.validate_uuid(first.request_id)
    plugin.validate_uuid(again.request_id)


def test_a_retry_sends_the_users_own_request_id_again_as_it_was() -> None:
    network = Mock((503, {"retry-after": "1"}, b"busy"), OK_JSON)
    target = Target("http://127.0.0.1:9/v1", model="m", headers=(("X-Request-Id", "mine"),))
    with ProbeClient(target, ClientSettings(5.0, 4), clock=ScriptClock(), transport=network) as c:
        c.get_json("/models")
    assert [t.request_id for t in c.history] == ["mine", "mine"]
    assert c.history[0].traceparent != c.history[1].traceparent  # ours still renews per attempt


def test_a_retry_after_beyond_the_run_deadline_is_not_waited_for() -> None:
    clock = ScriptClock()
    network = Mock((503, {"retry-after": "2"}, b"busy"))
    with make(network, clock, deadline_at=clock.now() + 1.5) as c:
        t, _ = c.get_json("/models")
    assert t.status == 503 and not t.retried and len(network.seen) == 1 and clock.now() == 1000.0


def test_strict_mode_fails_a_request_beyond_the_senders_plan_and_counts_retries_apart() -> None:
    network = Mock((429, {"retry-after": "0"}, b""), OK_JSON)
    with make(network, plan=lambda: ("toy", 1), strict=True) as c:
        t, _ = c.get_json("/models")  # a 429, then its retry: one request of the plan
        assert t.ok and t.retried and c.requests_by_probe == {"toy": 1}
        with pytest.raises(PlanExceeded, match="probe toy sends GET /models beyond its declared plan of 1"):
            c.get_json("/models")
    assert len(network.seen) == 2
    with make(Mock(OK_JSON), plan=lambda: ("toy", 1), strict=False) as lax:
        lax.get_json("/models")
        lax.get_json("/models")  # counted, not refused, outside strict mode
    assert lax.requests_by_probe == {"toy": 2}


def test_for_run_maps_the_options_once() -> None:
    options = Options.of(timeout_s=7.5, max_requests=33, metrics_url="http://127.0.0.1:9100/metrics")
    with ProbeClient.for_run(TARGET, options, transport=Mock(OK_JSON)) as c:
        assert (c.timeout_s, c.max_requests) == (7.5, 33)
    with ProbeClient.for_run(TARGET, options, max_requests=1, transport=Mock(OK_JSON)) as preflight:
        assert preflight.max_requests == 1


def _two_requests(ctx: Context) -> str:
    ctx.client.get_json("/models")
    ctx.client.get_json("/models")
    return "sent"


def _one_model_list(e, o):
    return [request("GET", f"{e.base}/models", "", 1)]


OVER_PLAN: Probe[str] = Probe("over_plan", f"{__name__}:_two_requests", "builtins:str", "sends past its plan",
                              plan=_one_model_list)


def test_a_probe_sending_more_than_its_plan_fails_the_strict_run(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict] = []
    real = ProbeClient.for_run.__func__  # type: ignore[attr-defined]

    def for_run(cls, target, options, **run):
        built.append(run)
        return real(cls, target, options, transport=Mock(OK_JSON), **run)

    monkeypatch.setattr(ProbeClient, "for_run", classmethod(for_run))
    with pytest.raises(PlanExceeded, match="probe over_plan sends GET /models beyond its declared plan of 1"):
        Context(TARGET, strict=True).get(OVER_PLAN)
    lax = Context(TARGET, strict=False)
    assert lax.get(OVER_PLAN) == "sent" and lax.requests_sent == 2
    assert built and all(run["strict"] is ctx_strict for run, ctx_strict in zip(built, (True, False), strict=True))
    with pytest.raises(ProbeUnavailable):
        Context(None).client  # noqa: B018 - the property raises
