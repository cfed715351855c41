"""LD208 in its place (issue 27): this machine's load changes the verdict only when it serves the endpoint.

The host probe runs for real (its sockets, its process list) with the CPU readings injected: a
saturated machine without busy loops, so the test is the same on a quiet or a loaded host.
"""

from __future__ import annotations

import psutil
import pytest
from llmdoctor.checks.ld208_host_pressure import HostPressure

from llmdoctor.context import Context
from llmdoctor.findings import Severity
from llmdoctor.options import Options
from llmdoctor.probes.catalog import HOST
from llmdoctor.runner import run_one
from llmdoctor.target import Target
from tests.processes import http_server_process
from tests.rawserver import unused_port


@pytest.fixture
def saturated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every core reads 100% busy over the host probe's sample (and the sample takes no time)."""
    real = psutil.cpu_percent

    def cpu_percent(interval: float | None = None, percpu: bool = False) -> float | list[float]:
        if interval:
            return [100.0] * (psutil.cpu_count() or 1) if percpu else 100.0
        return real(interval=None, percpu=percpu)

    monkeypatch.setattr(psutil, "cpu_percent", cpu_percent)


def _check(url: str, **options: object):
    ctx = Context(Target(base_url=url), Options.of(**options))
    return ctx.get(HOST), run_one(HostPressure, ctx)


def test_a_local_port_where_nothing_listens_is_not_a_server_to_give_headroom(saturated: None) -> None:
    h, outcome = _check(f"http://127.0.0.1:{unused_port()}/v1")
    assert h.target_is_local is True and h.listening is False and h.server_process is None
    assert h.cpu_percent == 100.0
    (cpu,) = [f for f in outcome.findings if "CPU" in f.title]
    assert cpu.severity is Severity.INFO and cpu.cause is None
    assert "nothing listens on its port" in cpu.message and "does not change the verdict" in cpu.message
    assert "inference server" not in cpu.fix.summary
    assert all(f.severity is Severity.INFO for f in outcome.findings)


def test_a_remote_endpoint_gets_the_load_said_as_info(saturated: None) -> None:
    h, outcome = _check("http://198.51.100.10:8000/v1")
    assert h.target_is_local is False and h.listening is None
    (cpu,) = [f for f in outcome.findings if "CPU" in f.title]
    assert cpu.severity is Severity.INFO and cpu.title.startswith("Client host pressure")
    assert "lowers the confidence" in cpu.message


def test_a_local_server_process_keeps_the_warning(saturated: None) -> None:
    with http_server_process() as (port, server):
        h, outcome = _check(f"http://127.0.0.1:{port}/v1")
    assert h.listening is True and h.server_process is not None and h.server_process.pid == server.pid
    (cpu,) = [f for f in outcome.findings if "CPU" in f.title]
    assert cpu.severity is Severity.WARNING and cpu.cause is not None and cpu.cause.value == "host_pressure"
    assert cpu.fix.summary.startswith("Give the inference server")


def test_pid_names_the_server_host_whatever_the_address(saturated: None) -> None:
    with http_server_process() as (_, server):
        h, outcome = _check("http://198.51.100.10:8000/v1", pid=server.pid)
    assert h.server_process is not None and h.process_source == "pid"
    (cpu,) = [f for f in outcome.findings if "CPU" in f.title]
    assert cpu.severity is Severity.WARNING and cpu.title.startswith("Server host pressure")
