"""Plain-data round trip for probe results: dataclass <-> JSON-compatible dict.

Probe results are dataclasses so they can be saved (`--save-measurements`)
and replayed offline; this module rebuilds them from their dict form using the
type hints alone, so probes need no hand-written (de)serialisers.

JSON has no NaN or infinity, so a non-finite float is written as the string
``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the spellings Python's own JSON
module uses for them) and read back as a float where the type hint says float.
The output of `to_data` is therefore always valid JSON.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from enum import Enum
from typing import Any, TypeVar, Union

__all__ = ["to_data", "from_data", "SerdeError", "NON_FINITE"]

T = TypeVar("T")

#: How a non-finite float is written (a JSON string) and read back.
NON_FINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class SerdeError(ValueError):
    """Recorded data does not match the expected shape."""


def to_data(value: Any) -> Any:
    """Convert dataclasses, enums, tuples and dicts into JSON-compatible values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN and infinities are not JSON
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def from_data(kind: Any, data: Any) -> Any:
    """Rebuild a value of type `kind` from its `to_data` form."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if kind is Any or kind is object:
        return data
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return from_data(arg, data)
            except (SerdeError, TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise SerdeError(f"value {data!r:.60} matches none of {args}: {'; '.join(errors)}")
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise SerdeError(f"expected a list, got {type(data).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(data) != len(args):
                raise SerdeError(f"expected a list of {len(args)} items, got {len(data)}")
            return tuple(from_data(a, v) for a, v in zip(args, data, strict=True))
        item = args[0] if args else Any
        items = [from_data(item, v) for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise SerdeError(f"expected an object, got {type(data).__name__}")
        value_kind = args[1] if len(args) == 2 else Any
        return {k: from_data(value_kind, v) for k, v in data.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise SerdeError(f"expected an object for {kind.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(kind)
        values = {}
        for f in dataclasses.fields(kind):
            if f.name in data:
                values[f.name] = from_data(hints[f.name], data[f.name])
        try:
            return kind(**values)
        except TypeError as exc:
            raise SerdeError(f"{kind.__name__}: {exc}") from None
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(data)
    if kind is float:
        if isinstance(data, str) and data in NON_FINITE:
            return NON_FINITE[data]
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise SerdeError(f"expected a number, got {data!r:.40}")
        try:
            return float(data)
        except OverflowError:  # an integer of hundreds of digits (an edited or hostile recording)
            raise SerdeError(f"a number too large for a float ({len(str(data))} digits)") from None
    if kind in (int, str, bool):
        if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
            raise SerdeError(f"expected {kind.__name__}, got {data!r:.40}")
        return data
    if kind is type(None):
        if data is not None:
            raise SerdeError(f"expected null, got {data!r:.40}")
        return None
    raise SerdeError(f"cannot rebuild values of type {kind!r}")
