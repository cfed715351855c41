"""LD501 under a real open-file limit set by util-linux's ``prlimit``: a default is not a fault.

Issue 25: a healthy endpoint checked from an ordinary shell (Linux's usual soft limit of 1,024 open
files) exited WARNING, LD501 its only finding. The limit matters only when the declared workload
would reach it: the control declares more streams (``--concurrency 64``) than a 48-descriptor limit
leaves room for, and there LD501 must fire.

A fleet is such a workload too: ``--endpoints`` diagnoses up to 8 endpoints at once in one process,
each with its own connections. Under a limit of 96, ``--concurrency 20`` fits one endpoint and not 6
at once (120 sockets): LD501 fires for the fleet, and the same limit and concurrency for one endpoint
is its control. The default limit and the fleet each also run with a busy loop on every core.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import validate_report
from tests.processes import busy_loops

pytestmark = pytest.mark.slow

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
HOSTS = pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
#: The fleet case: a limit that holds FLEET_STREAMS for one endpoint, not for FLEET endpoints at once.
FLEET, FLEET_STREAMS, FLEET_LIMIT = 6, 20, 96


@contextlib.contextmanager
def _host(busy: bool) -> Iterator[None]:
    """Busy loops on every core while in it (bounded: they end by themselves), or nothing."""
    if not busy:
        yield
        return
    with busy_loops(seconds=240.0):
        yield


def _env() -> dict[str, str]:
    """This environment without any proxy variable, in either case: the endpoint is reached directly."""
    wanted = {v.lower() for v in PROXY_VARIABLES}
    return {k: v for k, v in os.environ.items() if k.lower() not in wanted}


def _run_under(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("util-linux's prlimit is not installed")
    proc = subprocess.run(
        [prlimit, f"--nofile={limit}:{limit}", sys.executable, "-m", "llmdoctor", "check", "--json", *args],
        capture_output=True, text=True, timeout=300, env=_env(), stdin=subprocess.DEVNULL)
    assert proc.stdout, proc.stderr[-2000:]
    return proc


def _check_under(limit: int, url: str, *args: str) -> tuple[int, dict]:
    proc = _run_under(limit, "-e", url, *args)
    report = json.loads(proc.stdout)
    validate_report(report)
    assert report["exit_code"] == proc.returncode
    return proc.returncode, report


def _fleet_under(limit: int, urls: list[str], tmp_path: Path, *args: str) -> list[dict]:
    """One report per endpoint of a ``--endpoints`` run under `limit` (NDJSON)."""
    endpoints = tmp_path / "fleet.txt"
    endpoints.write_text("".join(f"{u}\n" for u in urls))
    proc = _run_under(limit, "--endpoints", str(endpoints), "--rate", "200", *args)
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(reports) == len(urls) and all("findings" in r for r in reports), proc.stdout[-2000:]
    return reports


def _ld501(report: dict) -> list[dict]:
    return [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD501"]


def _outcome(report: dict) -> dict:
    outcome = next(o for o in report["checks"] if o["check_id"] == "LD501")
    return outcome


@HOSTS
def test_linux_default_limit_on_a_healthy_endpoint_exits_ok(busy: bool) -> None:
    with SimServer(get_profile("healthy")) as server, _host(busy):
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


@HOSTS
def test_a_fleet_at_once_beyond_the_limit_fires(tmp_path: Path, busy: bool) -> None:
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(SimServer(get_profile("healthy"))).url for _ in range(FLEET)]
        stack.enter_context(_host(busy))
        reports = _fleet_under(FLEET_LIMIT, urls, tmp_path, "--concurrency", str(FLEET_STREAMS))
    for report in reports:  # every endpoint's report names the limit the fleet as a whole reaches
        found = _ld501(report)
        assert len(found) == 1, [f["title"] for f in report["findings"]]
        assert f"a fleet of {FLEET} endpoints at once" in found[0]["title"], found[0]["title"]
        assert "EMFILE" in found[0]["message"]


def test_control_one_endpoint_under_the_fleets_limit_passes(tmp_path: Path) -> None:
    with SimServer(get_profile("healthy")) as server:
        (report,) = _fleet_under(FLEET_LIMIT, [server.url], tmp_path, "--concurrency", str(FLEET_STREAMS))
    assert not _ld501(report), [f["title"] for f in report["findings"]]
    assert _outcome(report)["status"] == "passed"
