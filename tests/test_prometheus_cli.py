"""`--format prometheus`, `--push-gateway` and `--textfile` from the command line, against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import record_sim_run, run_cli
from tests.promtools import free_port
from tests.test_export import _Recorder

SELECT = "LD001,LD701"


def _status(text: str) -> dict[str, str]:
    """endpoint label -> the status whose llmdoctor_status series is 1."""
    out: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "llmdoctor_status":
            out.update({s.labels["endpoint"]: s.labels["status"] for s in family.samples if s.value == 1})
    return out


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = record_sim_run(tmp_path_factory.mktemp("prom") / "healthy.json", "healthy", SELECT.split(","))
    return path


def test_replay_as_prometheus(capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    result = run_cli(capsys, "replay", str(recording), "--format", "prometheus")
    families = {f.name: f for f in text_string_to_metric_families(result.out)}
    (endpoint,) = _status(result.out)
    assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1")
    assert {"llmdoctor_phase_seconds", "llmdoctor_ttft_seconds", "llmdoctor_requests_sent"} <= set(families)
    assert result.code == families["llmdoctor_exit_code"].samples[0].value


def test_a_fleet_is_one_exposition_then_pushed_per_endpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    gateway = _Recorder()
    import threading

    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    try:
        with SimServer(get_profile("healthy")) as healthy, SimServer(get_profile("server-error")) as broken:
            fleet.write_text(f'[endpoints.healthy]\nurl = "{healthy.url}"\n\n'
                             f'[endpoints.broken]\nurl = "{broken.url}"\n')
            result = run_cli(capsys, "check", "--endpoints", str(fleet), "--select", SELECT, "--rate", "50",
                             "--format", "prometheus", "--push-gateway", gateway.url, "--push-job", "nightly",
                             "--textfile", str(tmp_path))
    finally:
        gateway.shutdown()
        gateway.server_close()
    assert result.code == 2, result.err
    statuses = _status(result.out)
    assert statuses["broken"] == "critical" and statuses["healthy"] != "critical"
    assert sorted(p for _, p, _, _ in gateway.requests) == ["/metrics/job/nightly/instance/broken",
                                                           "/metrics/job/nightly/instance/healthy"]
    assert (tmp_path / "nightly.prom").read_text() == result.out  # the same exposition, in the textfile


def test_a_failed_push_prints_the_report_then_one_line_and_exits_unknown(
        capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    dead = f"http://ops:CANARY@127.0.0.1:{free_port()}"
    result = run_cli(capsys, "replay", str(recording), "--json", "--push-gateway", dead)
    report = json.loads(result.out)  # the diagnosis still printed, complete
    assert report["exit_code"] in (0, 1)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error: push to the Pushgateway http://***@127.0.0.1:")
    assert "CANARY" not in result.err and result.code == 3


@pytest.mark.parametrize("args, message", [
    (("--textfile", "/nonexistent/dir"), "--textfile /nonexistent/dir: no such directory"),
    (("--push-gateway", "ftp://gw"), "--push-gateway ftp://gw: use an http:// or https:// URL"),
    (("--push-job", "a/b", "--push-gateway", "http://gw:9091"), "--push-job 'a/b'"),
    (("--watch", "1", "--push-gateway", "http://gw:9091"), "not --watch"),
])
def test_bad_export_options_fail_before_anything_is_sent(capsys: pytest.CaptureFixture[str],
                                                        args: tuple[str, ...], message: str) -> None:
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url, *args)
        assert server.requests_received == 0
    assert result.code == 3 and message in result.err and result.out == "", result.err


def test_a_fleet_listing_one_endpoint_twice_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = tmp_path / "f.txt"
    fleet.write_text("http://127.0.0.1:9\nhttp://127.0.0.1:9\n")
    result = run_cli(capsys, "check", "--endpoints", str(fleet), "--format", "prometheus")
    assert result.code == 3 and "lists http://127.0.0.1:9 twice" in result.err
