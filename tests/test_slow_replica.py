"""One slow replica behind a real balancer: named as such, never fitted as a floor or a queue (issue 15, item 4).

Real parts: Debian's haproxy (``balance roundrobin``) and nginx (``upstream``, round robin) in front
of two simulators, each in a process of its own (``llmdoctor serve-sim``), one healthy (~60 ms) and
one with a 500 ms floor. haproxy names the backend that answered in a response header, as operators
configure it (``http-response set-header X-Served-By %s``); nginx names none, so only the alternation
tells. The controls: the same balancers over two healthy simulators, where nothing may fire.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.cliutil import all_finding_ids, run_cli
from tests.gateways import Gateway, Haproxy, Nginx
from tests.processes import serve_sim_process

pytestmark = pytest.mark.slow  # real nginx and haproxy in front of simulators

BACKEND_HEADER = "http-response set-header X-Served-By %s"


@contextmanager
def _balanced(kind: type[Gateway], profiles: tuple[str, str], **kw: Any) -> Iterator[Gateway]:
    with serve_sim_process(profiles[0]) as (a, _), serve_sim_process(profiles[1]) as (b, _), \
            kind([("127.0.0.1", a), ("127.0.0.1", b)], **kw) as gw:
        yield gw


def _check(capsys: pytest.CaptureFixture[str], gw: Gateway) -> dict[str, Any]:
    result = run_cli(capsys, "check", "-e", gw.base_url, "--json")
    assert result.code in (0, 1, 2), result.err + gw.log_tail()
    return result.report


def _ld211(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD211"]


def _check_status(report: dict[str, Any], check_id: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["check_id"] == check_id)


def _confirmed(report: dict[str, Any]) -> list[str]:
    return [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])]


def _assert_no_floor_or_queue(report: dict[str, Any]) -> None:
    confirmed = _confirmed(report)
    assert "queueing" not in confirmed and "server_floor" not in confirmed, confirmed
    assert _check_status(report, "LD701")["status"] == "skipped"
    assert "two populations" in _check_status(report, "LD701")["reason"]
    assert not any(f.get("cause") == "queueing" for f in report["findings"]), report["findings"]


def test_haproxy_with_one_slow_backend_names_the_replica_by_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    with _balanced(Haproxy, ("healthy", "slow-floor"), directives=[BACKEND_HEADER]) as gw:
        report = _check(capsys, gw)
    (finding,) = _ld211(report)
    assert finding["severity"] == "warning" and finding["confidence"] == "high", finding
    assert "replica is slower" in finding["title"]
    labels = {e["label"]: e["value"] for e in finding["evidence"]}
    # haproxy's server names: s1 is the slow-floor simulator (the second upstream)
    assert labels.get("response header x-served-by on the slow requests") == "s1", labels
    assert labels.get("response header x-served-by on the fast requests") == "s0", labels
    # the two populations are ~500 ms apart; the impact is the slow share of that
    assert 350 <= labels["slow median"] - labels["fast median"] <= 650, labels
    _assert_no_floor_or_queue(report)


def test_nginx_upstream_with_one_slow_backend_is_seen_from_the_alternation(capsys: pytest.CaptureFixture[str]) -> None:
    with _balanced(Nginx, ("healthy", "slow-floor")) as gw:
        report = _check(capsys, gw)
    (finding,) = _ld211(report)
    assert finding["severity"] == "warning", finding
    assert "alternate" in finding["message"], finding["message"]
    _assert_no_floor_or_queue(report)


@pytest.mark.parametrize("kind", [Haproxy, Nginx], ids=["haproxy", "nginx"])
def test_two_even_backends_are_the_control(kind: type[Gateway], capsys: pytest.CaptureFixture[str]) -> None:
    directives = [BACKEND_HEADER] if kind is Haproxy else []
    with _balanced(kind, ("healthy", "healthy"), directives=directives) as gw:
        report = _check(capsys, gw)
    assert "LD211" not in all_finding_ids(report), _ld211(report)
    assert _check_status(report, "LD211")["status"] == "passed"
    assert "replica_imbalance" not in _confirmed(report)
    assert _check_status(report, "LD701")["status"] != "skipped"
