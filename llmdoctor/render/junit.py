"""JUnit XML rendering, for CI systems that show test results (Jenkins, GitLab, GitHub).

Each check is a ``testcase`` (classname ``llmdoctor.<category>``): a
``failure`` when it produced a finding at or above ``--fail-on``, ``skipped``
(with the reason) when its measurements were unavailable, ``error`` when it
crashed; findings below the threshold go to the test case's ``system-out``. A finding folded under
another (a symptom under the cause that explains it) is a failure only there, in the cause's test
case; its own test case's ``system-out`` says where it is listed.
The element and attribute structure follows the JUnit schema Jenkins uses
(xunit-plugin's ``junit-10.xsd``): ``testsuites`` > ``testsuite`` (required
name/tests/failures/errors) > ``testcase`` (required name).
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET

from llmdoctor.findings import Finding, Severity
from llmdoctor.render.common import names_line, supporting_line
from llmdoctor.reporting.report import Report
from llmdoctor.runner import CheckOutcome, Status

__all__ = ["render_junit", "counts_as_failure"]


def counts_as_failure(finding: Finding, fail_on: str) -> bool:
    """True when the finding fails the gate: critical always, warning unless ``fail_on=critical``."""
    if finding.severity == Severity.CRITICAL:
        return True
    return finding.severity == Severity.WARNING and fail_on == "warning"


def _describe(f: Finding) -> str:
    lines = [f"{f.severity.value.upper()} {f.check_id}: {f.title}"]
    named = names_line(f)
    if named:
        lines.append(named)
    lines.append(f.message)
    if f.impact_ms is not None:
        lines.append(f"impact ~{f.impact_ms:,.0f} ms {f.paid.label} ({f.impact_basis}); "
                     f"confidence {f.confidence.value}")
    if f.supporting:
        lines.append("Supporting findings, folded under this one:")
        lines += [f"  - {supporting_line(s)}" for s in f.supporting]
    lines.append(f"Fix: {f.fix.summary}")
    lines += [f"  - {s}" for s in f.fix.steps]
    lines.append(f"Docs: {f.docs}")
    return "\n".join(lines)


def _folded(f: Finding, top: Finding) -> str:
    return (f"{f.severity.value.upper()} {f.check_id}: {f.title}\n"
            f"Folded under {top.check_id} ({top.title}), which lists it as supporting evidence.")


def _case(o: CheckOutcome, fail_on: str, under: dict[int, Finding]) -> tuple[ET.Element, str]:
    case = ET.Element("testcase", name=f"{o.check_id} {o.name}: {o.title}", classname=f"llmdoctor.{o.category}",
                      time=f"{o.duration_ms / 1000:.3f}")
    kind = "passed"
    if o.status == Status.SKIPPED:
        ET.SubElement(case, "skipped", message=o.reason)
        kind = "skipped"
    elif o.status == Status.CRASHED:
        err = ET.SubElement(case, "error", message=o.reason, type="crashed")
        err.text = o.reason
        kind = "error"
    listed = [f for f in o.findings if id(f) not in under]
    failing = [f for f in listed if counts_as_failure(f, fail_on)]
    other = [_describe(f) for f in listed if not counts_as_failure(f, fail_on)]
    # a finding folded under another check's is a failure there, once, not here again
    other += [_folded(f, under[id(f)]) for f in o.findings if id(f) in under]
    for f in failing:
        failure = ET.SubElement(case, "failure", message=f"{f.title}", type=f.severity.value)
        failure.text = _describe(f)
        kind = "failure"
    if other:
        out = ET.SubElement(case, "system-out")
        out.text = "\n\n".join(other)
    return case, kind


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (one test suite, one test case per check)."""
    under = {id(s): top for top in report.findings for s in top.supporting}
    cases = [_case(o, report.fail_on, under) for o in report.checks]
    kinds = [k for _, k in cases]
    n, failures, errors, skipped = len(cases), kinds.count("failure"), kinds.count("error"), kinds.count("skipped")
    seconds = f"{report.duration_ms / 1000:.3f}"
    root = ET.Element("testsuites", name="llmdoctor", tests=str(n), failures=str(failures), errors=str(errors),
                      time=seconds)
    suite = ET.SubElement(root, "testsuite", name=f"llmdoctor {report.endpoint}", tests=str(n),
                          failures=str(failures), errors=str(errors), skipped=str(skipped), time=seconds,
                          timestamp=report.started_at, hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")
    for name, value in (("endpoint", report.endpoint), ("model", report.model or ""),
                        ("status", report.status), ("exit_code", str(report.exit_code)),
                        ("fail_on", report.fail_on), ("requests_sent", str(report.requests_sent)),
                        ("replayed", str(report.replayed).lower())):
        ET.SubElement(props, "property", name=name, value=value)
    for case, _ in cases:
        suite.append(case)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
