"""The `Check` base class: one item of the troubleshooting checklist."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

from llmdoctor.findings import Finding
from llmdoctor.probes.contract import AnyProbe, Reads

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.options import Options

__all__ = ["Category", "Check", "CheckSkipped", "DOC_SECTIONS", "DOCS_REF", "Reads"]

# Docs travel with the tool: the reference of a finding is the command that prints them.
DOCS_REF = "llmdoctor explain {id}"

DOC_SECTIONS = ("What it checks", "Why it adds latency", "Example", "Fix", "Caveats")


class Category(str, Enum):
    """Checklist groups, in the order the checklist runs them (by id range)."""

    ENDPOINT = "endpoint"  # LD0xx: can we talk to it at all
    INPUT = "input"  # LD1xx
    SERVER = "server"  # LD2xx
    COLD_START = "cold_start"  # LD3xx
    NETWORK = "network"  # LD4xx
    CLIENT = "client"  # LD5xx
    PARAMS = "params"  # LD6xx
    BASELINE = "baseline"  # LD7xx


class CheckSkipped(Exception):
    """Raised by `Check.run` when the measurements cannot answer the question."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Check:
    """Base class of a check.

    Subclasses set the class attributes and implement `run`, which reads
    probe results from the context and yields findings; yielding nothing
    means the check passed. A check never sends requests itself and never
    calls another check. Its docstring is its documentation, in the sections
    named by `DOC_SECTIONS` (markdown ``## `` headings).

    Every probe `run` reads, directly or through a helper, is declared:
    `requires` (the check is skipped with the probe's reason when one is
    unavailable) or `optional` (read when present). The run measures exactly
    the declared probes before any check runs; strict mode (the tests) fails
    an undeclared read.
    """

    id: ClassVar[str]
    name: ClassVar[str]
    title: ClassVar[str]
    category: ClassVar[Category]
    requires: ClassVar[tuple[AnyProbe, ...]] = ()
    optional: ClassVar[tuple[AnyProbe, ...]] = ()
    order: ClassVar[int]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "order" not in cls.__dict__ and "id" in cls.__dict__:
            digits = re.sub(r"\D", "", cls.id)
            cls.order = int(digits) if digits else 10_000

    @classmethod
    def reads(cls, options: Options) -> Reads:
        """The probes it reads under `options`: by default everything it declares.

        A check that reads some probes only under some options (an SLO on one metric,
        a local tokenizer) narrows this, so a run does not measure what it will not read.
        """
        return Reads(cls.requires, cls.optional)

    @classmethod
    def declared(cls) -> tuple[AnyProbe, ...]:
        """Every probe it may read (`requires` then `optional`)."""
        return (*cls.requires, *cls.optional)

    def run(self, ctx: Context) -> Iterable[Finding]:
        """Yield findings from the probe results in `ctx`."""
        raise NotImplementedError

    @classmethod
    def docs(cls) -> dict[str, str]:
        """The docstring's sections, keyed by heading (plus ``summary``)."""
        text = inspect.cleandoc(cls.__doc__ or "")
        parts = re.split(r"^## +(.+?)\s*$", text, flags=re.MULTILINE)
        sections = {"summary": parts[0].strip()}
        for heading, body in zip(parts[1::2], parts[2::2]):
            sections[heading.strip()] = body.strip()
        return sections

    @classmethod
    def docs_ref(cls) -> str:
        """Where to read the check's documentation."""
        return DOCS_REF.format(id=cls.id)
