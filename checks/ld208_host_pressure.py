"""LD208: the CPU, RAM or swap of this machine is under pressure: a warning when it serves the endpoint, else info."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.limits import HOST_PRESSURE_LIMITS
from llmdoctor.probes.catalog import HOST
from llmdoctor.probes.host import CpuConsumer, HostResult

CPU_BUSY_PCT = HOST_PRESSURE_LIMITS.busy_cpu_pct  # the diagnosis reads the same number
MEM_AVAILABLE_MIN = 0.10
SWAP_USED_PCT = 10.0
NAMED_CONSUMERS = 3


def _consumer(c: CpuConsumer, h: HostResult) -> str:
    if c.role == "llmdoctor":
        who = f"llmdoctor itself (pid {c.pid})"
    elif c.role == "server" and h.server_process is not None:
        who = f"the server process {c.pid} ({_server_name(h)})"
    else:
        who = f"{c.name} (pid {c.pid})"
    return f"{who} {c.cpu_percent:.0f}%"


def _server_name(h: HostResult) -> str:
    p = h.server_process
    assert p is not None
    return p.kind if p.kind and p.kind != "unknown" else p.name


def _whose(h: HostResult) -> tuple[str, str, bool]:
    """Title prefix, whose machine this is (in words), and whether the endpoint is served from it.

    Served from here: the server's process is known (``--pid``, or the local port's listener or a
    name match), or the endpoint's address is this machine's and something listens on its port. Not:
    a remote endpoint, a local address where nothing listens, or llmdoctor's own embedded simulator
    (an instrument, not your server).
    """
    if h.server_process is not None:
        return ("Server host pressure",
                f"the server's host: it runs the server process {h.server_process.pid} ({_server_name(h)}) "
                "and llmdoctor", True)
    if h.served_by_self:
        return ("Host pressure", "llmdoctor runs here and serves the endpoint itself, from its embedded simulator "
                "(a demo, not your server)", False)
    if h.target_is_local and h.listening is False:
        return ("Client host pressure", "the client's: the endpoint's address is this machine's, but nothing listens "
                "on its port, so no server runs here to be slowed", False)
    if h.target_is_local:
        return ("Host pressure", "the endpoint is local, but its server process was not found", True)
    return ("Client host pressure",
            "the client's: llmdoctor runs here, the endpoint on another host - not the server's load", False)


#: What a client-only finding says instead of changing the verdict.
NOT_THE_VERDICT = (" It does not change the verdict: the endpoint is not served from this machine. It lowers "
                   "the confidence of this run's timing conclusions (floor, fit, queueing), whose differences are "
                   "compared with the scheduling lag measured here.")


class HostPressure(Check):
    """Host pressure: CPU saturated, RAM nearly exhausted, or swapping - on whose machine.

    ## What it checks
    On the machine the doctor runs on - always the client's, and the server's
    too when the endpoint is local and its process is found (or ``--pid``):
    CPU busy sampled over half a second (fires at 90%), the processes that
    used it (llmdoctor's own process named as such), available RAM (fires
    below 10%) and swap in use (fires above 10% of swap). The finding says
    whose machine it is. It is a warning (and moves the exit code) only when
    the endpoint is served from this machine: ``--pid``, or a loopback or
    local address that something listens on. Otherwise - a remote endpoint, a
    local port where nothing listens, llmdoctor's own demo simulator - it is
    info: the client's load inflates the client's timings, so it lowers the
    confidence of the timing conclusions (and the run compares their effects
    with its own measured lag), but it is not the server's fault.

    ## Why it adds latency
    On the server's host: tokenization, detokenization, the HTTP server and
    the scheduler run on the CPU, so a saturated CPU delays every request
    before and after the GPU work, and CPU-offloaded layers (llama.cpp,
    Ollama) run there entirely. On the client's host: the client's own reads
    and writes wait for CPU time, so every latency it measures - llmdoctor's
    included - is inflated by the client, not the server. Swapping turns
    memory reads into disk reads, milliseconds each.

    ## Example
    Client host pressure: CPU 100% busy on 2 cores; top consumers python3
    (pid 4120) 99%, python3 (pid 4121) 98%, llmdoctor itself (pid 4133) 3%.

    ## Fix
    Give the busy side room: stop or move the processes named, add RAM or
    cores, keep the whole model on the GPU, avoid swap on inference hosts
    (``vm.swappiness``, or no swap at all); measure from a quiet client.

    ## Caveats
    A half-second CPU sample can catch a short spike. For a remote endpoint
    only the client's machine is seen: the server's host is not measured.
    If your application runs on this busy client host, its own waits add to
    its requests: the info finding still names the busiest processes.
    """

    id = "LD208"
    name = "host-pressure"
    title = "Host CPU, RAM or swap under pressure"
    category = Category.SERVER
    requires = (HOST,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        h = ctx.get(HOST)
        prefix, where, servers = _whose(h)
        gib = 1024**3
        problems: list[tuple[str, str, tuple[Evidence, ...]]] = []
        if h.cpu_percent >= CPU_BUSY_PCT:
            problems.append(self._cpu(h, where, servers))
        avail = h.mem_available_fraction
        if avail is not None and avail < MEM_AVAILABLE_MIN:
            problems.append((
                f"RAM nearly exhausted ({avail:.0%} available)",
                f"Only {h.mem_available_bytes / gib:.1f} of {h.mem_total_bytes / gib:.1f} GiB RAM is available "
                f"on this machine ({where}): page cache for weights is evicted and the kernel may swap or OOM-kill.",
                (Evidence("RAM available", round(h.mem_available_bytes / gib, 2), "GiB", "psutil"),
                 Evidence("RAM total", round(h.mem_total_bytes / gib, 2), "GiB", "psutil")),
            ))
        if h.swap_total_bytes and h.swap_percent >= SWAP_USED_PCT:
            problems.append((
                f"swap {h.swap_percent:.0f}% used",
                f"{h.swap_used_bytes / gib:.1f} GiB of swap is in use on this machine ({where}): memory it "
                "touches is read back from disk.",
                (Evidence("swap used", round(h.swap_used_bytes / gib, 2), "GiB", "psutil"),),
            ))
        for title, message, evidence in problems:
            if not servers:  # the client's load: said, and weighed in the timings, never the verdict
                yield Finding(
                    Severity.INFO, Confidence.HIGH, f"{prefix}: {title}", message + NOT_THE_VERDICT,
                    Fix("Measure (and call the endpoint) from a client with CPU and memory headroom.", (
                        "Stop or move the competing processes named above, then run llmdoctor again.",
                        "Give the calling application's host enough cores: its own waits add to every request.",
                    )),
                    impact_basis="not measurable from host counters alone; it inflates the client's timings, "
                                 "not the server's",
                    evidence=evidence,
                )
                continue
            yield Finding(
                Severity.WARNING,
                Confidence.HIGH if h.server_process else Confidence.MEDIUM,
                f"{prefix}: {title}",
                message,
                Fix(
                    "Give the inference server CPU and memory headroom.",
                    (
                        "Stop or move the competing processes named above; add cores or RAM.",
                        "Keep all model layers on the GPU so the CPU only tokenizes and schedules.",
                        "Avoid swap on inference hosts (lower vm.swappiness or disable swap).",
                    ),
                ),
                impact_basis="not measurable from host counters alone; it inflates every request's fixed cost",
                evidence=evidence,
                cause=Cause.HOST_PRESSURE,
            )

    @staticmethod
    def _cpu(h: HostResult, where: str, servers: bool) -> tuple[str, str, tuple[Evidence, ...]]:
        busiest = [c for c in h.top_processes if c.cpu_percent > 0][:NAMED_CONSUMERS]
        own = next((c for c in h.top_processes if c.role == "llmdoctor"), None)
        if own is not None and own not in busiest and own.cpu_percent > 0:
            busiest.append(own)
        top = f"; top consumers: {', '.join(_consumer(c, h) for c in busiest)} (of one core)" if busiest else ""
        if servers:
            effect = "tokenization, scheduling and HTTP handling wait for CPU time."
        else:
            effect = ("the client's own reads and writes wait for CPU time, so the latencies measured from here "
                      "are inflated by the client, not by the server.")
        if own is not None and busiest and busiest[0] is own:
            effect += " Most of that load is llmdoctor's own process."
        evidence = [Evidence("CPU busy", round(h.cpu_percent, 1), "%", "psutil"),
                    Evidence("load average (1 min)", h.load_avg[0] if h.load_avg else None, "", "psutil")]
        evidence += [Evidence(f"CPU of {c.name} (pid {c.pid}{', ' + c.role if c.role else ''})", c.cpu_percent,
                              "% of a core", "psutil") for c in busiest]
        return (
            f"CPU {h.cpu_percent:.0f}% busy",
            f"This machine ({where}) was {h.cpu_percent:.0f}% busy on {h.cpu_count} cores over {h.sample_s:g} s"
            f"{top}: {effect}",
            tuple(evidence),
        )
