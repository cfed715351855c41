"""Fleets, side-by-side comparison and watch mode against real simulators over loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from llmdoctor.fleet import RateLimiter, load_endpoints, worst_exit_code
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import run_cli, validate_report

COMPARE_SCHEMA = json.loads(resources.files("llmdoctor").joinpath("schema/compare.schema.json").read_text())


def test_rate_limiter_spaces_calls_across_threads() -> None:
    now = [0.0]
    slept: list[float] = []
    lock = threading.Lock()

    def sleep(s: float) -> None:
        with lock:
            slept.append(s)

    limiter = RateLimiter(4.0, clock=lambda: now[0], sleep=sleep)
    threads = [threading.Thread(target=limiter.acquire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(slept) == pytest.approx([0.25 * i for i in range(1, 8)])  # the first goes at once


def test_worst_exit_code_ranks_critical_above_unknown() -> None:
    assert worst_exit_code([0, 1, 3]) == 3
    assert worst_exit_code([3, 2, 1]) == 2
    assert worst_exit_code([]) == 0


def test_endpoints_file_formats(tmp_path: Path) -> None:
    plain = tmp_path / "fleet.txt"
    plain.write_text("# prod\nhttp://a:8000\n\nhttp://b:8000/v1\n")
    assert [e.url for e in load_endpoints(str(plain))] == ["http://a:8000", "http://b:8000/v1"]
    toml = tmp_path / "fleet.toml"
    toml.write_text('[endpoints.prod]\nurl = "http://a:8000"\nmodel = "m"\napi_key_env = "PROD_KEY"\n')
    (entry,) = load_endpoints(str(toml))
    assert (entry.name, entry.model, entry.api_key_env) == ("prod", "m", "PROD_KEY")
    bad = tmp_path / "bad.toml"
    bad.write_text('[endpoints.x]\nmodel = "m"\n')
    with pytest.raises(ValueError, match="has no url"):
        load_endpoints(str(bad))


def test_fleet_ndjson_table_worst_exit_and_bounded_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_KEY", "fleet-secret-key")
    fleet = tmp_path / "fleet.toml"
    with SimServer(get_profile("healthy")) as ok, SimServer(get_profile("cold-start")) as cold, \
            SimServer(get_profile("unauthorized", require_api_key="fleet-secret-key")) as keyed:
        fleet.write_text(
            f'[endpoints.ok]\nurl = "{ok.url}"\n\n[endpoints.cold]\nurl = "{cold.url}"\n\n'
            f'[endpoints.keyed]\nurl = "{keyed.url}"\napi_key_env = "FLEET_KEY"\n\n'
            '[endpoints.down]\nurl = "http://127.0.0.1:9"\n'
        )
        args = ("check", "--endpoints", str(fleet), "--select", "LD001,LD301,LD701", "--rate", "20")
        started = time.monotonic()
        as_json = run_cli(capsys, *args, "--json")
        elapsed = time.monotonic() - started
        sent = ok.requests_received + cold.requests_received + keyed.requests_received
        text = run_cli(capsys, *args)
    lines = [json.loads(line) for line in as_json.out.splitlines()]
    assert [r["name"] for r in lines] == ["ok", "cold", "keyed", "down"]
    for r in lines:
        validate_report(r)
    by_name = {r["name"]: r for r in lines}
    assert by_name["ok"]["status"] == "ok" and by_name["keyed"]["status"] == "ok"
    assert by_name["cold"]["findings"][0]["check_id"] == "LD301"
    assert by_name["down"]["status"] == "critical"
    assert as_json.code == 2 == text.code  # the worst endpoint decides
    assert elapsed >= (sent - 1) / 20  # the fleet-wide rate bound held (a lower bound only: never flaky)
    for name in ("ok", "cold", "keyed", "down"):
        assert name in text.out
    assert "CRITICAL" in text.out and "fleet-secret-key" not in as_json.out + text.out


def test_fleet_rejects_endpoint_and_endpoints_together(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = tmp_path / "f.txt"
    fleet.write_text("http://127.0.0.1:9\n")
    result = run_cli(capsys, "check", "-e", "http://127.0.0.1:9", "--endpoints", str(fleet))
    assert result.code == 3 and "not both" in result.err


def test_fleet_never_prints_url_credentials(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = tmp_path / "f.txt"
    fleet.write_text("http://u:CANARY-PW@127.0.0.1:9/?token=CANARY-TOK\nhttp://u:CANARY-PW@127.0.0.1:9/v1\n")
    for fmt in ((), ("--json",)):
        result = run_cli(capsys, "check", "--endpoints", str(fleet), "--select", "LD001", *fmt)
        assert result.code == 2 and "CANARY" not in result.out + result.err, result.out
        assert "http://***@127.0.0.1:9" in result.out
    fleet.write_text("http://u:CANARY-PW@[::1\n")
    result = run_cli(capsys, "check", "--endpoints", str(fleet))
    assert result.code == 3 and "CANARY" not in result.out + result.err, result.err


def test_compare_finds_the_slower_phase_and_not_noise(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy", fixed_ms=100.0, jitter_ms=5.0)) as a, \
            SimServer(get_profile("healthy", fixed_ms=180.0, jitter_ms=5.0, seed=1)) as b, \
            SimServer(get_profile("healthy", fixed_ms=100.0, jitter_ms=5.0, seed=2)) as a2:
        differs = run_cli(capsys, "compare", "-e", a.url, "-e", b.url, "--samples", "8", "--json")
        same = run_cli(capsys, "compare", "-e", a.url, "-e", a2.url, "--samples", "8", "--json")
        text = run_cli(capsys, "compare", "-e", a.url, "-e", b.url, "--samples", "6")
        assert a2.requests_received == 1 + 1 + 8  # /models, one warm-up, 8 interleaved samples
    for result in (differs, same):
        jsonschema.validate(json.loads(result.out), COMPARE_SCHEMA)
    verdicts = {c["metric"]: c["verdict"] for c in json.loads(differs.out)["comparisons"]}
    assert verdicts["ttft"] == verdicts["total"] == verdicts["wait for first token"] == "regression"
    assert verdicts["decode"] == "no-change" and differs.code == 1
    assert all(c["verdict"] == "no-change" for c in json.loads(same.out)["comparisons"]) and same.code == 0
    assert "B SLOWER" in text.out and "wait for first token" in text.out


def test_compare_needs_two_endpoints(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "compare", "-e", "http://127.0.0.1:9")
    assert result.code == 3 and "exactly two" in result.err


def test_watch_rounds_as_ndjson(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--watch", "0.2", "--watch-count", "2", "--json",
                         "--samples", "3")
    rounds = [json.loads(line) for line in result.out.splitlines()]
    assert len(rounds) == 2 and result.code == 0
    for r in rounds:
        validate_report(r)
        assert {c["check_id"] for c in r["checks"]} == {"LD001", "LD701"}
        assert r["requests"]["sent"] <= r["requests"]["budget"]


def test_watch_exits_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    with SimServer(get_profile("healthy")) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmdoctor", "check", "-e", server.url, "--watch", "0.2", "--json",
             "--samples", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ},
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # one complete round
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert json.loads(first)["status"] == "ok"
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_fleet_dry_run_sends_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--dry-run with --endpoints prints each endpoint's plan; it used to run the fleet for real."""
    with SimServer(get_profile("healthy")) as a, SimServer(get_profile("healthy")) as b:
        fleet = tmp_path / "fleet.toml"
        fleet.write_text(f'[endpoints.a]\nurl = "{a.url}"\n\n[endpoints.b]\nurl = "{b.url}"\nmodel = "m"\n')
        result = run_cli(capsys, "check", "--endpoints", str(fleet), "--dry-run", "--select", "LD001,LD701",
                         "--push-gateway", "http://127.0.0.1:9")
        assert a.requests_received == b.requests_received == 0
    assert result.code == 0 and result.err == "", result.err
    assert "a fleet of 2 endpoints" in result.out and "[a]\n" in result.out and "[b]\n" in result.out
    assert f"GET  {a.url}/v1/models" in result.out and f"{b.url}/v1/chat/completions" in result.out
    watch = run_cli(capsys, "check", "-e", "http://127.0.0.1:9", "--watch", "1", "--dry-run")
    assert watch.code == 3 and "without --watch" in watch.err
