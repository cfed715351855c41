"""Saved measurements: write them after a run, load them for an offline replay.

A recording holds the probe results (never the API key or sensitive headers:
the probe client redacts them, and the whole file passes through its redactor
again before it is written) plus a snapshot of the options that shaped the run.

The snapshot is versioned (``options_version``): loading it rejects a field this
version does not have (unknown, or renamed since) with a one-line error instead
of dropping it, so a replay never runs silently with other options than the
recorded run. A recording without ``options_version`` was written by llmdoctor
0.1, whose options are version 1.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from llmdoctor import __version__
from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.redact import Redactor
from llmdoctor.reporting.report import Report
from llmdoctor.serde import SerdeError, from_data, to_data
from llmdoctor.target import Target, TargetError, build_target, display_url

__all__ = [
    "FORMAT", "MAX_RECORDING_BYTES", "OPTIONS_FIELDS", "OPTIONS_VERSION", "RecordedRun", "RecordingError",
    "load_recorded_run", "load_recording", "options_from_snapshot", "read_recording_json", "recording_dict",
]

FORMAT = "llmdoctor-measurements"
VERSION = 1

#: The version of the options snapshot written now. Adding an `Options` field: add it to this
#: version's set below (an older llmdoctor then names it as unknown). Renaming or removing one: bump
#: the version, list the old names in `RENAMED`, and teach `_migrate` to bring older snapshots up.
#: Version 1 (llmdoctor 0.1) is flat (``{"timeout_s": 30.0, ...}``); version 2 groups the options by
#: concern, as `Options` does (``{"request": {"timeout_s": 30.0, ...}, "evidence": {...}, ...}``).
OPTIONS_VERSION = 2
#: What a recording without ``options_version`` (llmdoctor 0.1) holds.
LEGACY_OPTIONS_VERSION = 1
_V1_FIELDS = (
    "timeout_s", "max_requests", "samples", "warmup", "sweep_max_tokens", "sweep_repeats",
    "typical_output_tokens", "insecure", "ca_bundle", "logs", "journal_unit", "since", "metrics_url",
    "gpu_metrics_url", "pid", "request_files", "tokenizer", "context_window", "dns_server", "concurrency",
    "idle_test_s", "slos", "compare_file", "deadline_s", "verbose", "followup", "followup_requests",
    "followup_seconds",
)  # fmt: skip
#: Fields renamed by a version: {version: {old name: new name}} (version 2: each into its group).
RENAMED: dict[int, dict[str, str]] = {
    2: {
        **{n: f"request.{n}" for n in ("timeout_s", "max_requests", "samples", "warmup", "sweep_max_tokens",
                                       "sweep_repeats", "idle_test_s", "deadline_s", "verbose")},
        **{n: f"evidence.{n}" for n in ("logs", "journal_unit", "since", "metrics_url", "gpu_metrics_url", "pid")},
        **{n: f"workload.{n}" for n in ("request_files", "tokenizer", "context_window", "typical_output_tokens")},
        **{n: f"network.{n}" for n in ("dns_server", "insecure", "ca_bundle", "concurrency")},
        **{n: f"gate.{n}" for n in ("slos", "compare_file")},
        **{n: f"diagnosis.{n}" for n in ("followup", "followup_requests", "followup_seconds")},
    },
}  # fmt: skip
#: The option fields of each snapshot version (``group.name`` where grouped).
OPTIONS_FIELDS: dict[int, frozenset[str]] = {
    1: frozenset(_V1_FIELDS),
    2: frozenset(RENAMED[2].values()) | {"network.fleet_size"},
}


class RecordingError(ValueError):
    """The recording cannot be read (one-line message)."""


def _url_secrets(options: Options) -> list[str]:
    """Passwords and query values of the URL options (metrics endpoints behind a token)."""
    from urllib.parse import parse_qsl, urlsplit

    secrets: list[str] = []
    values = [(f.name, getattr(group, f.name)) for group in (getattr(options, g.name) for g in
              dataclasses.fields(options)) for f in dataclasses.fields(group)]
    for name, value in values:
        if not name.endswith("_url") or not isinstance(value, str):
            continue
        parts = urlsplit(value)
        if parts.password:
            secrets.append(parts.password)
        secrets += [v for _, v in parse_qsl(parts.query) if v]
    return secrets


def _scrub_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options as saved: URLs given on the command line lose their credentials (in every group)."""
    return {
        k: _scrub_options(v) if isinstance(v, dict) else display_url(v) if k.endswith("_url") and isinstance(v, str)
        else v
        for k, v in options.items()
    }


def recording_dict(report: Report, ctx: Context) -> dict[str, Any]:
    """The recording of a finished run, as plain JSON data."""
    data = {
        "format": FORMAT,
        "version": VERSION,
        "tool_version": __version__,
        "recorded_at": report.started_at,
        "endpoint": report.endpoint,
        "model": report.model,
        "options_version": OPTIONS_VERSION,
        "options": _scrub_options(to_data(ctx.options)),
        "measurements": ctx.measurements(),
        # The checklist this run used: a replay reproduces this diagnosis by default (a probe that one
        # selected check read optionally would otherwise let unselected checks run on its measurements).
        "checks": [outcome.check_id for outcome in report.checks],
    }
    redactor = getattr(ctx._client, "redactor", None)
    if redactor is not None:
        data = redactor.obj(data)
    # Credentials inside URLs given on the command line (user:password@, ?token=) wherever probes echoed them.
    url_secrets = _url_secrets(ctx.options)
    return Redactor(url_secrets).obj(data) if url_secrets else data


#: The largest recording read (one of a run with 40,000 logged requests is ~30 MiB).
MAX_RECORDING_BYTES = 256 << 20


def read_recording_json(path: str, what: str = "") -> Any:
    """The JSON of a recording file, read within bounds (`llmdoctor.inputs.bounded`); `RecordingError` (one line)."""
    from llmdoctor.inputs.bounded import InputError, load_json, read_input

    label = f"{what} {path}".strip()
    try:
        data = read_input(path, what, limit=MAX_RECORDING_BYTES)
        return load_json(data.decode("utf-8").removeprefix("\ufeff"), label)
    except InputError as exc:
        raise RecordingError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise RecordingError(f"{label} is not JSON: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise RecordingError(f"{label} is not JSON: {exc}") from None


@dataclass(frozen=True)
class RecordedRun:
    """What a recording holds: the target, the options, the measurements and the checks the run used."""

    target: Target | None  # None: the recording names no endpoint a run could have had
    options: Options
    measurements: dict[str, Any]
    #: The ids of the checks the recorded run used (their order); empty in a recording made before
    #: they were saved. A replay without --select/--ignore runs these, so it reproduces that diagnosis.
    checks: tuple[str, ...] = ()


def load_recorded_run(path: str) -> RecordedRun:
    """The recorded run of a recording file (`RecordingError`, one line, for anything else)."""
    data = read_recording_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a llmdoctor measurements file (saved with --save-measurements)")
    if data.get("version") != VERSION:
        raise RecordingError(f"{path} has recording version {data.get('version')!r}; this llmdoctor reads {VERSION}")
    measurements = data.get("measurements")
    if not isinstance(measurements, dict):
        raise RecordingError(f"{path} has no measurements")
    options = options_from_snapshot(data.get("options"), data.get("options_version", LEGACY_OPTIONS_VERSION), path)
    endpoint = data.get("endpoint")
    model = data.get("model")
    target = _recorded_target(endpoint, model)
    checks = data.get("checks")
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        checks = []
    return RecordedRun(target, options, measurements, tuple(checks))


def _recorded_target(endpoint: object, model: object) -> Target | None:
    """The target a recording names (`build_target`, no key: nothing is sent to it); None when it
    names none a run could have had (a replay's "(recorded)", a hand-edited value)."""
    if not isinstance(endpoint, str):
        return None
    try:
        return build_target(endpoint, model=model if isinstance(model, str) else None, api_key_env=None)
    except TargetError:
        return None


def load_recording(path: str) -> tuple[Target | None, Options, dict[str, Any]]:
    """Target, options and measurements of a recording file."""
    run = load_recorded_run(path)
    return run.target, run.options, run.measurements


def _renamed_since(name: str, version: int) -> str | None:
    """What `name` is called in `version`, when a later version than the one it belongs to renamed it."""
    for v in sorted(RENAMED):
        if v <= version and name in RENAMED[v]:
            return f"renamed to {RENAMED[v][name]!r} in options version {v}"
    return None


def _snapshot_fields(stored: dict[str, Any], version: int) -> list[str]:
    """The field names a snapshot holds, as `OPTIONS_FIELDS` spells them (``group.name`` from version 2)."""
    if version == 1:
        return [str(k) for k in stored]
    return [f"{k}.{n}" if isinstance(v, dict) else str(k) for k, v in stored.items()
            for n in (v if isinstance(v, dict) else [None])]


def _migrate(stored: dict[str, Any], version: int) -> dict[str, Any]:
    """Bring a snapshot of `version` up to `OPTIONS_VERSION` (fields already checked against `version`)."""
    if version == 1:  # flat -> grouped
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in stored.items():
            group, _, field = RENAMED[2][name].partition(".")
            grouped.setdefault(group, {})[field] = value
        return grouped
    return stored


def options_from_snapshot(stored: Any, version: Any, path: str) -> Options:
    """The `Options` of a recording's snapshot; a `RecordingError` (one line) for any field it cannot place."""
    if isinstance(version, bool) or version not in OPTIONS_FIELDS:
        readable = ", ".join(str(v) for v in sorted(OPTIONS_FIELDS))
        raise RecordingError(f"{path} has options version {version!r}; this llmdoctor reads {readable} "
                             "(was it saved by a newer llmdoctor?)")
    stored = stored if stored is not None else {}
    if not isinstance(stored, dict):
        raise RecordingError(f"{path}: bad options: expected an object, got {type(stored).__name__}")
    for name in sorted(_snapshot_fields(stored, version)):
        if name not in OPTIONS_FIELDS[version]:
            why = _renamed_since(name, version) or "unknown (saved by a newer llmdoctor?)"
            raise RecordingError(f"{path}: options field {name!r} is not in options version {version}: {why}")
    try:
        return from_data(Options, _migrate(stored, version))
    except SerdeError as exc:
        raise RecordingError(f"{path}: bad options: {exc}") from None
