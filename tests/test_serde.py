"""The serde round trip: non-finite floats survive it as valid JSON, a wrong-length tuple is refused."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from llmdoctor.measurements.latency_samples import SweepResult
from llmdoctor.measurements.stats import LinearFit
from llmdoctor.serde import SerdeError, from_data, to_data


@dataclass
class _Reading:
    value: float
    maybe: float | None
    pair: tuple[float, float]
    many: list[float]


def _through_json(kind: object, value: object) -> object:
    text = json.dumps(to_data(value), allow_nan=False)  # strict JSON: raises on a bare NaN
    return from_data(kind, json.loads(text))


def test_nan_and_infinities_round_trip_as_valid_json() -> None:
    back = _through_json(_Reading, _Reading(math.nan, math.inf, (-math.inf, 1.5), [math.nan, 2.0]))
    assert isinstance(back, _Reading)
    assert math.isnan(back.value) and back.maybe == math.inf
    assert back.pair[0] == -math.inf and back.pair[1] == 1.5
    assert math.isnan(back.many[0]) and back.many[1] == 2.0
    assert to_data(math.nan) == "NaN" and to_data(-math.inf) == "-Infinity"


def test_a_sweep_whose_fit_has_a_nan_r2_replays() -> None:
    # A NaN in a fit used to be saved as null, which no float field accepts: the replay of the
    # whole sweep failed (and with it LD701/LD702/LD703).
    sweep = SweepResult(fit=LinearFit(fixed_ms=120.0, per_token_ms=0.0, r2=math.nan, points=6))
    back = _through_json(SweepResult, sweep)
    assert isinstance(back, SweepResult) and back.fit is not None
    assert back.fit.fixed_ms == 120.0 and back.fit.points == 6 and math.isnan(back.fit.r2)


def test_other_strings_are_not_numbers() -> None:
    with pytest.raises(SerdeError):
        from_data(float, "nan")  # only the exact spellings to_data writes
    with pytest.raises(SerdeError):
        from_data(float, "12")
    assert from_data(str, "NaN") == "NaN"  # a string field keeps the text


@pytest.mark.parametrize("data", [[1.0], [1.0, 2.0, 3.0], []])
def test_a_tuple_of_the_wrong_length_is_refused(data: list[float]) -> None:
    with pytest.raises(SerdeError, match="expected a list of 2 items"):
        from_data(tuple[float, float], data)
    with pytest.raises(SerdeError):
        from_data(_Reading, {"value": 1.0, "maybe": None, "pair": data, "many": []})


def test_a_variable_length_tuple_takes_any_length() -> None:
    assert from_data(tuple[int, ...], [1, 16, 64]) == (1, 16, 64)
    assert from_data(tuple[int, ...], []) == ()
