"""Real gateways in front of a model server: a held-back stream (LD410) and time in front of it (LD411).

nginx 1.22 and haproxy 2.6 from Debian's packages (tests/gateways.py) run on loopback in front of
the simulator and of the real llama.cpp server (llama-cpp-python), each case with its control:

- nginx with a bare ``proxy_pass`` (its defaults: HTTP/1.0 to the upstream, ``proxy_buffering on``)
  holds a close-delimited stream → LD410; ``proxy_buffering off`` → no LD410. haproxy's defaults
  let the kernel merge small frames → LD410; ``option http-no-delay`` → no LD410.
- llama-cpp-python sends ``X-Accel-Buffering: no`` with its streams, which nginx honours: the
  defaults do not hold it (control); ``proxy_ignore_headers X-Accel-Buffering`` makes them → LD410.
- on a busy host (a busy loop per core, tests/processes.py), the simulator in a process of its own
  with no server token clock (openai flavor: only the sweep's rate, measured by the client, anchors
  the streams): streamed to the client directly → no LD410, also when a thread of the client's own
  process holds the interpreter so that its reads come late and in bursts; the control, nginx
  defaults in front on the same busy host → LD410 still fires (at low confidence).
- nginx's ``auth_request`` to an ``echo_sleep`` location (Debian's libnginx-mod-http-echo) is a
  gateway that spends a fixed time on every request before the model server sees it → LD411 with
  that time ± 20%; the same time spent inside the model (the simulator's ``fixed_ms``) behind a
  plain nginx → no LD411 (control); the model server directly → no LD411.

Each run is the checklist's own measuring (``diagnose``) restricted to the check under test; the
JSON report of each is validated against the schema. Without nginx these tests skip, or fail
under ``LLMDOCTOR_REQUIRE_GATEWAYS=1`` (CI); the llama.cpp ones follow ``LLMDOCTOR_REQUIRE_LLAMACPP``.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from llmdoctor.checks.ld411_in_front_of_server import IN_FRONT_SHARE, MIN_IN_FRONT_MS

from llmdoctor.attribution import join
from llmdoctor.clocks import judge
from llmdoctor.doctor import diagnose
from llmdoctor.probes.client import ProbeClient
from llmdoctor.render.json import report_to_dict
from llmdoctor.report import Report
from llmdoctor.runner import CheckOutcome, Status
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Options, Target
from tests.cliutil import run_cli, validate_report
from tests.gateways import Haproxy, Nginx
from tests.llamacpp_server import LlamaCppServer
from tests.processes import busy_loops, holding_interpreter, serve_sim_process

#: The gateway's own delay before the model server sees a request (nginx echo_sleep, seconds).
AUTH_DELAY_S = 0.3
AUTH_LOCATION = f"location = /auth {{ internal; echo_sleep {AUTH_DELAY_S}; }}"
TOLERANCE = 0.2


def _nginx(upstream: tuple[str, int], kind: str) -> Nginx:
    """nginx in front of `upstream`: ``bare`` (its defaults), ``bare-ignore`` (defaults, and it ignores
    the upstream's X-Accel-Buffering), ``unbuffered``, or ``auth-delay`` (unbuffered, and an auth
    subrequest that sleeps AUTH_DELAY_S)."""
    if kind == "bare":
        return Nginx([upstream], http11=False)
    if kind == "bare-ignore":
        return Nginx([upstream], http11=False, directives=["proxy_ignore_headers X-Accel-Buffering;"])
    if kind == "unbuffered":
        return Nginx([upstream], directives=["proxy_buffering off;"])
    if kind == "auth-delay":
        return Nginx([upstream], directives=["proxy_buffering off;", "auth_request /auth;"],
                     modules=[Nginx.ECHO], blocks=[AUTH_LOCATION])
    raise ValueError(kind)


def _run(url: str, check_id: str, model: str | None = None) -> tuple[Report, CheckOutcome]:
    report, _ = diagnose(Target(base_url=url, model=model), Options.of(samples=5, followup=False),
                         selected=[check_id])
    validate_report(report_to_dict(report))
    outcome = next(o for o in report.checks if o.check_id == check_id)
    return report, outcome


@contextlib.contextmanager
def _sim(flavor: str = "vllm", **overrides: Any) -> Iterator[SimServer]:
    with SimServer(get_profile("healthy", flavor=flavor, **overrides)) as sim:
        yield sim


def _split(report: Report) -> tuple[float | None, float | None]:
    b = report.breakdown
    assert b is not None
    assert abs(sum(p.ms for p in b.phases) - b.total_ms) < 0.5  # the phases add up to the total
    assert all(p.ms >= 0 for p in b.phases)
    return b.in_front_ms, b.server_ms


# -- held-back stream (LD410) ---------------------------------------------------------------------
@pytest.mark.parametrize("flavor", ["vllm", "openai"])
def test_nginx_defaults_hold_the_stream(flavor: str) -> None:
    with _sim(flavor) as sim, _nginx(("127.0.0.1", sim.port), "bare") as gw:
        report, outcome = _run(gw.base_url, "LD410")
    assert outcome.status == Status.FAILED, outcome.reason
    (finding,) = outcome.findings
    assert "held back" in finding.title
    assert finding.cause is not None and finding.cause.value == "held_back_stream"
    assert (finding.impact_ms or 0.0) > 20.0
    b = report.breakdown
    assert b is not None and any(p.name.startswith("delivery") for p in b.phases)


def test_haproxy_defaults_hold_small_frames() -> None:
    """Measured: haproxy 2.6 without ``option http-no-delay`` lets the kernel merge small SSE frames
    (it sends with MSG_MORE): short answers arrive in one read, long ones in bursts."""
    with _sim() as sim, Haproxy([("127.0.0.1", sim.port)]) as gw:
        _, outcome = _run(gw.base_url, "LD410")
    assert outcome.status == Status.FAILED, outcome.reason
    assert any("http-no-delay" in step for step in outcome.findings[0].fix.steps)


@pytest.mark.parametrize("gateway", ["unbuffered", "haproxy-no-delay"])
def test_a_streaming_gateway_does_not_hold_it(gateway: str) -> None:
    """Control: nginx with proxy_buffering off, haproxy with option http-no-delay pass the stream as it comes."""
    with _sim() as sim:
        upstream = ("127.0.0.1", sim.port)
        gw = (Haproxy([upstream], directives=["option http-no-delay"]) if gateway.startswith("haproxy")
              else _nginx(upstream, gateway))
        with gw:
            _, outcome = _run(gw.base_url, "LD410")
    assert outcome.status == Status.PASSED, (outcome.reason, outcome.findings)


def test_the_simulator_directly_is_not_held() -> None:
    with _sim() as sim:
        _, outcome = _run(sim.base_url, "LD410")
    assert outcome.status == Status.PASSED, (outcome.reason, outcome.findings)


# -- held-back stream on a busy host: only the sweep's rate anchors it ----------------------------
#: Long enough for one LD410 run on a busy host (a few seconds quiet), bounded either way.
BUSY_SECONDS = 60.0


@contextlib.contextmanager
def _busy_host(starved: bool) -> Iterator[None]:
    """A busy loop per core; with `starved`, also a thread of this (the client's) process holding the interpreter."""
    with busy_loops(seconds=BUSY_SECONDS), (holding_interpreter() if starved else contextlib.nullcontext()):
        yield


@pytest.mark.parametrize("starved", [False, True], ids=["busy", "busy-and-starved"])
def test_a_busy_client_streamed_directly_is_not_held(starved: bool) -> None:
    """A client that reads late sees bursts, but no hop held them: never "held back" on the sweep's rate alone."""
    with serve_sim_process("healthy", "openai") as (port, _), _busy_host(starved):
        report, outcome = _run(f"http://127.0.0.1:{port}/v1", "LD410")
    assert report.client_host is not None and report.client_host.saturated, report.client_host
    assert outcome.status in (Status.PASSED, Status.SKIPPED), (outcome.reason, outcome.findings)
    if outcome.status == Status.SKIPPED:
        assert "starved of CPU" in outcome.reason, outcome.reason


def test_nginx_defaults_on_a_busy_host_still_hold_the_stream() -> None:
    """Control: the same busy host, nginx defaults in front: its Server header names it and it holds the
    short answers whole until the end, so LD410 fires, saying the host was busy."""
    with serve_sim_process("healthy", "openai") as (port, _), _nginx(("127.0.0.1", port), "bare") as gw, \
            _busy_host(False):
        report, outcome = _run(gw.base_url, "LD410")
    assert report.client_host is not None and report.client_host.saturated, report.client_host
    assert outcome.status == Status.FAILED, outcome.reason
    (finding,) = outcome.findings
    assert "held back" in finding.title and "busy client" in finding.message
    assert finding.confidence.value == "low"


# -- time in front of the model server (LD411) ----------------------------------------------------
@pytest.mark.parametrize("flavor", ["openai", "llamacpp", "ollama"])
def test_a_gateway_that_adds_the_floor_is_named(flavor: str) -> None:
    """The gateway's 300 ms is attributed to it, not to the model (whose own clock says it is fast)."""
    with _sim(flavor) as sim, _nginx(("127.0.0.1", sim.port), "auth-delay") as gw:
        report, outcome = _run(gw.base_url, "LD411")
    assert outcome.status == Status.FAILED, outcome.reason
    (finding,) = outcome.findings
    assert finding.cause is not None and finding.cause.value == "gateway_overhead"
    delay = AUTH_DELAY_S * 1000
    assert finding.impact_ms is not None and abs(finding.impact_ms - delay) <= TOLERANCE * delay, finding.impact_ms
    in_front, server = _split(report)
    assert in_front is not None and abs(in_front - delay) <= TOLERANCE * delay
    assert server is not None and server < in_front


def test_the_same_delay_inside_the_model_is_not_in_front() -> None:
    """Control: 300 ms more of the model's own floor behind a plain nginx: the server's clock covers it."""
    with _sim("openai", fixed_ms=325.0) as sim, _nginx(("127.0.0.1", sim.port), "unbuffered") as gw:
        report, outcome = _run(gw.base_url, "LD411")
    assert outcome.status == Status.PASSED, (outcome.reason, outcome.findings)
    in_front, server = _split(report)
    assert in_front is not None and server is not None and server > 250.0 and in_front < 50.0


def test_the_first_screen_says_how_much_is_in_front_and_in_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``llmdoctor check`` behind the 300 ms gateway: the split is on the first screen (24 lines), and
    the JSON carries it with each phase's clock."""
    with _sim("openai") as sim, _nginx(("127.0.0.1", sim.port), "auth-delay") as gw:
        text = run_cli(capsys, "check", "-e", gw.base_url, "--no-followup", "--select", "LD411,LD702")
        data = run_cli(capsys, "check", "-e", gw.base_url, "--no-followup", "--select", "LD411", "--json").report
    first_screen = "\n".join(text.out.splitlines()[:24])
    line = re.search(r"By the server's own clock \(openai-processing-ms\): ([\d,]+) ms in front of the model "
                     r"server.*?, ([\d,.]+) ms in the server", first_screen, re.S)
    assert line is not None, first_screen
    delay = AUTH_DELAY_S * 1000
    assert abs(float(line.group(1).replace(",", "")) - delay) <= TOLERANCE * delay
    split = data["breakdown"]["split"]
    assert abs(split["in_front_ms"] - delay) <= TOLERANCE * delay and split["sources"] == ["openai-processing-ms"]
    clocks = {p["name"]: p["clock"] for p in data["breakdown"]["phases"]}
    assert clocks["in front of the model server"] == "inferred"
    assert clocks["server, until its headers"] == "server_header"
    assert data["schema_version"] == "1.7"


# -- the real llama.cpp server --------------------------------------------------------------------
def test_llamacpp_stream_passes_nginx_defaults_by_its_header(llama_server: LlamaCppServer) -> None:
    """Control: llama-cpp-python sends X-Accel-Buffering: no, so even nginx's defaults stream it."""
    with _nginx(("127.0.0.1", llama_server.port), "bare") as gw:
        _, outcome = _run(gw.base_url, "LD410", model="tiny-llama")
    assert outcome.status == Status.PASSED, (outcome.reason, outcome.findings)


def test_llamacpp_stream_held_when_nginx_ignores_that_header(llama_server: LlamaCppServer) -> None:
    with _nginx(("127.0.0.1", llama_server.port), "bare-ignore") as gw:
        _, outcome = _run(gw.base_url, "LD410", model="tiny-llama")
    assert outcome.status == Status.FAILED, outcome.reason
    assert "held back" in outcome.findings[0].title


def test_llamacpp_behind_a_slow_gateway(llama_server: LlamaCppServer) -> None:
    """llama-cpp-python's openai-processing-ms (sent with a stream's headers) anchors the split.

    The gateway's 300 ms is always found in front of the server (± 20%). Whether LD411 fires also
    depends on the model's own time, which a busy host stretches (the check needs 20% of the wait in
    front): it must fire whenever the measured split meets its rule, and then with the delay as impact.
    """
    with _nginx(("127.0.0.1", llama_server.port), "auth-delay") as gw:
        report, outcome = _run(gw.base_url, "LD411", model="tiny-llama")
    delay = AUTH_DELAY_S * 1000
    in_front, server = _split(report)
    assert in_front is not None and server is not None, report.breakdown
    assert abs(in_front - delay) <= TOLERANCE * delay, (in_front, server)
    if in_front / (in_front + server) >= IN_FRONT_SHARE:
        assert outcome.status == Status.FAILED, (outcome.reason, in_front, server)
        impact = outcome.findings[0].impact_ms
        assert impact is not None and abs(impact - delay) <= TOLERANCE * delay, impact
    else:
        assert outcome.status == Status.PASSED, (outcome.reason, in_front, server)


def test_llamacpp_directly_has_nothing_in_front(llama_server: LlamaCppServer) -> None:
    report, outcome = _run(llama_server.base_url, "LD411", model="tiny-llama")
    assert outcome.status == Status.PASSED, (outcome.reason, outcome.findings)
    in_front, _ = _split(report)
    assert in_front is not None and in_front < MIN_IN_FRONT_MS


PERF_TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([\d.]+) ms")
#: The joined server time vs llama.cpp's own logged total: 15%, and at least 10 ms (the header is whole
#: milliseconds; tokenization and the chat template run before llama.cpp's clock starts).
LOG_TOLERANCE = 0.15
LOG_FLOOR_MS = 10.0


def test_the_joined_server_time_agrees_with_llamacpps_own_log(llama_server: LlamaCppServer) -> None:
    """The server's share of each streamed request, by the join, against llama.cpp's ``total time`` line.

    (llama-cpp-python's ``prompt eval time`` line does not time its prompt — it logs ~0 ms for a
    19-token prompt and counts the prompt in ``eval time`` — so the whole is compared, not its parts.)
    """
    offset = len(llama_server.log_text())
    with ProbeClient(Target(llama_server.base_url, model="tiny-llama"), timeout_s=60, max_requests=10) as client:
        timings = [client.chat("Say ok.", max_tokens=32, extra={"logit_bias": {"2": -100}}) for _ in range(4)]
    assert all(t.ok for t in timings), timings
    deadline = time.monotonic() + 10.0
    while len(totals := [float(x) for x in PERF_TOTAL.findall(llama_server.log_text()[offset:])]) < len(timings):
        assert time.monotonic() < deadline, "llama.cpp logged no total time for every request"
        time.sleep(0.05)
    pairs = []
    for t, logged in zip(timings, totals):
        j = join(t, judge(t))
        assert j.anchor == "headers" and j.server_ms is not None, j.notes
        pairs.append((round(j.server_ms, 1), logged))
        assert abs(j.server_ms - logged) <= max(LOG_TOLERANCE * logged, LOG_FLOOR_MS), pairs
    print(f"\njoined server time vs llama.cpp's logged total (ms): {pairs}")
