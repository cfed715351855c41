"""Client-side limits (probe ``client_limits``, local) and the bounded concurrency probe (``concurrency``).

``client_limits`` reads only this machine: the open-file limit (``resource``), the ephemeral
port range (``/proc/sys/net/ipv4/ip_local_port_range``) and the TCP sockets to the endpoint's
address and port by state (``psutil.net_connections``).

``concurrency`` (opt-in, ``--concurrency N``) sends the minimal "Say ok." request twice in a
row, then N at once through the probe client, never more than N in flight, within the request
budget: latency at 1 vs N shows server-side queueing or a pool cap.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmdoctor.probes.catalog import BASELINE, CONCURRENCY, DISCOVERY
from llmdoctor.probes.sizes import SINGLE_REQUESTS

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["ClientLimits", "ConcurrencyResult", "client_limits", "concurrency", "PORT_RANGE_FILE"]

PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


@dataclass
class ClientLimits:
    """Open-file limit, ephemeral ports and sockets to the endpoint on this machine."""

    nofile_soft: int | None = None
    nofile_hard: int | None = None
    port_range: list[int] = field(default_factory=list)
    endpoint_addresses: list[str] = field(default_factory=list)
    port: int = 0
    established: int = 0
    time_wait: int = 0
    other_states: dict[str, int] = field(default_factory=dict)
    time_wait_total: int = 0
    sockets_error: str = ""

    @property
    def ephemeral_ports(self) -> int | None:
        """How many local ports outgoing connections can use."""
        if len(self.port_range) != 2:
            return None
        return self.port_range[1] - self.port_range[0] + 1


def _port_range(path: str) -> list[int]:
    try:
        lo, hi = Path(path).read_text().split()[:2]
        return [int(lo), int(hi)]
    except (OSError, ValueError):
        return []


def client_limits(ctx: Context) -> ClientLimits:
    """Read this machine's limits and count its sockets to the endpoint."""
    import resource

    import psutil

    from llmdoctor.probes.dns import is_ip_literal, system_lookup

    result = ClientLimits()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result.nofile_soft = None if soft == resource.RLIM_INFINITY else int(soft)
    result.nofile_hard = None if hard == resource.RLIM_INFINITY else int(hard)
    result.port_range = _port_range(PORT_RANGE_FILE)
    if ctx.target is not None:
        host = ctx.target.host.strip("[]")
        result.port = ctx.target.port
        if is_ip_literal(host):
            result.endpoint_addresses = [host]
        else:
            _, result.endpoint_addresses, _ = system_lookup(host, result.port, 2.0)
    try:
        sockets = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError) as exc:
        result.sockets_error = f"cannot list sockets: {type(exc).__name__}: {exc}"
        return result
    wanted = set(result.endpoint_addresses)
    for conn in sockets:
        if conn.status == psutil.CONN_TIME_WAIT:
            result.time_wait_total += 1
        raddr = conn.raddr
        if not raddr or raddr.port != result.port or raddr.ip.removeprefix("::ffff:") not in wanted:
            continue
        if conn.status == psutil.CONN_ESTABLISHED:
            result.established += 1
        elif conn.status == psutil.CONN_TIME_WAIT:
            result.time_wait += 1
        else:
            result.other_states[conn.status] = result.other_states.get(conn.status, 0) + 1
    return result


@dataclass
class ConcurrencyResult:
    """Latency of the minimal request alone and with N in flight."""

    n: int
    requested: int
    single_ms: list[float] = field(default_factory=list)
    parallel_ms: list[float] = field(default_factory=list)
    parallel_wall_ms: float = 0.0
    max_in_flight: int = 0
    errors: int = 0
    note: str = ""

    @property
    def single_p50_ms(self) -> float | None:
        """Median latency of one request alone."""
        import statistics  # on use: it costs start-up time (fractions, decimal)

        return statistics.median(self.single_ms) if self.single_ms else None

    @property
    def parallel_p50_ms(self) -> float | None:
        """Median latency with N requests in flight."""
        import statistics  # on use: it costs start-up time (fractions, decimal)

        return statistics.median(self.parallel_ms) if self.parallel_ms else None

    @property
    def slowdown(self) -> float | None:
        """Parallel median over single median (1.0: no queueing)."""
        single, parallel = self.single_p50_ms, self.parallel_p50_ms
        if not single or parallel is None:
            return None
        return parallel / single

    @property
    def effective_parallelism(self) -> float | None:
        """How many requests the endpoint served at once: N x single / wall time of the batch."""
        single = self.single_p50_ms
        if not single or not self.parallel_wall_ms or not self.parallel_ms:
            return None
        return min(float(self.n), len(self.parallel_ms) * single / self.parallel_wall_ms)


def concurrency(ctx: Context) -> ConcurrencyResult:
    """Latency at 1 vs N parallel requests; at most N in flight, within the request budget."""
    from llmdoctor.context import ProbeUnavailable

    off = CONCURRENCY.off_reason(ctx.options)
    if off:
        raise ProbeUnavailable(off)
    return concurrency_step(ctx, ctx.options.network.concurrency)


def concurrency_step(ctx: Context, requested: int) -> ConcurrencyResult:
    """`SINGLE_REQUESTS` requests alone, then `requested` at once (fewer if the budget is short)."""
    from concurrent.futures import ThreadPoolExecutor

    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK

    base = ctx.optional(BASELINE)
    model = base.model if base is not None else ctx.get(DISCOVERY).model
    if model is None:
        raise ProbeUnavailable("no model to probe: pass --model")
    left = ctx.client.budget_left
    n = min(requested, left - SINGLE_REQUESTS)
    if n < 2:
        raise ProbeUnavailable(
            f"request budget too small for --concurrency {requested}: {left} left; raise --max-requests"
        )
    result = ConcurrencyResult(n=n, requested=requested)
    if n < requested:
        result.note = f"capped at {n} by the request budget"

    def send() -> float | None:
        timing = ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, stream=True, extra={"model": model})
        return timing.total_ms if timing.ok else None

    for _ in range(SINGLE_REQUESTS):
        ms = send()
        if ms is None:
            result.errors += 1
        else:
            result.single_ms.append(ms)

    lock = threading.Lock()
    in_flight = 0
    gate = threading.Barrier(n)

    def one() -> float | None:
        nonlocal in_flight
        gate.wait(timeout=30)
        with lock:
            in_flight += 1
            result.max_in_flight = max(result.max_in_flight, in_flight)
        try:
            return send()
        finally:
            with lock:
                in_flight -= 1

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="llmdoctor-concurrency") as pool:
        outcomes = list(pool.map(lambda _: one(), range(n)))
    result.parallel_wall_ms = (time.perf_counter() - started) * 1000
    result.parallel_ms = [ms for ms in outcomes if ms is not None]
    result.errors += sum(1 for ms in outcomes if ms is None)
    return result
