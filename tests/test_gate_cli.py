"""The pre-deploy gate end to end: SLOs, baselines and regressions, secrets in saved files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import finding_ids, run_cli, run_process

# The README's gate profile: a 300 ms fixed cost with +/-10 ms jitter.
GATE = {"fixed_ms": 300.0, "per_output_token_ms": 5.0, "jitter_ms": 10.0}
#: What a busy 2-core host adds to a measured request (a foreground CI run at load 5 measured 420+ ms for the
#: 390 ms one), and how much that may differ between two runs a few seconds apart.
LOAD_MS, LOAD_DIFF_MS = 200.0, 40.0


def _sim(**overrides: object) -> SimServer:
    return SimServer(get_profile("healthy", **{**GATE, **overrides}))


# -- SLOs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "message"), [
    ("ttft_p99=800ms", "unknown metric 'ttft_p99'"),
    ("ttft_p90=800", "write it with a unit"),
    ("ttft_p90=fast", "not a duration"),
    ("ttft_p90", "METRIC=LIMIT"),
    ("total_p50=0s", "greater than zero"),
])
def test_bad_slo_is_one_line_and_exit_3(capsys: pytest.CaptureFixture[str], flag: str, message: str) -> None:
    result = run_cli(capsys, "check", "-e", "http://127.0.0.1:9", "--slo", flag)
    assert result.code == 3
    assert result.err.count("\n") == 1 and message in result.err and "Traceback" not in result.err


def test_breached_slo_is_a_critical_finding_with_value_limit_and_confidence(
        capsys: pytest.CaptureFixture[str]) -> None:
    with _sim() as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD710", "--samples", "5",
                         "--slo", "ttft_p50=200ms", "--slo", "total_p90=2s", "--slo", "fixed_cost=0.1s")
    report = result.report
    assert result.code == 2 and report["status"] == "critical"
    titles = [f["title"] for f in report["findings"]]
    assert len(titles) == 2 and any("ttft_p50" in t for t in titles) and any("fixed_cost" in t for t in titles)
    ttft = next(f for f in report["findings"] if "ttft_p50" in f["title"])
    evidence = {e["label"]: e["value"] for e in ttft["evidence"]}
    assert evidence["limit"] == 200 and evidence["measured"] > 250 and evidence["samples"] == 5
    assert ttft["confidence"] == "medium" and ttft["severity"] == "critical"


@pytest.mark.parametrize("config", [
    ("llmdoctor.toml", '[slo]\nttft_p50 = "200ms"\n'),
    ("pyproject.toml", '[project]\nname = "app"\n\n[tool.llmdoctor.slo]\nttft_p50 = "200ms"\n'),
])
def test_slos_from_a_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch, config: tuple[str, str]) -> None:
    (tmp_path / config[0]).write_text(config[1])
    monkeypatch.chdir(tmp_path)
    with _sim() as server:
        from_file = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD710")
        overridden = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD710",
                             "--slo", "ttft_p50=2s")
    assert finding_ids(from_file.report) == ["LD710"] and from_file.code == 2
    assert finding_ids(overridden.report) == [] and overridden.code == 0


def test_bad_config_file_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "llmdoctor.toml").write_text('[slo]\nttft_p90 = "soon"\n')
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "check", "-e", "http://127.0.0.1:9")
    assert result.code == 3 and "llmdoctor.toml" in result.err and "not a duration" in result.err


# -- the CI gate (README "CI gate and reports") ----------------------------------------------------

def test_gate_passes_on_noise_and_fails_on_a_30_percent_slower_fixed_cost(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    gate = ("--select", "LD71", "--samples", "8")
    with _sim(seed=0) as server:
        saved = run_cli(capsys, "check", "-e", server.url, *gate, "--save-baseline", str(baseline), "--json")
    assert saved.code == 0
    recorded = json.loads(baseline.read_text())["measurements"]
    assert len(recorded["baseline"]["samples"]) == 8 and recorded["sweep"]["points"]

    with _sim(seed=1) as server:  # the same profile again: only noise differs
        same = run_cli(capsys, "check", "-e", server.url, *gate, "--compare", str(baseline), "--json")
    assert same.code == 0 and finding_ids(same.report) == []
    assert {c["check_id"]: c["status"] for c in same.report["checks"]}["LD711"] == "passed"

    with _sim(seed=2, fixed_ms=390.0) as server:  # fixed cost 30% higher; a real process, as CI runs it
        slower = run_process("check", "-e", server.url, *gate, "--compare", str(baseline), "--json")
    assert slower.code == 1, slower.err
    report = json.loads(slower.out)
    regressions = [f for f in report["findings"] if f["check_id"] == "LD711"]
    metrics = {next(e["value"] for e in f["evidence"] if e["label"] == "metric") for f in regressions}
    assert {"ttft", "total", "fixed_cost"} <= metrics and "per_token" not in metrics
    ttft = next(f for f in regressions if "ttft" in f["title"])
    ev = {e["label"]: e["value"] for e in ttft["evidence"]}
    # A sleep is never shorter, so the lower bounds are the simulator's fixed costs less the jitter; a busy
    # host only adds, to both runs alike: the difference stays the 90 ms the fixed cost grew (+-2 x jitter,
    # plus what the load changed between the runs), and the upper bounds only catch a wrong statistic.
    assert 270 <= ev["before"] <= 330 + LOAD_MS and 360 <= ev["after"] <= 420 + LOAD_MS, ev
    assert 90 - 20 - LOAD_DIFF_MS <= ev["after"] - ev["before"] <= 90 + 20 + LOAD_DIFF_MS, ev
    assert ev["p-value"] < 0.01 and ev["interval low"] > ev["minimum effect"]


def test_compare_with_a_bad_file_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text('{"format": "something else"}')
    result = run_cli(capsys, "check", "-e", "http://127.0.0.1:9", "--compare", str(bad))
    assert result.code == 3 and "not a baseline file" in result.err
    assert run_cli(capsys, "check", "-e", "http://127.0.0.1:9", "--compare", str(tmp_path / "none")).code == 3


def test_replay_judges_old_measurements_by_new_slos_and_a_baseline(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    with _sim(seed=0) as server:
        run_cli(capsys, "check", "-e", server.url, "--select", "LD70", "--samples", "8", "--save-baseline", str(old))
    with _sim(seed=5, fixed_ms=420.0) as server:
        run_cli(capsys, "check", "-e", server.url, "--select", "LD70", "--samples", "8",
                "--save-measurements", str(new))
    replayed = run_cli(capsys, "replay", str(new), "--json", "--select", "LD71", "--compare", str(old),
                       "--slo", "total_p50=400ms")
    ids = finding_ids(replayed.report)
    assert ids[0] == "LD710" and ids.count("LD711") >= 2 and replayed.code == 2
    assert replayed.report["requests"]["sent"] == 0


# -- secrets -------------------------------------------------------------------------------------

def test_saved_files_carry_no_secrets(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-canary-7f3a9c2e41b8d6"
    header_secret = "hdr-canary-55e0d1c9"
    url_secret = "url-canary-0b7d2a"
    monkeypatch.setenv("CANARY_KEY", key)
    measurements, baseline = tmp_path / "m.json", tmp_path / "b.json"
    with SimServer(get_profile("healthy", require_api_key=key)) as server:
        result = run_cli(
            capsys, "check", "-e", server.url, "--json", "--api-key-env", "CANARY_KEY",
            "--header", f"X-Api-Key: {header_secret}", "--header", f"Authorization: Bearer {key}",
            "--metrics-url", f"http://user:{url_secret}@127.0.0.1:{server.port}/metrics?token={url_secret}",
            "--select", "LD001,LD2,LD70", "--save-measurements", str(measurements), "--save-baseline", str(baseline),
        )
        md = run_cli(capsys, "replay", str(measurements), "--format", "markdown")
        junit = run_cli(capsys, "replay", str(measurements), "--format", "junit")
    assert "LD001" not in finding_ids(result.report)  # the key was sent and accepted
    assert json.loads(baseline.read_text())["measurements"]["baseline"]["samples"]
    for text in (measurements.read_text(), baseline.read_text(), result.out, result.err, md.out, junit.out):
        for secret in (key, header_secret, url_secret):
            assert secret not in text
