"""Saved measurements: write them after a run, load them for an offline replay.

A recording holds the probe results (never the API key or sensitive headers:
the probe client redacts them, and the whole file passes through its redactor
again before it is written) plus the options that shaped the run.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from llmdoctor import __version__
from llmdoctor.context import Context
from llmdoctor.redact import Redactor
from llmdoctor.report import Report
from llmdoctor.serde import SerdeError, from_data, to_data
from llmdoctor.target import Options, Target, display_url

__all__ = ["FORMAT", "RecordingError", "recording_dict", "load_recording"]

FORMAT = "llmdoctor-measurements"
VERSION = 1


class RecordingError(ValueError):
    """The recording cannot be read (one-line message)."""


def _url_secrets(options: Options) -> list[str]:
    """Passwords and query values of the URL options (metrics endpoints behind a token)."""
    from urllib.parse import parse_qsl, urlsplit

    secrets: list[str] = []
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if not f.name.endswith("_url") or not isinstance(value, str):
            continue
        parts = urlsplit(value)
        if parts.password:
            secrets.append(parts.password)
        secrets += [v for _, v in parse_qsl(parts.query) if v]
    return secrets


def _scrub_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options as saved: URLs given on the command line lose their credentials."""
    return {k: display_url(v) if k.endswith("_url") and isinstance(v, str) else v for k, v in options.items()}


def recording_dict(report: Report, ctx: Context) -> dict[str, Any]:
    """The recording of a finished run, as plain JSON data."""
    data = {
        "format": FORMAT,
        "version": VERSION,
        "tool_version": __version__,
        "recorded_at": report.started_at,
        "endpoint": report.endpoint,
        "model": report.model,
        "options": _scrub_options(to_data(ctx.options)),
        "measurements": ctx.measurements(),
    }
    redactor = getattr(ctx._client, "redactor", None)
    if redactor is not None:
        data = redactor.obj(data)
    # Credentials inside URLs given on the command line (user:password@, ?token=) wherever probes echoed them.
    url_secrets = _url_secrets(ctx.options)
    return Redactor(url_secrets).obj(data) if url_secrets else data


def load_recording(path: str) -> tuple[Target, Options, dict[str, Any]]:
    """Target, options and measurements of a recording file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a llmdoctor measurements file (saved with --save-measurements)")
    if data.get("version") != VERSION:
        raise RecordingError(f"{path} has recording version {data.get('version')!r}; this llmdoctor reads {VERSION}")
    measurements = data.get("measurements")
    if not isinstance(measurements, dict):
        raise RecordingError(f"{path} has no measurements")
    known = {f.name for f in dataclasses.fields(Options)}
    stored_options = data.get("options") or {}
    if not isinstance(stored_options, dict):
        raise RecordingError(f"{path}: bad options: expected an object, got {type(stored_options).__name__}")
    raw_options = {k: v for k, v in stored_options.items() if k in known}
    try:
        options = from_data(Options, raw_options)
    except SerdeError as exc:
        raise RecordingError(f"{path}: bad options: {exc}") from None
    endpoint = data.get("endpoint")
    model = data.get("model")
    target = Target(
        base_url=endpoint if isinstance(endpoint, str) else "(recorded)",
        model=model if isinstance(model, str) else None,
    )
    return target, options, measurements
