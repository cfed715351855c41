"""Running checks in checklist order, isolating each one.

The run first measures the probes the checks declare (`schedule_for`, in the
catalog's canonical order), then runs each check on those results: a finding
never depends on which checks ran before it. A check whose probes are
unavailable is skipped with the probe's reason; a check that raises is
recorded as crashed; neither stops the run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from llmdoctor.check import Check, CheckSkipped
from llmdoctor.context import Context, ProbeUnavailable, UndeclaredRead
from llmdoctor.findings import Finding
from llmdoctor.probes.catalog import ORDER
from llmdoctor.probes.contract import AnyProbe, schedule

__all__ = ["CheckOutcome", "Status", "run_checks", "run_one", "schedule_for"]


class Status(str, Enum):
    """Outcome of a check (closed set; the value is the JSON ``status``, and what `str` gives)."""

    PASSED = "passed"
    FAILED = "failed"  # produced at least one finding
    SKIPPED = "skipped"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value


@dataclass
class CheckOutcome:
    """What happened when one check ran."""

    check_id: str
    name: str
    title: str
    category: str
    status: Status
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""
    duration_ms: float = 0.0

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a status outside the closed set is an error here


def _stamp(finding: Finding, check: type[Check]) -> Finding:
    return dataclasses.replace(
        finding, check_id=check.id, category=check.category.value, docs=check.docs_ref()
    )


def schedule_for(checks: Sequence[type[Check]], ctx: Context) -> list[AnyProbe]:
    """The probes these checks read in this run (with what those need), in measuring order."""
    return schedule((c.reads(ctx.options) for c in checks), ctx.off_reason, ORDER, ctx.options)


def run_checks(checks: Sequence[type[Check]], ctx: Context) -> list[CheckOutcome]:
    """Measure what `checks` read, then run each of them on the results."""
    ctx.measure(schedule_for(checks, ctx))
    return [run_one(check, ctx) for check in checks]


def run_one(check: type[Check], ctx: Context) -> CheckOutcome:
    """Run a single check against the context (measured by `run_checks` or `Context.measure`)."""
    outcome = CheckOutcome(check.id, check.name, check.title, check.category.value, Status.PASSED)
    started = time.perf_counter()
    reads = check.reads(ctx.options)
    try:
        with ctx.reading_as(check.id, reads.all):
            for probe in reads.requires:
                ctx.get(probe)
            outcome.findings = [_stamp(f, check) for f in check().run(ctx)]
    except UndeclaredRead:
        raise
    except ProbeUnavailable as exc:
        outcome.status, outcome.reason = Status.SKIPPED, exc.reason
    except CheckSkipped as exc:
        outcome.status, outcome.reason = Status.SKIPPED, exc.reason
    except Exception as exc:  # noqa: BLE001 - one broken check must not stop the diagnosis
        outcome.status = Status.CRASHED
        outcome.reason = ctx.redact(f"{type(exc).__name__}: {exc}")
        outcome.findings = []
    else:
        if outcome.findings:
            outcome.status = Status.FAILED
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    return outcome
