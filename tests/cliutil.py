"""Running the CLI in-process and as a real subprocess, and validating its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
import pytest

SCHEMA = json.loads(resources.files("llmdoctor").joinpath("schema/report.schema.json").read_text())


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def report(self) -> dict[str, Any]:
        data = json.loads(self.out)
        validate_report(data)
        return data


def validate_report(data: dict[str, Any]) -> None:
    """Every JSON report produced by a test must satisfy the shipped schema."""
    jsonschema.validate(data, SCHEMA, format_checker=jsonschema.FormatChecker())


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run `llmdoctor ARGS` in this process; the exit code comes from SystemExit."""
    from llmdoctor.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    captured = capsys.readouterr()
    code = exc.value.code
    return Result(code if isinstance(code, int) else 0, captured.out, captured.err)


def run_process(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
    """Run `python -m llmdoctor ARGS` as a real process (for tracebacks, exit codes, hangs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "llmdoctor", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def finding_ids(report: dict[str, Any]) -> list[str]:
    """The ranked findings' check ids (a finding folded under a cause is not listed: see `all_finding_ids`)."""
    return [f["check_id"] for f in report["findings"]]


def all_finding_ids(report: dict[str, Any]) -> list[str]:
    """Every finding's check id, those folded under a cause included (for "did not fire" assertions)."""
    return [g["check_id"] for f in report["findings"] for g in (f, *f["supporting"])]


def record_sim_run(path: Any, profile: str, selected: list[str]) -> Any:
    """Diagnose the simulator `profile` with these checks and save the measurements to `path` (for replays)."""
    from llmdoctor.doctor import diagnose
    from llmdoctor.inputs.recording import recording_dict
    from llmdoctor.options import Options
    from llmdoctor.sim.profiles import get_profile
    from llmdoctor.sim.server import SimServer
    from llmdoctor.target import Target

    with SimServer(get_profile(profile)) as server:
        report, ctx = diagnose(Target(base_url=server.base_url), Options(), selected=selected)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(recording_dict(report, ctx), fh)
    return path
