"""Pre-deploy gate inputs: SLOs (from flags or a config file) and the metrics they name.

An SLO is ``METRIC=LIMIT`` with a unit, ``ttft_p90=800ms`` or ``total_p50=2s``.
The metrics (`llmdoctor.analysis.measures.SLO_METRICS`, of the closed set) are read from the
measurements the doctor already takes:

- ``ttft_p50``, ``ttft_p90``, ``total_p50``, ``total_p90``: the warm
  "Say ok." baseline samples (time to first token, total);
- ``fixed_cost``, ``per_token``: the flat-latency fit of the output-length
  sweep (``per_token`` is milliseconds per output token).

The same SLOs can live in ``llmdoctor.toml`` (top-level ``[slo]`` table) or in
``pyproject.toml`` under ``[tool.llmdoctor.slo]``; flags given on the command
line replace the file's value for the same metric.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmdoctor.analysis.measures import SLO_METRICS

__all__ = [
    "Slo",
    "SloError",
    "parse_slo",
    "parse_duration_ms",
    "format_slo",
    "load_config",
    "merge_slos",
]

CONFIG_FILE = "llmdoctor.toml"
_UNITS = {"ms": 1.0, "s": 1000.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s)\s*$", re.IGNORECASE)


class SloError(ValueError):
    """An SLO or config value that cannot be used (one-line message)."""


@dataclass(frozen=True)
class Slo:
    """One service-level objective: `metric` must stay at or below `limit_ms`."""

    metric: str
    limit_ms: float

    @property
    def spec(self) -> str:
        """The canonical ``metric=limit`` spelling (stored in recordings)."""
        return format_slo(self)


def parse_duration_ms(text: str, what: str = "value") -> float:
    """``800ms`` → 800.0, ``2s`` → 2000.0, ``1.5s`` → 1500.0; a unit is required."""
    m = _DURATION.match(str(text))
    if not m:
        raise SloError(f"{what}: {text!r} is not a duration; write it with a unit, like 800ms or 2s")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise SloError(f"{what}: {text!r} must be greater than zero")
    return value


def parse_slo(text: str) -> Slo:
    """Parse ``METRIC=LIMIT`` (``ttft_p90=800ms``)."""
    metric, sep, limit = str(text).partition("=")
    metric = metric.strip().lower()
    if not sep:
        raise SloError(f"--slo {text!r}: write METRIC=LIMIT, like ttft_p90=800ms")
    known = [m.id for m in SLO_METRICS]
    if metric not in known:
        raise SloError(f"--slo {text!r}: unknown metric {metric!r}; known: {', '.join(known)}")
    return Slo(metric, parse_duration_ms(limit, f"--slo {metric}"))


def format_slo(slo: Slo) -> str:
    """Canonical spelling: ``ttft_p90=800ms``."""
    value = f"{slo.limit_ms:g}"
    return f"{slo.metric}={value}ms"


#: The largest configuration file read.
MAX_CONFIG_BYTES = 1 << 20


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    from llmdoctor.inputs.bounded import InputError, read_input

    try:
        text = read_input(str(path), "", limit=MAX_CONFIG_BYTES).decode("utf-8").removeprefix("\ufeff")
        return tomllib.loads(text)
    except InputError as exc:
        raise SloError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise SloError(f"{path} is not valid TOML: not UTF-8 text (byte {exc.start}; TOML files are UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise SloError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise SloError(f"{path} is not valid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise SloError(f"{path} is not valid TOML: {str(exc).split(':')[0]}") from None


def load_config(directory: str | Path = ".") -> tuple[dict[str, Any], str | None]:
    """The llmdoctor settings of `directory` and the file they came from.

    ``llmdoctor.toml`` wins over ``[tool.llmdoctor]`` in ``pyproject.toml``;
    no file gives ``({}, None)``.
    """
    base = Path(directory)
    own = base / CONFIG_FILE
    if own.is_file():
        data = _read_toml(own)
        if not isinstance(data, dict):  # pragma: no cover - tomllib always returns a dict
            data = {}
        return data, str(own)
    pyproject = base / "pyproject.toml"
    if pyproject.is_file():
        tool = _read_toml(pyproject).get("tool", {})
        section = tool.get("llmdoctor") if isinstance(tool, dict) else None
        if isinstance(section, dict):
            return section, f"{pyproject} [tool.llmdoctor]"
    return {}, None


def slos_from_config(config: dict[str, Any], source: str | None) -> list[Slo]:
    """The ``slo`` table of a config: ``{ttft_p90 = "800ms", ...}``."""
    table = config.get("slo", {})
    if not isinstance(table, dict):
        raise SloError(f"{source}: 'slo' must be a table of METRIC = \"LIMIT\"")
    slos = []
    for metric, limit in table.items():
        try:
            slos.append(parse_slo(f"{metric}={limit}"))
        except SloError as exc:
            raise SloError(f"{source}: {str(exc).removeprefix('--slo ')}") from None
    return slos


def merge_slos(from_config: list[Slo], from_flags: list[Slo]) -> tuple[str, ...]:
    """Config SLOs overridden metric by metric by flags, as canonical specs in metric order."""
    merged: dict[str, Slo] = {s.metric: s for s in from_config}
    merged.update({s.metric: s for s in from_flags})
    return tuple(format_slo(merged[m.id]) for m in SLO_METRICS if m.id in merged)
