"""Conventions every check follows: entry point, docs sections, firing and passing cases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from llmdoctor.check import DOC_SECTIONS, Category
from llmdoctor.checklist.check_table import BUILTIN_CHECKS
from llmdoctor.checklist.registry import load_registry
from tests.checkcases import case_files, load_case

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = load_registry()
CHECKS = REGISTRY.checks
ID_RANGES = {
    Category.ENDPOINT: 0, Category.INPUT: 1, Category.SERVER: 2, Category.COLD_START: 3,
    Category.NETWORK: 4, Category.CLIENT: 5, Category.PARAMS: 6, Category.BASELINE: 7,
}


def test_registry_loads_cleanly() -> None:
    assert REGISTRY.errors == []
    assert len(BUILTIN_CHECKS) >= 49  # the 49 of 53a8be1: a check leaves the table only with its id retired
    assert sorted(c.id for c in CHECKS) == sorted(row.id for row in BUILTIN_CHECKS)


def test_every_module_in_checks_is_registered() -> None:
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["llmdoctor.checks"]
    modules = {p.stem for p in (ROOT / "checks").glob("ld*.py")}
    registered = {value.split(":")[0].rsplit(".", 1)[1] for value in eps.values()}
    assert modules == registered == {row.module for row in BUILTIN_CHECKS}
    assert eps == {row.id: row.entry_point for row in BUILTIN_CHECKS}
    for name, value in eps.items():
        assert value.endswith(":" + next(c.__name__ for c in CHECKS if c.id == name))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_metadata(check: type) -> None:
    assert re.fullmatch(r"LD\d{3}", check.id)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", check.name)
    assert check.title and check.title[0].isupper()
    assert int(check.id[2]) == ID_RANGES[check.category], f"{check.id} is outside its category's id range"
    module = Path(__import__(check.__module__, fromlist=["_"]).__file__).stem
    assert module.startswith(check.id.lower() + "_")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_docs_sections(check: type) -> None:
    docs = check.docs()
    assert docs["summary"], f"{check.id} has no summary line"
    for section in DOC_SECTIONS:
        assert len(docs.get(section, "")) > 20, f"{check.id} lacks a '## {section}' section"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_has_firing_and_passing_cases(check: type) -> None:
    statuses = {load_case(p)["expect"]["status"] for p in case_files(check.id)}
    assert "failed" in statuses, f"{check.id} has no case where it fires (fixtures/{check.id}/)"
    assert "passed" in statuses, f"{check.id} has no case where it must not fire (fixtures/{check.id}/)"


def test_ids_unique_and_sorted() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)
