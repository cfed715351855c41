"""Our failures are ours (issue 25): under a real open-file limit (util-linux's ``prlimit``) the
requests this client cannot open are its own failures, never the server's.

Measured here: with ``--nofile=8:8`` the CLI starts (it needs about 5) and its sequential probes
keep to one pooled connection, but the concurrency probe (``--concurrency 16``) opens more sockets
than fit: about a dozen of its requests die with ``[Errno 24] Too many open files`` before the
server sees them. Before, LD002 ranked them first as the server's generation failures
(``server_errors``) and LD501 below it. The control runs the same check under Linux's usual 1,024.
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

LOW = 8
CONCURRENCY = "16"
FAILURE_CHECKS = ("LD001", "LD002")


def _env() -> dict[str, str]:
    """This environment without any proxy variable, in either case: the endpoint is reached directly."""
    wanted = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    return {k: v for k, v in os.environ.items() if k.lower() not in wanted}


def _check_under(limit: int, url: str) -> dict:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("util-linux's prlimit is not installed")
    proc = subprocess.run(
        [prlimit, f"--nofile={limit}:{limit}", sys.executable, "-m", "llmdoctor", "check", "-e", url, "--json",
         "--concurrency", CONCURRENCY], capture_output=True, text=True, timeout=240, env=_env(),
        stdin=subprocess.DEVNULL)
    assert proc.stdout, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    validate_report(report)
    assert report["exit_code"] == proc.returncode
    return report


def _all(report: dict) -> list[dict]:
    return [g for f in report["findings"] for g in (f, *f["supporting"])]


def test_emfile_is_this_clients_failure_and_ld501_ranks_first() -> None:
    with SimServer(get_profile("healthy")) as server:
        report = _check_under(LOW, server.url)
    requests = report["requests"]
    by_origin = requests["generation"]["failed_by"]
    assert by_origin.get("client", 0) >= 1, requests
    assert "server" not in by_origin and "path" not in by_origin, requests
    assert requests["troubled_generations"] == 0, requests
    ids = [f["check_id"] for f in report["findings"]]
    assert "LD501" in ids, report["findings"]
    # LD501 (the limit) ranks above every finding about failures, which never blame the server.
    first_failure = min((i for i, c in enumerate(ids) if c in FAILURE_CHECKS), default=len(ids))
    assert ids.index("LD501") < first_failure, ids
    assert all(f.get("cause") != "server_errors" for f in _all(report)), report["findings"]
    mine = [f for f in _all(report) if f["check_id"] == "LD002"]
    assert mine and all(f["cause"] == "client_limits" for f in mine), mine
    n = by_origin["client"]
    assert any(f"This client failed {n} requests: too many open files" in f["title"] for f in mine), mine


def test_at_linux_default_limit_no_request_is_the_clients() -> None:
    with SimServer(get_profile("healthy")) as server:
        report = _check_under(1024, server.url)
    requests = report["requests"]
    assert "client" not in requests["generation"]["failed_by"], requests
    assert all(t["failed_by"].get("client", 0) == 0 for t in requests["by_probe"]), requests
    assert requests["generation"]["sent"] > int(CONCURRENCY), requests
    assert not [f for f in _all(report) if f["check_id"] == "LD501" or f.get("cause") == "client_limits"], \
        report["findings"]
