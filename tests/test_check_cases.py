"""Every fixture case of every check: recorded measurements in, exact outcome out."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmdoctor.checklist.check_table import BUILTIN_CHECKS
from llmdoctor.checklist.registry import load_registry
from tests.checkcases import FIXTURES, assert_outcome, case_files, load_case, run_case

REGISTRY = load_registry()
CASES = case_files()


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_there_are_cases() -> None:
    """Every built-in check has its folder of cases (a firing one and a passing one at least), and no
    folder names a check the table does not hold."""
    assert {path.parent.name for path in CASES} == {row.id for row in BUILTIN_CHECKS}
    assert len(CASES) >= 2 * len(BUILTIN_CHECKS) >= 98


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_case(path: Path) -> None:
    check = REGISTRY.by_id(path.parent.name)
    assert check is not None, f"fixtures/{path.parent.name} names no registered check"
    outcome = run_case(check, path)
    assert_outcome(outcome, load_case(path)["expect"], where=str(path.relative_to(FIXTURES)))


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_every_impact_says_how_often_it_is_paid(path: Path) -> None:
    """The ranking weighs an impact by how often the traffic pays it: a check that sets one states it."""
    check = REGISTRY.by_id(path.parent.name)
    assert check is not None
    for f in run_case(check, path).findings:
        if f.impact_ms is not None:
            assert f.frequency is not None, f"{path.parent.name} sets impact_ms without a frequency: {f.title}"
