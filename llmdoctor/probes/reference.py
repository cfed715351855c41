"""The reference measurements of a gate: a baseline file saved by an earlier run.

``--compare FILE`` names a file written by ``--save-baseline`` (or
``--save-measurements``: both are the same recording format). This probe
reads only its baseline and sweep measurements; the regression check (LD711)
compares them with this run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.latency_samples import BaselineResult, SweepResult
from llmdoctor.probes.catalog import REFERENCE
from llmdoctor.serde import SerdeError, from_data

__all__ = ["Reference", "reference", "reference_from_recording"]

T = TypeVar("T")


@dataclass
class Reference:
    """Baseline and sweep of the reference run, with where they came from."""

    source: str
    recorded_at: str = ""
    endpoint: str = ""
    baseline: BaselineResult | None = None
    sweep: SweepResult | None = None


def _probe(measurements: dict[str, Any], name: str, kind: type[T]) -> T | None:
    data = measurements.get(name)
    if not isinstance(data, dict) or set(data) == {"unavailable"}:
        return None
    try:
        return cast(T, from_data(kind, data))
    except SerdeError:
        return None


def reference_from_recording(path: str) -> Reference:
    """Read the reference from a recording file; raises `RecordingError` when unreadable."""
    from llmdoctor.inputs.recording import FORMAT, RecordingError, read_recording_json

    data = read_recording_json(path, "--compare")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("measurements"), dict):
        raise RecordingError(f"--compare {path} is not a baseline file (write one with --save-baseline)")
    measurements = data["measurements"]
    ref = Reference(
        source=path,
        recorded_at=str(data.get("recorded_at") or ""),
        endpoint=str(data.get("endpoint") or ""),
        baseline=_probe(measurements, "baseline", BaselineResult),
        sweep=_probe(measurements, "sweep", SweepResult),
    )
    if ref.baseline is None and ref.sweep is None:
        raise RecordingError(f"--compare {path} holds no baseline or sweep measurements to compare with")
    return ref


def reference(ctx: Context) -> Reference:
    """The probe: load ``options.gate.compare_file``."""
    from llmdoctor.inputs.recording import RecordingError

    path = ctx.options.gate.compare_file
    if not path:
        raise ProbeUnavailable(REFERENCE.off_reason(ctx.options) or "no baseline file given")
    try:
        return reference_from_recording(path)
    except RecordingError as exc:
        raise ProbeUnavailable(str(exc)) from None
