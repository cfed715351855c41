"""LD208: the host's CPU, RAM or swap is under pressure."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import HOST

CPU_BUSY_PCT = 90.0
MEM_AVAILABLE_MIN = 0.10
SWAP_USED_PCT = 10.0


class HostPressure(Check):
    """Host pressure: CPU saturated, RAM nearly exhausted, or the server swapping.

    ## What it checks
    On the machine the doctor runs on (the server host, or with ``--pid``):
    CPU busy sampled over half a second (fires at 90%), available RAM (fires
    below 10%) and swap in use (fires above 10% of swap).

    ## Why it adds latency
    Tokenization, detokenization, the HTTP server and the scheduler run on
    the CPU: a saturated CPU delays every request before and after the GPU
    work, and CPU-offloaded layers (llama.cpp, Ollama) run there entirely.
    Swapping turns memory reads into disk reads, milliseconds each.

    ## Example
    CPU 97% busy on 16 cores; 1.2 GiB of 64 GiB available; swap 35% used.

    ## Fix
    Give the server room: stop competing processes, add RAM or cores, keep
    the whole model on the GPU, and avoid swap on inference hosts
    (``vm.swappiness``, or no swap at all).

    ## Caveats
    Readings describe *this* machine: the check is skipped when the endpoint
    is on another host and no server process was found here. A half-second
    CPU sample can catch a short spike.
    """

    id = "LD208"
    name = "host-pressure"
    title = "Host CPU, RAM or swap under pressure"
    category = Category.SERVER
    requires = (HOST,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        h = ctx.get(HOST)
        if h.server_process is None and h.target_is_local is False:
            raise CheckSkipped("the endpoint is on another machine and no server process runs here")
        where = f"server process {h.server_process.pid} ({h.server_process.name})" if h.server_process else "this host"
        gib = 1024**3
        problems: list[tuple[str, str, tuple[Evidence, ...]]] = []
        if h.cpu_percent >= CPU_BUSY_PCT:
            problems.append((
                f"CPU {h.cpu_percent:.0f}% busy",
                f"The CPUs of {where} were {h.cpu_percent:.0f}% busy on {h.cpu_count} cores over 0.5 s: "
                "tokenization, scheduling and HTTP handling wait for CPU time.",
                (Evidence("CPU busy", round(h.cpu_percent, 1), "%", "psutil"),
                 Evidence("load average (1 min)", h.load_avg[0] if h.load_avg else None, "", "psutil")),
            ))
        avail = h.mem_available_fraction
        if avail is not None and avail < MEM_AVAILABLE_MIN:
            problems.append((
                f"RAM nearly exhausted ({avail:.0%} available)",
                f"Only {h.mem_available_bytes / gib:.1f} of {h.mem_total_bytes / gib:.1f} GiB RAM is available "
                f"on {where}: page cache for weights is evicted and the kernel may swap or OOM-kill.",
                (Evidence("RAM available", round(h.mem_available_bytes / gib, 2), "GiB", "psutil"),
                 Evidence("RAM total", round(h.mem_total_bytes / gib, 2), "GiB", "psutil")),
            ))
        if h.swap_total_bytes and h.swap_percent >= SWAP_USED_PCT:
            problems.append((
                f"swap {h.swap_percent:.0f}% used",
                f"{h.swap_used_bytes / gib:.1f} GiB of swap is in use on {where}: memory it touches "
                "is read back from disk.",
                (Evidence("swap used", round(h.swap_used_bytes / gib, 2), "GiB", "psutil"),),
            ))
        for title, message, evidence in problems:
            yield Finding(
                Severity.WARNING,
                Confidence.HIGH if h.server_process else Confidence.MEDIUM,
                f"Host pressure: {title}",
                message,
                Fix(
                    "Give the inference server CPU and memory headroom.",
                    (
                        "Stop or move competing processes; add cores or RAM.",
                        "Keep all model layers on the GPU so the CPU only tokenizes and schedules.",
                        "Avoid swap on inference hosts (lower vm.swappiness or disable swap).",
                    ),
                ),
                impact_basis="not measurable from host counters alone; it inflates every request's fixed cost",
                evidence=evidence,
                cause=Cause.HOST_PRESSURE,
            )
