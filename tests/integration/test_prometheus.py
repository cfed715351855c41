"""A fleet's verdicts reach a real Prometheus through a real Pushgateway, and the example alerts fire.

Debian's ``prometheus`` and ``prometheus-pushgateway`` run on loopback (free ports, their own data in a
temporary directory, a 1 s scrape and rule evaluation interval, ``deploy/prometheus/rules.yml``
loaded) and are stopped after, process group and all. ``llmdoctor check --endpoints`` runs as a real
process over three simulators — healthy, a cold start, every generation failing with HTTP 500 — and
pushes; then Prometheus's HTTP API is polled (bounded, never a fixed sleep) until the metrics are
there and the alerts fire for the right endpoints and not for the healthy one. Without the binaries
the test is skipped with that reason, or fails under ``LLMDOCTOR_REQUIRE_PROMETHEUS=1`` (CI).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import run_process
from tests.promtools import Daemon, free_port, get_json, poll, require_tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
WAIT_S = 60.0


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    binary = require_tool("pushgateway")
    port = free_port()
    with Daemon("pushgateway", [binary, f"--web.listen-address=127.0.0.1:{port}",
                                f"--persistence.file={tmp_path / 'pushgateway.data'}"],
                tmp_path / "pushgateway.log", f"http://127.0.0.1:{port}/-/ready"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def prometheus(tmp_path: Path, pushgateway: str) -> Iterator[str]:
    binary = require_tool("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['{pushgateway.removeprefix('http://')}']\n"
    )
    with Daemon("prometheus", [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}"],
                tmp_path / "prometheus.log", f"http://127.0.0.1:{port}/-/ready"):
        yield f"http://127.0.0.1:{port}"


def _query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    data = get_json(f"{prometheus}/api/v1/query?query={urllib.parse.quote(promql)}")
    assert data["status"] == "success", data
    result: list[dict[str, Any]] = data["data"]["result"]
    return result


def _firing(prometheus: str) -> list[dict[str, str]]:
    alerts = get_json(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
    return [a["labels"] for a in alerts if a["state"] == "firing"]


def test_a_pushed_fleet_reaches_prometheus_and_fires_the_alerts(
        tmp_path: Path, pushgateway: str, prometheus: str) -> None:
    fleet = tmp_path / "fleet.toml"
    with SimServer(get_profile("healthy")) as healthy, SimServer(get_profile("cold-start")) as cold, \
            SimServer(get_profile("server-error")) as broken:
        fleet.write_text("".join(f'[endpoints.{name}]\nurl = "{sim.url}"\n\n'
                                 for name, sim in (("healthy", healthy), ("cold", cold), ("broken", broken))))
        run = run_process("check", "--endpoints", str(fleet), "--select", "LD001,LD301,LD701", "--rate", "50",
                          "--format", "prometheus", "--push-gateway", pushgateway)
    assert run.code == 2, run.err  # the worst of the fleet: broken is critical
    assert run.err == "", run.err  # the pushes went through

    def statuses() -> tuple[dict[str, str] | None, str]:
        rows = _query(prometheus, 'llmdoctor_status == 1')
        seen = {r["metric"]["endpoint"]: r["metric"]["status"] for r in rows}
        return (seen if len(seen) == 3 else None), f"llmdoctor_status == 1: {rows}"

    seen = poll("the three endpoints' status in Prometheus", statuses, WAIT_S)
    assert seen["broken"] == "critical" and seen["healthy"] != "critical", seen
    (row,) = _query(prometheus, 'llmdoctor_exit_code{endpoint="broken"}')
    # honor_labels kept the push's grouping: job llmdoctor, instance = the endpoint's name
    assert (row["metric"]["job"], row["metric"]["instance"], row["value"][1]) == ("llmdoctor", "broken", "2")
    impact = _query(prometheus, 'llmdoctor_finding_impact_seconds{cause="cold_start"}')
    assert [r["metric"]["endpoint"] for r in impact] == ["cold"] and float(impact[0]["value"][1]) > 0.5, impact

    def alerts() -> tuple[list[dict[str, str]] | None, str]:
        firing = _firing(prometheus)
        names = {(a["alertname"], a.get("endpoint")) for a in firing}
        wanted = {("LlmdoctorEndpointCritical", "broken"), ("LlmdoctorColdStart", "cold")}
        return (firing if wanted <= names else None), f"firing: {sorted(names)}"

    firing = poll("the critical and cold-start alerts firing", alerts, WAIT_S)
    critical = {a["endpoint"] for a in firing if a["alertname"] == "LlmdoctorEndpointCritical"}
    assert critical == {"broken"}, firing  # the control: the healthy endpoint does not page
    assert not [a for a in firing if a.get("endpoint") == "healthy" and a["alertname"] != "LlmdoctorEndpointWarning"]
    assert not [a for a in firing if a["alertname"] == "LlmdoctorNotReporting"]


def test_a_push_replaces_the_endpoints_group_on_the_real_pushgateway(pushgateway: str) -> None:
    """A finding that went away disappears; another endpoint's group is left alone."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from llmdoctor.render.prometheus import result_for_report
    from llmdoctor.reporting.publish import push
    from tests.test_prometheus import _report

    def findings() -> set[tuple[str, str]]:
        with urllib.request.urlopen(f"{pushgateway}/metrics", timeout=5) as resp:  # noqa: S310 - loopback
            text = resp.read().decode()
        return {(s.labels["instance"], s.labels["check_id"]) for f in text_string_to_metric_families(text)
                if f.name == "llmdoctor_findings" for s in f.samples}

    push(result_for_report(_report(), "a"), pushgateway)
    push(result_for_report(_report(), "b"), pushgateway)
    assert findings() == {(i, c) for i in "ab" for c in ("LD301", "LD711", "LD702")}
    fixed = _report()
    fixed.findings[:] = [f for f in fixed.findings if f.check_id != "LD711"]
    push(result_for_report(fixed, "a"), pushgateway)
    assert findings() == {("a", "LD301"), ("a", "LD702"), ("b", "LD301"), ("b", "LD711"), ("b", "LD702")}
