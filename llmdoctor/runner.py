"""Running checks in checklist order, isolating each one.

A check whose probes are unavailable is skipped with the probe's reason; a
check that raises is recorded as crashed; neither stops the run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from llmdoctor.check import Check, CheckSkipped
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.findings import Finding

__all__ = ["CheckOutcome", "Status", "run_one"]


class Status:
    """Outcome names of a check (strings, for JSON)."""

    PASSED = "passed"
    FAILED = "failed"  # produced at least one finding
    SKIPPED = "skipped"
    CRASHED = "crashed"


@dataclass
class CheckOutcome:
    """What happened when one check ran."""

    check_id: str
    name: str
    title: str
    category: str
    status: str
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""
    duration_ms: float = 0.0


def _stamp(finding: Finding, check: type[Check]) -> Finding:
    return dataclasses.replace(
        finding, check_id=check.id, category=check.category.value, docs=check.docs_ref()
    )


def run_one(check: type[Check], ctx: Context) -> CheckOutcome:
    """Run a single check against the context."""
    outcome = CheckOutcome(check.id, check.name, check.title, check.category.value, Status.PASSED)
    started = time.perf_counter()
    try:
        for probe in check.requires:
            ctx.get(probe)
        outcome.findings = [_stamp(f, check) for f in check().run(ctx)]
    except ProbeUnavailable as exc:
        outcome.status, outcome.reason = Status.SKIPPED, exc.reason
    except CheckSkipped as exc:
        outcome.status, outcome.reason = Status.SKIPPED, exc.reason
    except Exception as exc:  # noqa: BLE001 - one broken check must not stop the diagnosis
        outcome.status = Status.CRASHED
        outcome.reason = ctx._redact(f"{type(exc).__name__}: {exc}")
        outcome.findings = []
    else:
        if outcome.findings:
            outcome.status = Status.FAILED
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    return outcome
