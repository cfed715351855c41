"""CPU, memory and the serving process on this machine (probe ``host``, local).

This machine is always the client's (llmdoctor runs here), and the server's too when the
endpoint is local and its process is found: CPU saturation sampled over half a second, the
processes that used the CPU in that window (llmdoctor's own process marked as such, never
taken for the server), RAM and swap pressure, and the inference server's process (``--pid``,
or the local endpoint's listener, or found by name) with its RSS, threads, open files and
uptime; a young process is cold-start evidence. For a local endpoint it also says whether
anything listens on the endpoint's port at all (a local address where nothing listens serves
nothing from here).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

    from llmdoctor.context import Context

__all__ = ["CpuConsumer", "HostResult", "ProcessInfo", "SERVER_PATTERNS", "describe_process", "find_server_process",
           "host"]

# How inference servers show up in a process list: (label, regex over "name cmdline").
SERVER_PATTERNS: tuple[tuple[str, str], ...] = (
    ("vllm", r"\bvllm\b( serve|\.entrypoints)|vllm\.entrypoints"),
    ("sglang", r"sglang\.launch_server|\bsglang\b serve"),
    ("tgi", r"text-generation-launcher|text-generation-router|text-generation-server"),
    ("llama.cpp", r"(^|/)llama-server\b|llama_cpp\.server"),
    ("ollama", r"(^|/)ollama\b.*\b(serve|runner)\b|^ollama$"),
)
_SECRET_FLAG = re.compile(r"(key|token|secret|password)", re.IGNORECASE)
CPU_SAMPLE_S = 0.5
TOP_CONSUMERS = 5


@dataclass
class ProcessInfo:
    """The inference server's process."""

    pid: int
    name: str
    kind: str = ""
    cmdline: str = ""
    rss_bytes: int | None = None
    threads: int | None = None
    open_files: int | None = None
    started_at: float | None = None
    uptime_s: float | None = None
    cpu_percent: float | None = None


@dataclass
class CpuConsumer:
    """A process that used CPU while the host probe sampled it."""

    pid: int
    name: str
    #: Of one core over the sample (psutil's convention: 200 = two cores fully busy).
    cpu_percent: float
    cmdline: str = ""
    #: "llmdoctor" (this run's own process), "server" (the endpoint's process), or "".
    role: str = ""


@dataclass
class HostResult:
    """This machine's load, whose processes made it, and the serving process if found."""

    cpu_count: int
    cpu_percent: float
    per_cpu_percent: list[float] = field(default_factory=list)
    load_avg: list[float] = field(default_factory=list)
    mem_total_bytes: int = 0
    mem_available_bytes: int = 0
    mem_percent: float = 0.0
    swap_total_bytes: int = 0
    swap_used_bytes: int = 0
    swap_percent: float = 0.0
    swapped_in_bytes: int = 0
    swapped_out_bytes: int = 0
    target_is_local: bool | None = None
    server_process: ProcessInfo | None = None
    process_source: str = ""
    note: str = ""
    #: The processes that used the most CPU in the sample, busiest first (llmdoctor's own included).
    top_processes: list[CpuConsumer] = field(default_factory=list)
    #: llmdoctor's own process (this run), and its share of one core in the sample.
    self_pid: int | None = None
    self_cpu_percent: float | None = None
    #: The local endpoint is served from inside llmdoctor's own process (the embedded simulator).
    served_by_self: bool = False
    #: A local endpoint: whether any socket on this machine listens on its port (None: not local, or unseen).
    listening: bool | None = None
    sample_s: float = CPU_SAMPLE_S

    @property
    def mem_available_fraction(self) -> float | None:
        """Available / total RAM."""
        return self.mem_available_bytes / self.mem_total_bytes if self.mem_total_bytes else None


def _mask_cmdline(args: list[str]) -> str:
    out, hide_next = [], False
    for arg in args:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg.startswith("-") and _SECRET_FLAG.search(arg):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                hide_next = True
        else:
            out.append(arg)
    return " ".join(out)[:300]


def _age_s(pid: int) -> float | None:
    """How long ago the process started, to the clock tick (Linux), or None where /proc cannot tell.

    psutil's create_time adds the boot time, which /proc/stat gives in whole seconds: up to a
    second early, too coarse to tell whether a server started before or after our first request.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def describe_process(proc: psutil.Process, kind: str = "") -> ProcessInfo:
    """Snapshot a psutil.Process (fields it may not read are None)."""
    import psutil

    info = ProcessInfo(pid=proc.pid, name="", kind=kind)
    with proc.oneshot():
        for attr, call in (
            ("name", proc.name),
            ("cmdline", lambda: _mask_cmdline(proc.cmdline())),
            ("rss_bytes", lambda: proc.memory_info().rss),
            ("threads", proc.num_threads),
            ("open_files", lambda: len(proc.open_files())),
            ("started_at", proc.create_time),
        ):
            try:
                setattr(info, attr, call())
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                pass
    age = _age_s(proc.pid)
    if age is not None:
        info.uptime_s, info.started_at = age, time.time() - age
    elif info.started_at is not None:
        info.uptime_s = max(0.0, time.time() - info.started_at)
    try:
        info.cpu_percent = proc.cpu_percent(interval=None)
    except (psutil.Error, OSError):
        pass
    return info


def _prime_cpu_counters() -> dict[int, psutil.Process]:
    """Every visible process, its CPU counter primed: the next cpu_percent() covers the window from now."""
    import psutil

    procs: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["name"]):
        try:
            proc.cpu_percent(interval=None)
        except (psutil.Error, OSError):
            continue
        procs[proc.pid] = proc
    return procs


def _cpu_consumers(procs: dict[int, psutil.Process], server_pid: int | None) -> list[CpuConsumer]:
    """The processes' CPU use since `_prime_cpu_counters`, busiest first (those that used some, ours, the server)."""
    import psutil

    own = os.getpid()
    out: list[CpuConsumer] = []
    for pid, proc in procs.items():
        try:
            used = proc.cpu_percent(interval=None)
            if used <= 0.0 and pid not in (own, server_pid):
                continue
            name = proc.info.get("name") or proc.name()
            cmdline = _mask_cmdline(proc.cmdline())[:120]
        except (psutil.Error, OSError):
            continue
        role = "llmdoctor" if pid == own else "server" if pid == server_pid else ""
        out.append(CpuConsumer(pid=pid, name=name, cpu_percent=round(used, 1), cmdline=cmdline, role=role))
    out.sort(key=lambda c: c.cpu_percent, reverse=True)
    return out


def _kind(text: str) -> str | None:
    for kind, pattern in SERVER_PATTERNS:
        if re.search(pattern, text):
            return kind
    return None


def _listener(port: int) -> psutil.Process | None:
    """The process listening on TCP `port` on this machine, if it can be seen."""
    import psutil

    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for c in connections:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def _listening(port: int) -> bool | None:
    """Whether a TCP socket on this machine listens on `port`, whoever owns it (None: sockets unreadable)."""
    import psutil

    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def find_server_process(port: int | None = None) -> tuple[psutil.Process, str] | None:
    """The inference-server process: the one listening on `port` when it can be seen, else the oldest name match.

    A listener found on the port is the server whatever its name (``kind`` is then the
    pattern it matches, or ``"unknown"``).
    """
    import psutil

    if port is not None:
        proc = _listener(port)
        if proc is not None:
            try:
                text = f"{proc.name()} {' '.join(proc.cmdline())}"
            except psutil.Error:
                text = ""
            return proc, _kind(text) or "unknown"
    matches = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "create_time"]):
        text = f"{proc.info.get('name') or ''} {' '.join(proc.info.get('cmdline') or [])}".strip()
        kind = _kind(text)
        if kind:
            matches.append((proc, kind))
    if not matches:
        return None
    return min(matches, key=lambda m: m[0].info.get("create_time") or 0.0)


def _is_local(host: str) -> bool | None:
    import psutil

    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return None
    local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    for addr in addresses:
        try:
            if ipaddress.ip_address(addr.split("%")[0]).is_loopback or addr in local:
                return True
        except ValueError:
            continue
    return False


def host(ctx: Context) -> HostResult:
    """Probe: CPU, RAM and swap of this machine, the processes using its CPU, and the serving process."""
    import psutil

    from llmdoctor.context import ProbeUnavailable

    found = None
    source = ""
    served_by_self = False
    local = _is_local(ctx.target.host) if ctx.target else None
    listening = _listening(ctx.target.port) if ctx.target is not None and local else None
    if ctx.options.evidence.pid is not None and ctx.options.evidence.pid == os.getpid():
        raise ProbeUnavailable(f"--pid {ctx.options.evidence.pid} is llmdoctor's own process, not the server")
    if ctx.options.evidence.pid is not None:
        try:
            found = (psutil.Process(ctx.options.evidence.pid), "")
        except psutil.NoSuchProcess:
            raise ProbeUnavailable(f"--pid {ctx.options.evidence.pid}: no such process") from None
        source = "pid"
    elif ctx.target is not None and local:
        # Only a local endpoint has its server process on this machine; a remote endpoint's
        # server is never guessed from local process names.
        # Nothing listening on the port: no process here serves it (a name match elsewhere is another server).
        found = find_server_process(ctx.target.port) if listening is not False else None
        if found is not None and found[0].pid == os.getpid():
            found, served_by_self = None, True  # served from inside llmdoctor (the embedded simulator)
        source = "port or name" if found else ""
    if found is not None:
        found[0].cpu_percent(interval=None)  # primes the per-process counter for the window below
    procs = _prime_cpu_counters()
    per_cpu = psutil.cpu_percent(interval=CPU_SAMPLE_S, percpu=True)
    consumers = _cpu_consumers(procs, found[0].pid if found is not None else None)
    mem, swap = psutil.virtual_memory(), psutil.swap_memory()
    try:
        load = list(psutil.getloadavg())
    except (AttributeError, OSError):
        load = []
    result = HostResult(
        cpu_count=psutil.cpu_count() or len(per_cpu),
        cpu_percent=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
        per_cpu_percent=list(per_cpu),
        load_avg=load,
        mem_total_bytes=mem.total,
        mem_available_bytes=mem.available,
        mem_percent=mem.percent,
        swap_total_bytes=swap.total,
        swap_used_bytes=swap.used,
        swap_percent=swap.percent,
        swapped_in_bytes=getattr(swap, "sin", 0),
        swapped_out_bytes=getattr(swap, "sout", 0),
        target_is_local=local,
        process_source=source,
        top_processes=[c for c in consumers[:TOP_CONSUMERS]] + [
            c for c in consumers[TOP_CONSUMERS:] if c.role],  # llmdoctor and the server always listed
        self_pid=os.getpid(),
        self_cpu_percent=next((c.cpu_percent for c in consumers if c.role == "llmdoctor"), None),
        served_by_self=served_by_self,
        listening=listening,
    )
    if found is not None:
        try:
            result.server_process = describe_process(*found)
        except psutil.NoSuchProcess:
            result.note = "the server process exited while being read"
    elif ctx.options.evidence.pid is None:
        result.note = "no server process found for the endpoint on this machine; pass --pid if it runs here"
    return result
