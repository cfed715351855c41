"""A recording's options snapshot is versioned: old ones load, unknown fields are refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.inputs.recording import OPTIONS_FIELDS, OPTIONS_VERSION
from llmdoctor.options import OPTION_GROUP_OF, OPTION_GROUPS, Options
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import finding_ids, run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recording saved by this llmdoctor (a small run against the simulator)."""
    from llmdoctor.cli import main

    path = tmp_path_factory.mktemp("rec") / "m.json"
    with SimServer(get_profile("healthy")) as server, pytest.raises(SystemExit):
        main(["check", "-e", server.url, "--select", "LD001", "--json", "-o", str(path.with_suffix(".out")),
              "--save-measurements", str(path)])
    return json.loads(path.read_text())


def _write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error: "), err
    return lines[0]


def test_the_snapshot_names_its_version_and_every_option_by_group(recording: dict[str, Any]) -> None:
    assert recording["options_version"] == OPTIONS_VERSION
    saved = {f"{group}.{name}" for group, fields in recording["options"].items() for name in fields}
    assert saved == OPTIONS_FIELDS[OPTIONS_VERSION]
    assert recording["options"]["request"]["samples"] == Options().request.samples


def test_the_current_version_lists_the_fields_of_options() -> None:
    # A new Options field must be added to the snapshot's field list (or the version bumped).
    assert set(OPTION_GROUPS) == set(Options.__dataclass_fields__)
    assert OPTIONS_FIELDS[OPTIONS_VERSION] == {f"{group}.{name}" for name, group in OPTION_GROUP_OF.items()}


def test_an_unknown_option_is_refused_by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              recording: dict[str, Any]) -> None:
    options = recording["options"]
    data = {**recording, "options": {**options, "request": {**options["request"], "max_retries": 3}}}
    result = run_cli(capsys, "replay", _write(tmp_path, data))
    assert result.code == 3 and result.out == ""
    line = _one_line_error(result.err)
    assert "'request.max_retries'" in line and f"options version {OPTIONS_VERSION}" in line and "unknown" in line


def test_a_renamed_option_is_refused_with_its_new_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      recording: dict[str, Any]) -> None:
    # Version 2 put every option in a group: a flat "timeout_s" in a version-2 snapshot is not read as it.
    data = {**recording, "options": {**recording["options"], "timeout_s": 3.0}}
    result = run_cli(capsys, "replay", _write(tmp_path, data))
    assert result.code == 3
    assert "'timeout_s'" in (line := _one_line_error(result.err)) and "renamed to 'request.timeout_s'" in line


def test_an_unknown_field_of_a_version_1_snapshot_is_refused(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    old = json.loads((FIXTURES / "v0.1-demo.json").read_text())
    data = {**old, "options": {**old["options"], "max_retries": 3}}
    result = run_cli(capsys, "replay", _write(tmp_path, data))
    assert result.code == 3
    assert "'max_retries' is not in options version 1" in _one_line_error(result.err)


def test_an_unknown_options_version_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               recording: dict[str, Any]) -> None:
    result = run_cli(capsys, "replay", _write(tmp_path, {**recording, "options_version": 99}))
    assert result.code == 3
    assert "options version 99" in _one_line_error(result.err)


def test_a_recording_of_llmdoctor_0_1_still_replays(capsys: pytest.CaptureFixture[str]) -> None:
    # Saved by llmdoctor 0.1 (no options_version): `check --select LD001,LD301,LD701,LD702 --samples 3
    # --slo ttft_p90=5s --no-followup` against the demo simulator, which found LD301 and LD702.
    path = FIXTURES / "v0.1-demo.json"
    assert "options_version" not in json.loads(path.read_text())
    result = run_cli(capsys, "replay", str(path), "--json")
    assert result.code == 1, result.err
    # ranked by what the traffic pays: the floor every request pays before the cold start paid once
    assert finding_ids(result.report) == ["LD702", "LD301"]


def test_a_version_1_snapshot_is_migrated_into_the_groups() -> None:
    from llmdoctor.inputs.recording import load_recording

    _, options, _ = load_recording(str(FIXTURES / "v0.1-demo.json"))
    assert options.request.samples == 3 and options.gate.slos == ("ttft_p90=5000ms",)
    assert options.diagnosis.followup is False and options.request.sweep_max_tokens == (1, 16, 64)


def test_a_replay_runs_the_recorded_checklist_unless_told_otherwise(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    """A run with --select records its checklist; replaying without --select runs that checklist.

    The host probe is measured for the selected checks' confidence (its measurements are in the
    file), yet LD208, which reads it, was not selected: the replay must not add it (it did, on a
    busy machine, making "replay reproduces the diagnosis" fail).
    """
    saved = tmp_path / "m.json"
    with SimServer(get_profile("demo")) as server:
        live = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD301,LD702",
                       "--save-measurements", str(saved))
    assert json.loads(saved.read_text())["checks"] == ["LD301", "LD702"]
    replayed = run_cli(capsys, "replay", str(saved), "--json")
    assert [c["check_id"] for c in replayed.report["checks"]] == ["LD301", "LD702"]
    assert [f["check_id"] for f in replayed.report["findings"]] == [f["check_id"] for f in live.report["findings"]]
    wider = run_cli(capsys, "replay", str(saved), "--json", "--select", "LD2")  # told otherwise
    assert {c["check_id"] for c in wider.report["checks"]} >= {"LD208"}
