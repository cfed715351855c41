"""Fixture-driven check cases: recorded measurements in, exact outcome out.

A case is a JSON file under ``fixtures/<CHECK_ID>/``::

    {
      "description": "why this case exists (and the source of recorded data)",
      "options": {"logs": ["server.log"]},          # optional Options fields; paths relative to the case
      "measurements": {"baseline": {...}, ...},       # recorded probe results (Context.measurements())
      "expect": {"status": "failed",                  # passed | failed | skipped | crashed
                 "findings": [{"severity": "warning", "title_contains": "cold"}],
                 "reason_contains": "..."}             # for skipped
    }

`expect.findings` lists exactly the findings the check must produce, in
order; each entry may constrain severity, confidence, title_contains,
message_contains, basis_contains (the impact's basis), evidence_contains (a
label or source of one of its evidence items), and min_impact_ms / max_impact_ms.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmdoctor.check import Check
from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.runner import CheckOutcome, run_checks
from llmdoctor.target import Target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

PATH_OPTIONS = {"logs", "request_files", "tokenizer"}


def case_files(check_id: str | None = None) -> list[Path]:
    """Every case file, or those of one check."""
    pattern = f"{check_id}/*.json" if check_id else "LD*/*.json"
    return sorted(FIXTURES.glob(pattern))


def load_case(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def run_case(check: type[Check], path: Path) -> CheckOutcome:
    """Run `check` on the case's recorded measurements (and local inputs)."""
    case = load_case(path)
    raw = dict(case.get("options", {}))
    for key in PATH_OPTIONS & raw.keys():
        value = raw[key]
        if isinstance(value, list):
            raw[key] = tuple(str(path.parent / v) for v in value)
        elif isinstance(value, str):
            raw[key] = str(path.parent / value)
    for key, value in list(raw.items()):
        if isinstance(value, list):
            raw[key] = tuple(value)
    options = Options.of(**raw)
    target = Target(base_url=case.get("endpoint", "http://127.0.0.1:9/v1"), model=case.get("model"))
    ctx = Context(target=target, options=options, recorded=case.get("measurements", {}), replay_local=True)
    return run_checks([check], ctx)[0]


def assert_outcome(outcome: CheckOutcome, expect: dict[str, Any], where: str = "") -> None:
    """Assert the outcome matches the case's expectation exactly."""
    prefix = f"{where}: " if where else ""
    assert outcome.status == expect["status"], (
        f"{prefix}status {outcome.status!r} != {expect['status']!r} (reason: {outcome.reason!r}, "
        f"findings: {[f.title for f in outcome.findings]})"
    )
    if "reason_contains" in expect:
        assert expect["reason_contains"].lower() in outcome.reason.lower(), f"{prefix}{outcome.reason!r}"
    wanted = expect.get("findings", [])
    got = outcome.findings
    assert len(got) == len(wanted), f"{prefix}{len(got)} findings {[f.title for f in got]} != {len(wanted)}"
    for finding, want in zip(got, wanted):
        if "severity" in want:
            assert finding.severity.value == want["severity"], f"{prefix}{finding.title}: {finding.severity}"
        if "confidence" in want:
            assert finding.confidence.value == want["confidence"], f"{prefix}{finding.title}"
        if "title_contains" in want:
            assert want["title_contains"].lower() in finding.title.lower(), f"{prefix}{finding.title!r}"
        if "message_contains" in want:
            assert want["message_contains"].lower() in finding.message.lower(), f"{prefix}{finding.message!r}"
        if "basis_contains" in want:
            assert want["basis_contains"].lower() in finding.impact_basis.lower(), f"{prefix}{finding.impact_basis!r}"
        if "evidence_contains" in want:
            needle = want["evidence_contains"].lower()
            assert any(needle in f"{e.label} {e.source}".lower() for e in finding.evidence), (
                f"{prefix}{[(e.label, e.source) for e in finding.evidence]}")
        if "min_impact_ms" in want:
            assert finding.impact_ms is not None and finding.impact_ms >= want["min_impact_ms"], prefix
        if "max_impact_ms" in want:
            assert finding.impact_ms is not None and finding.impact_ms <= want["max_impact_ms"], prefix
