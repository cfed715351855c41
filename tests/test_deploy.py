"""The deploy/ examples work.

Prometheus's own tool checks the rules, their unit tests, the config and our metrics; the Kubernetes
CronJob runs a valid llmdoctor command over its ConfigMap's fleet.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmdoctor.render.prometheus import METRICS, render_prometheus
from tests.promtools import require_tool
from tests.test_prometheus import _report

ROOT = Path(__file__).resolve().parent.parent
PROM = ROOT / "deploy" / "prometheus"


def _promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=PROM)


def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    result = _promtool("test", "rules", "rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_checks_the_example_config() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_finds_nothing_to_lint_in_our_exposition() -> None:
    """Prometheus's linter (naming, units, reserved labels) accepts every metric llmdoctor emits."""
    result = _promtool("check", "metrics", stdin=render_prometheus(_report()))
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr)


def test_the_rules_use_only_documented_metrics_and_labels() -> None:
    known = {m.name: set(m.labels) | {"job", "instance"} for m in METRICS}
    rules = [r for g in yaml.safe_load((PROM / "rules.yml").read_text())["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    assert {"LlmdoctorEndpointCritical", "LlmdoctorEndpointWarning", "LlmdoctorQueueing", "LlmdoctorColdStart",
            "LlmdoctorLatencyRegression", "LlmdoctorNotReporting"} <= alerts
    for rule in rules:
        expr = rule["expr"]
        names = re.findall(r"\b(llmdoctor_[a-z_]+)", expr)
        assert names, f"{rule['alert']} reads no llmdoctor metric"
        for name in names:
            assert name in known, f"{rule['alert']}: {name} is not in the contract"
        used = set(re.findall(r"([a-z_]+)\s*=~?\s*\"", expr)) | {
            label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}
        allowed = set().union(*(known[n] for n in names))
        assert used <= allowed, f"{rule['alert']}: labels {used - allowed} are not in the contract"


# -- deploy/kubernetes: the CronJob runs a valid llmdoctor command over the ConfigMap's fleet -------------

KUBE = ROOT / "deploy" / "kubernetes"


def _manifests() -> dict[str, dict[str, Any]]:
    docs = [d for p in sorted(KUBE.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return {d["kind"]: d for d in docs}


def _container(cronjob: dict[str, Any]) -> dict[str, Any]:
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return {**container, "_pod": pod}


def test_the_cronjob_mounts_the_configmaps_fleet_and_fills_its_keys_from_a_secret(tmp_path: Path) -> None:
    from llmdoctor.fleet import load_endpoints

    manifests = _manifests()
    cronjob, configmap = manifests["CronJob"], manifests["ConfigMap"]
    assert cronjob["apiVersion"] == "batch/v1" and configmap["apiVersion"] == "v1"
    assert len(cronjob["spec"]["schedule"].split()) == 5
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    container = _container(cronjob)
    args = container["args"]
    endpoints_path = Path(args[args.index("--endpoints") + 1])
    (volume,) = [v for v in container["_pod"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert endpoints_path.parent == Path(mount["mountPath"]) and endpoints_path.name in configmap["data"]
    fleet = tmp_path / endpoints_path.name
    fleet.write_text(configmap["data"][endpoints_path.name])
    entries = load_endpoints(str(fleet))  # the real loader: valid TOML, valid URLs, unique names
    assert len(entries) >= 2
    env = {e["name"]: e for e in container["env"]}
    for entry in entries:
        if entry.api_key_env:  # each key the fleet names comes from a Secret, never from the ConfigMap
            assert "secretKeyRef" in env[entry.api_key_env]["valueFrom"], entry


def test_the_cronjobs_command_is_a_valid_llmdoctor_invocation(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    import click

    from llmdoctor.cli import cli
    from llmdoctor.reporting.publish import check_job, check_push_gateway
    from tests.cliutil import run_cli

    manifests = _manifests()
    container = _container(manifests["CronJob"])
    assert container["command"] == ["llmdoctor"]
    argv = [str(a) for a in container["args"]]
    command = cli.get_command(click.Context(cli), argv[0])
    assert command is not None, argv[0]
    params = command.make_context(argv[0], argv[1:]).params  # click's own parser: types, choices, ranges
    assert params["fmt"] == "prometheus" and params["push_gateway"] and params["endpoints_file"]
    check_push_gateway(params["push_gateway"])
    check_job(params["push_job"])
    # and the real command, with --dry-run, over the ConfigMap's fleet: valid end to end, nothing sent
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(manifests["ConfigMap"]["data"]["fleet.toml"])
    argv[argv.index("--endpoints") + 1] = str(fleet)
    result = run_cli(capsys, *argv, "--dry-run")
    assert result.code == 0, result.err
    assert "a fleet of 3 endpoints" in result.out and "[chat-prod]" in result.out


def test_the_dockerfile_installs_what_the_cronjob_runs() -> None:
    text = (KUBE / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["llmdoctor"]' in text and "pip install" in text
    for path in ("pyproject.toml", "llmdoctor", "checks"):
        assert path in text and (ROOT / path).exists()
