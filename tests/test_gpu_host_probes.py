"""GPU probe on recorded NVML readings and on this machine's real NVML; host probe for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from llmdoctor.checks.ld201_gpu_saturation import GpuSaturation
from llmdoctor.checks.ld202_gpu_memory import GpuMemoryFull
from llmdoctor.checks.ld208_host_pressure import HostPressure
from llmdoctor.checks.ld302_recent_restart import RecentRestart

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.options import Options
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST, HOST
from llmdoctor.probes.gpu import GpuSnapshot, RecordedNvml, gpu, read_gpus
from llmdoctor.probes.host import find_server_process, host
from llmdoctor.runner import run_one
from llmdoctor.serde import from_data, to_data
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.processes import busy_loops, free_port, http_server_process, serve_sim, serve_sim_process, stop

NVML = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def recording(name: str) -> RecordedNvml:
    return RecordedNvml(json.loads((NVML / name).read_text()))


def _has_driver() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_recorded_h100_under_load() -> None:
    sleeps: list[float] = []
    snap = read_gpus(recording("h100-under-load.json"), samples=5, interval_s=0.2, sleep=sleeps.append)
    (g,) = snap.gpus
    assert sleeps == [0.2] * 4 and len(g.util_samples) == 5
    assert g.util_mean == pytest.approx(99.8) and g.util_min == 99
    assert g.memory_fraction == pytest.approx(0.908, abs=0.001)
    assert g.throttle_reasons == ["sw_power_cap"] and g.power_w == pytest.approx(688.512)
    assert g.processes[0].pid == 41873 and g.ecc_uncorrected == 0 and snap.driver_version == "550.54.15"


def test_recorded_readings_roundtrip_through_serde() -> None:
    snap = read_gpus(recording("a100-idle.json"), sleep=lambda s: None)
    back = from_data(GpuSnapshot, json.loads(json.dumps(to_data(snap))))
    assert back.gpus[0].util_samples == [0.0, 3.0, 0.0, 12.0, 0.0] and back.gpus[0].throttle_reasons == ["gpu_idle"]


@pytest.mark.skipif(_has_driver(), reason="this machine has an NVIDIA driver")
def test_real_nvml_without_driver_is_unavailable_with_reason() -> None:
    ctx = Context(target=None)
    with pytest.raises(ProbeUnavailable, match="no NVIDIA driver: NVML Shared Library Not Found"):
        gpu(ctx)


@pytest.mark.skipif(_has_driver(), reason="this machine has an NVIDIA driver")
def test_gpu_checks_skipped_once_with_both_reasons() -> None:
    ctx = Context(target=None)
    outcomes = [run_one(check, ctx) for check in (GpuSaturation, GpuMemoryFull)]
    assert [o.status for o in outcomes] == ["skipped", "skipped"]
    for o in outcomes:
        assert "NVML Shared Library Not Found" in o.reason and "--gpu-metrics-url" in o.reason
    assert [s.name for s in ctx.statuses()].count("gpu") == 1  # the probe ran once for both checks


@pytest.mark.skipif(not _has_driver(), reason="no NVIDIA driver on this machine")
def test_real_nvml_reads_every_gpu() -> None:
    snap = gpu(Context(target=None))
    assert snap.gpus and all(g.memory_total_bytes and len(g.util_samples) == 5 for g in snap.gpus)


# -- host ------------------------------------------------------------------------------------------
def test_host_probe_reads_this_machine() -> None:
    result = host(Context(target=None))
    assert result.cpu_count == psutil.cpu_count()
    assert 0.0 <= result.cpu_percent <= 100.0 and len(result.per_cpu_percent) == result.cpu_count
    assert result.mem_total_bytes == psutil.virtual_memory().total
    assert 0 < result.mem_available_bytes <= result.mem_total_bytes


@pytest.fixture
def child():
    procs = []

    def start(*extra: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *extra])
        procs.append(proc)
        time.sleep(0.2)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_host_probe_with_pid_reads_the_process_and_masks_secrets(child) -> None:
    proc = child("--api-key", "sk-secret-value", "--token=abc123")
    result = host(Context(target=None, options=Options.of(pid=proc.pid)))
    p = result.server_process
    assert p is not None and p.pid == proc.pid and result.process_source == "pid"
    assert p.rss_bytes and p.rss_bytes > 0 and p.threads and p.threads >= 1
    assert p.uptime_s is not None and p.uptime_s < 30 and p.open_files is not None
    assert "sk-secret-value" not in p.cmdline and "abc123" not in p.cmdline and "--api-key ***" in p.cmdline


def test_server_found_by_name(child) -> None:
    proc = child("-m", "llama_cpp.server")
    found = find_server_process()
    assert found is not None
    ours = [p for p in psutil.process_iter(["cmdline"]) if "llama_cpp.server" in " ".join(p.info["cmdline"] or [])]
    if len(ours) == 1:
        assert found[0].pid == proc.pid and found[1] == "llama.cpp"


def test_warm_server_started_before_the_run_is_no_restart() -> None:
    """A server process seconds old (well under LD302's ten minutes) that answers warm: nothing to report."""
    with serve_sim_process() as (port, server):
        ctx = Context(Target(base_url=f"http://127.0.0.1:{port}/v1"), Options.of(samples=3))
        ctx.get(FIRST_REQUEST), ctx.get(BASELINE)
        outcome = run_one(RecentRestart, ctx)
        proc = ctx.get(HOST).server_process
    assert proc is not None and proc.pid == server.pid and proc.uptime_s is not None and proc.uptime_s < 600
    assert outcome.status == "passed", [f.message for f in outcome.findings]


def test_restart_during_the_run_is_reported() -> None:
    port = free_port()
    server = serve_sim(port)
    try:
        ctx = Context(Target(base_url=f"http://127.0.0.1:{port}/v1"), Options.of(samples=3))
        ctx.get(FIRST_REQUEST)
        stop(server)
        server = serve_sim(port)  # restarted between our first request and the rest of the run
        ctx.get(BASELINE)
        outcome = run_one(RecentRestart, ctx)
    finally:
        stop(server)
    (finding,) = outcome.findings
    assert f"process {server.pid}" in finding.message and "started during the run" in finding.message


def test_young_server_whose_first_request_paid_a_cold_start_is_reported() -> None:
    with serve_sim_process("cold-start") as (port, server):  # the first generation pays ~1.5 s
        ctx = Context(Target(base_url=f"http://127.0.0.1:{port}/v1"), Options.of(samples=3))
        ctx.get(FIRST_REQUEST), ctx.get(BASELINE)
        outcome = run_one(RecentRestart, ctx)
    (finding,) = outcome.findings
    assert finding.severity.value == "warning" and f"process {server.pid}" in finding.message
    assert "more than warm ones" in finding.message and finding.impact_ms and finding.impact_ms > 1000


def test_missing_pid_is_unavailable() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(ProbeUnavailable, match="no such process"):
        host(Context(target=None, options=Options.of(pid=dead.pid)))


def test_host_probe_finds_the_process_listening_on_the_endpoint_port() -> None:
    with http_server_process() as (port, child):
        result = host(Context(Target(base_url=f"http://127.0.0.1:{port}/v1"), Options()))
        remote = host(Context(Target(base_url=f"http://192.0.2.10:{port}/v1"), Options()))
    assert result.server_process is not None and result.server_process.pid == child.pid
    assert remote.server_process is None  # a remote endpoint's server is never guessed locally


# -- LD208 scoped: whose machine, which processes -------------------------------------------------
@pytest.fixture
def busy_cores():
    """One bounded busy loop per core, stopped at the end of the test."""
    with busy_loops() as pids:
        yield pids


@pytest.mark.slow  # busy loops saturate the host
def test_client_load_against_a_remote_endpoint_is_called_the_clients(busy_cores) -> None:
    ctx = Context(Target(base_url="http://198.51.100.10:8000/v1"), Options())
    h = ctx.get(HOST)
    assert h.server_process is None and h.target_is_local is False and h.self_pid == os.getpid()
    # The busiest processes, in order, llmdoctor's own among them (others may load this shared host too).
    shares = [c.cpu_percent for c in h.top_processes if c.role != "llmdoctor"]
    assert shares == sorted(shares, reverse=True) and shares[0] >= 20
    assert [c.role for c in h.top_processes if c.pid == os.getpid()] == ["llmdoctor"]
    outcome = run_one(HostPressure, ctx)
    assert outcome.status == "failed", outcome.reason
    cpu = outcome.findings[0]
    assert cpu.title.startswith("Client host pressure: CPU") and "not the server's" in cpu.message
    assert "top consumers: " in cpu.message and "server process" not in cpu.message


@pytest.mark.slow  # busy loops saturate the host
def test_llmdoctor_own_process_is_never_the_server_process(busy_cores) -> None:
    with SimServer(get_profile("healthy")) as sim:  # served from this very process, as the demo is
        ctx = Context(Target(base_url=sim.base_url), Options())
        h = ctx.get(HOST)
        outcome = run_one(HostPressure, ctx)
    assert h.server_process is None and h.served_by_self and h.self_pid == os.getpid()
    assert [c.role for c in h.top_processes if c.pid == os.getpid()] == ["llmdoctor"]
    (cpu,) = [f for f in outcome.findings if "CPU" in f.title]
    assert f"server process {os.getpid()}" not in cpu.message and "serves the endpoint itself" in cpu.message
    with pytest.raises(ProbeUnavailable, match="llmdoctor's own process"):
        host(Context(target=None, options=Options.of(pid=os.getpid())))


@pytest.mark.slow  # busy loops saturate the host
def test_a_local_server_process_makes_it_the_servers_host(busy_cores) -> None:
    with http_server_process() as (port, server):
        ctx = Context(Target(base_url=f"http://127.0.0.1:{port}/v1"), Options())
        outcome = run_one(HostPressure, ctx)
        h = ctx.get(HOST)
    assert h.server_process is not None and h.server_process.pid == server.pid
    assert [c.role for c in h.top_processes if c.pid == server.pid] == ["server"]
    cpu = outcome.findings[0]
    assert cpu.title.startswith("Server host pressure: CPU") and f"server process {server.pid}" in cpu.message
