"""Failed requests are counted, their pattern read, a 503 judged from its evidence (issue 15, item 1).

On loopback: the simulator refusing every 2nd request or in bursts (with and without Retry-After),
Debian's nginx rate-limiting the generation path (its HTML 503), and their controls where nothing
may fire. Plus the rules themselves on hand-built sequences.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmdoctor.analysis.failures import counts_as_trouble, failure_pattern, who_answered_503
from llmdoctor.measurements.ledger import RequestOutcome
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import all_finding_ids, run_cli
from tests.gateways import Nginx

LIMIT_ZONE = "limit_req_zone $binary_remote_addr zone=gen:1m rate=1r/s;"


def _outcome(i: int, status: int, *, at: float | None = None, ms: float = 30.0, **kw: Any) -> RequestOutcome:
    outcome = "ok" if status == 200 else f"http_{status}"
    return RequestOutcome("baseline", "POST", "/v1/chat/completions", at if at is not None else i * 0.1,
                          outcome, status=status, ttfb_ms=ms / 2, total_ms=ms, **kw)


def _seq(statuses: list[int], gap_s: float = 0.1) -> list[RequestOutcome]:
    return [_outcome(i, s, at=i * gap_s) for i, s in enumerate(statuses)]


# -- the rules --------------------------------------------------------------------------------------
def test_a_rejected_parameter_or_missing_route_is_not_endpoint_trouble() -> None:
    assert not counts_as_trouble(_outcome(0, 400)) and not counts_as_trouble(_outcome(0, 404))
    assert counts_as_trouble(_outcome(0, 429)) and counts_as_trouble(_outcome(0, 503))
    assert counts_as_trouble(_outcome(0, 500)) and not counts_as_trouble(_outcome(0, 200))


def test_every_nth_is_read_from_the_order_and_a_parallel_pair_keeps_its_places() -> None:
    assert failure_pattern(_seq([200, 429] * 4)).text.startswith("every 2nd request")
    assert failure_pattern(_seq([200, 200, 500] * 4)).text == "every 3rd request"
    seq = _seq([200, 200, 500] * 4)
    # requests 6 and 7 in flight together (overlapping spans): their order is unknown, the count goes on
    seq[6] = _outcome(6, 200, at=0.6, ms=200.0)
    seq[7] = _outcome(7, 200, at=0.61, ms=200.0)
    seq[8] = _outcome(8, 500, at=0.9)
    assert failure_pattern(seq).kind == "every_nth"


def test_bursts_pace_and_scattered_failures() -> None:
    bursts = failure_pattern(_seq([200, 200, 200, 429, 429, 200, 200, 200, 200, 429, 429, 429]))
    assert bursts.kind == "bursts" and "in a row" in bursts.text
    # refused within 0.1 s of the last accepted request, accepted 1 s after it: a rate limit
    paced = [_outcome(0, 200, at=0.0), _outcome(1, 503, at=0.05), _outcome(2, 503, at=0.1),
             _outcome(3, 200, at=1.1), _outcome(4, 503, at=1.15), _outcome(5, 503, at=1.2), _outcome(6, 200, at=2.3)]
    pace = failure_pattern(paced)
    assert pace.kind == "pace" and pace.paced and "one request per 1.1 s" in pace.text
    assert failure_pattern(_seq([200, 429, 200, 200, 200, 200, 429, 200, 200])).kind == "scattered"
    assert failure_pattern(_seq([200] * 5)).kind == "none"


def test_a_503_is_loading_only_when_it_says_so() -> None:
    ok = [_outcome(i, 200, ms=60.0) for i in range(3)]
    html = _outcome(3, 503, ms=1.0, content_type="text/html", server="nginx/1.22.1",
                    detail="HTTP 503: <html> <head><title>503 Service Temporarily Unavailable</title>")
    who, why = who_answered_503(html, [*ok, html])
    assert who == "gateway" and "HTML error page from nginx/1.22.1" in why and "answered in 0.5 ms" in why
    loading = _outcome(4, 503, ms=40.0, detail='HTTP 503: Loading model')
    assert who_answered_503(loading, [*ok, loading])[0] == "loading"
    busy = _outcome(5, 503, ms=40.0, detail="HTTP 503: overloaded / server_error")
    assert who_answered_503(busy, [*ok, busy])[0] == "overload"


# -- real runs on loopback --------------------------------------------------------------------------
def _check(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[dict[str, Any], int]:
    result = run_cli(capsys, "check", "-e", url, "--json", *args)
    assert result.code in (0, 1, 2), result.err
    return result.report, result.code


def _ld002(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD002"]


@pytest.mark.parametrize("knobs", [
    {"refuse_every": 2, "retry_after_s": 1.0},
    {"refuse_every": 2},
    {"refuse_every": 5, "refuse_burst": 2},
    {"refuse_every": 5, "refuse_burst": 2, "retry_after_s": 1.0},
], ids=["every-2nd-retry-after", "every-2nd", "bursts", "bursts-retry-after"])
def test_intermittent_429_is_a_rate_limiting_warning_with_its_share(
        capsys: pytest.CaptureFixture[str], knobs: dict[str, Any]) -> None:
    with SimServer(get_profile("healthy", **knobs)) as sim:
        report, code = _check(capsys, sim.url, "--no-followup")
        refused_by_server = sim.generation_requests
    (finding,) = _ld002(report)
    assert finding["severity"] == "warning" and finding["cause"] == "rate_limiting"
    assert "Rate limiting" in finding["title"] and "%" in finding["title"]
    evidence = {e["label"]: e["value"] for e in finding["evidence"]}
    generation = report["requests"]["generation"]
    assert evidence["failed"] == generation["failures"]["HTTP 429"] == generation["failed"]
    assert evidence["of generation requests after the first"] == generation["sent"] - 1
    assert generation["sent"] == refused_by_server  # every request the server saw is accounted for
    expected_share = 2 / 5 if knobs["refuse_every"] == 5 else 1 / 2
    assert abs(evidence["share"] / 100 - expected_share) <= 0.15, evidence
    if "retry_after_s" in knobs:
        assert evidence["Retry-After"] == "1" and report["requests"]["retried"] >= 1
        # Issue 26: each attempt is listed with its own id; the retry's is the first's ending "02", not "01".
        ids = report["requests"]["ids"]
        retries = [r for r in ids if r["attempt"] == 2]
        assert len(retries) == report["requests"]["retried"]
        firsts = {r["request_id"] for r in ids if r["attempt"] == 1}
        assert all(r["request_id"].endswith("02") and r["request_id"][:-2] + "01" in firsts for r in retries), retries
    else:
        assert evidence["Retry-After"] == "none sent"
    pattern = evidence["pattern"]
    assert ("every 2nd" in pattern) if knobs["refuse_every"] == 2 else ("in a row" in pattern), pattern
    assert code >= 1 and report["status"] != "ok"


def test_a_healthy_server_has_no_failure_finding_and_every_request_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as sim:
        report, _ = _check(capsys, sim.url, "--no-followup")
    assert not _ld002(report)
    generation = report["requests"]["generation"]
    assert generation["failed"] == 0 and generation["sent"] >= 10 and report["requests"]["troubled_generations"] == 0
    assert {c["check_id"]: c["status"] for c in report["checks"]}["LD002"] == "passed"


def test_failed_requests_never_end_ok_even_when_no_selected_check_reports_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy", refuse_every=2)) as sim:
        result = run_cli(capsys, "check", "-e", sim.url, "--select", "LD701", "--no-followup")
    assert result.code == 1, result.out
    assert "Result: WARNING" in result.out and "Result: OK" not in result.out
    assert "generation" in result.out and "× HTTP 429" in result.out


def test_a_sweep_broken_by_refusals_says_so_and_does_not_blame_ignore_eos(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: 429s broke the sweep, and LD702's skip reason blamed the server for ignoring ignore_eos."""
    with SimServer(get_profile("healthy", refuse_every=2, refuse_burst=1)) as sim:
        report, _ = _check(capsys, sim.url, "--select", "LD70", "--no-followup")
    ld702 = {c["check_id"]: c for c in report["checks"]}["LD702"]
    assert ld702["status"] == "skipped" and "ignore_eos" not in ld702["reason"], ld702
    assert "HTTP 429" in ld702["reason"], ld702
    # the baseline got fewer samples than asked, and says so wherever it is quoted
    assert "of 5 samples asked" in report["breakdown"]["label"], report["breakdown"]["label"]


@pytest.mark.slow  # a real nginx
def test_nginx_rate_limit_in_front_is_a_limit_not_a_model_loading(capsys: pytest.CaptureFixture[str]) -> None:
    """Debian's nginx with ``limit_req`` (1 r/s, no burst) on the generation path answers the excess at once
    with its HTML 503 page: a gateway limiting in front of the model, never "the model is loading"."""
    with SimServer(get_profile("healthy")) as sim, \
            Nginx([("127.0.0.1", sim.port)], http_directives=[LIMIT_ZONE],
                  locations={"/v1/chat/completions": ["limit_req zone=gen;"]}) as gw:
        report, _ = _check(capsys, gw.url, "--no-followup")
        refused = sum(1 for line in (gw.dir / "access.log").read_text().splitlines() if '" 503 ' in line)
    (finding,) = _ld002(report)
    assert finding["cause"] == "rate_limiting" and finding["severity"] == "warning"
    assert "from a gateway in front of the model" in finding["message"]
    assert "HTML error page from nginx" in finding["message"] and "not the model loading" in finding["message"]
    assert refused == report["requests"]["generation"]["failures"]["HTTP 503"] >= 2
    ids = all_finding_ids(report)
    assert "LD305" not in ids and not any(f.get("cause") == "cold_start" for f in report["findings"])


@pytest.mark.slow  # a real nginx
def test_nginx_without_a_limit_is_the_control(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as sim, Nginx([("127.0.0.1", sim.port)]) as gw:
        report, _ = _check(capsys, gw.url, "--no-followup")
    assert not _ld002(report) and report["requests"]["generation"]["failed"] == 0


@pytest.mark.slow  # a real nginx
def test_nginx_limit_req_answering_429_is_rate_limiting_counted_from_its_own_log(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Debian's nginx with ``limit_req`` and ``limit_req_status 429`` (as operators set it for APIs): real
    429s from a real gateway. Every one is counted (nginx's access log agrees), the run is never OK, and
    the cause is rate limiting, not the model loading."""
    with SimServer(get_profile("healthy")) as sim, \
            Nginx([("127.0.0.1", sim.port)], http_directives=[LIMIT_ZONE],
                  locations={"/v1/chat/completions": ["limit_req zone=gen;", "limit_req_status 429;"]}) as gw:
        report, code = _check(capsys, gw.url, "--no-followup")
        refused = sum(1 for line in (gw.dir / "access.log").read_text().splitlines() if '" 429 ' in line)
    (finding,) = _ld002(report)
    assert finding["cause"] == "rate_limiting" and finding["severity"] == "warning", finding
    evidence = {e["label"]: e["value"] for e in finding["evidence"]}
    generation = report["requests"]["generation"]
    assert refused == generation["failures"]["HTTP 429"] >= 2, (refused, generation)
    assert evidence["failed"] == generation["failed"], (evidence, generation)
    assert code >= 1 and report["status"] != "ok"
    assert "LD305" not in all_finding_ids(report)


def test_a_run_whose_requests_got_no_answer_is_never_ok(capsys: pytest.CaptureFixture[str]) -> None:
    """``--select LD3`` against a server that is down: every selected check is skipped (their probes
    had no answer) and LD001, which would say so, is not selected — the run exited 0 (OK) before."""
    import socket

    with socket.socket() as closed:  # a port on this host where nothing listens
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = run_cli(capsys, "check", "-e", f"http://127.0.0.1:{port}", "--select", "LD3", "--json")
    assert down.report["requests"]["unanswered"] >= 1 and down.report["findings"] == []
    assert down.code == 1 and down.report["status"] == "warning"
    with SimServer(get_profile("healthy")) as server:  # control: the same selection on a server that answers
        up = run_cli(capsys, "check", "-e", server.url, "--select", "LD3", "--json")
    assert up.report["requests"]["unanswered"] == 0 and up.code == 0
