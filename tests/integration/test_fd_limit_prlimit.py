"""LD501 under a real open-file limit set by util-linux's ``prlimit``: a default is not a fault.

Issue 25: a healthy endpoint checked from an ordinary shell (Linux's usual soft limit of 1,024 open
files) exited WARNING, LD501 its only finding. The limit matters only when the declared workload
would reach it: the control declares more streams (``--concurrency 64``) than a 48-descriptor limit
leaves room for, and there LD501 must fire.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import validate_report

pytestmark = pytest.mark.slow

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _env() -> dict[str, str]:
    """This environment without any proxy variable, in either case: the endpoint is reached directly."""
    wanted = {v.lower() for v in PROXY_VARIABLES}
    return {k: v for k, v in os.environ.items() if k.lower() not in wanted}


def _check_under(limit: int, url: str, *args: str) -> tuple[int, dict]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("util-linux's prlimit is not installed")
    proc = subprocess.run(
        [prlimit, f"--nofile={limit}:{limit}", sys.executable, "-m", "llmdoctor", "check", "-e", url, "--json",
         *args], capture_output=True, text=True, timeout=180, env=_env(), stdin=subprocess.DEVNULL)
    assert proc.stdout, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    validate_report(report)
    assert report["exit_code"] == proc.returncode
    return proc.returncode, report


def _ld501(report: dict) -> list[dict]:
    return [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD501"]


def _outcome(report: dict) -> dict:
    outcome = next(o for o in report["checks"] if o["check_id"] == "LD501")
    return outcome


def test_linux_default_limit_on_a_healthy_endpoint_exits_ok() -> None:
    with SimServer(get_profile("healthy")) as server:
        code, report = _check_under(1024, server.url)
    assert not _ld501(report), report["findings"]
    assert _outcome(report)["status"] == "passed"
    # The healthy endpoint has nothing to find; host pressure is the one finding a loaded shared machine
    # may add (its own measurement, LD208), and it is not this check's business.
    others = [f["check_id"] for f in report["findings"] if f["check_id"] != "LD208"]
    assert others == [], report["findings"]
    if not report["findings"]:
        assert code == 0


def test_concurrency_beyond_the_limit_fires() -> None:
    with SimServer(get_profile("healthy")) as server:
        _, report = _check_under(48, server.url, "--concurrency", "64")
    found = _ld501(report)
    assert len(found) == 1, report["findings"]
    assert found[0]["severity"] == "warning" and "--concurrency 64" in found[0]["title"]
    assert "EMFILE" in found[0]["message"]
