"""Client-side limits (probe ``client_limits``, local) and the bounded concurrency probe (``concurrency``).

``client_limits`` reads only this machine: the open-file limit (``resource``) and how many
descriptors this process already holds (``psutil``: what is left for connections), the ephemeral
port range (``/proc/sys/net/ipv4/ip_local_port_range``) and the TCP sockets to the endpoint's
address and port by state (``psutil.net_connections``). When the endpoint's requests go through a
proxy from the environment (`llmdoctor.proxies.target_route`, ``NO_PROXY`` included), this machine's
sockets go to the proxy, not the endpoint: those are counted (``via_proxy`` says so).

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

from llmdoctor.probes.catalog import BASELINE, CONCURRENCY, DISCOVERY, SERVER_METRICS
from llmdoctor.probes.sizes import SINGLE_REQUESTS

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.measurements.server_metrics import ServerMetrics
    from llmdoctor.measurements.timing import RequestTiming

__all__ = ["ClientLimits", "ConcurrencyResult", "client_limits", "concurrency", "PORT_RANGE_FILE"]

PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


@dataclass
class ClientLimits:
    """Open-file limit, ephemeral ports and sockets to the endpoint on this machine."""

    nofile_soft: int | None = None
    nofile_hard: int | None = None
    #: Descriptors this process held when the limits were read (None: not known, an older recording).
    open_fds: int | None = None
    port_range: list[int] = field(default_factory=list)
    endpoint_addresses: list[str] = field(default_factory=list)
    port: int = 0
    established: int = 0
    time_wait: int = 0
    other_states: dict[str, int] = field(default_factory=dict)
    time_wait_total: int = 0
    sockets_error: str = ""
    #: The proxy the requests go through (masked URL; "" when direct): the sockets counted are to it.
    via_proxy: str = ""

    @property
    def fd_room(self) -> int | None:
        """Descriptors left under the soft limit for new connections (None: no limit, or unknown)."""
        if self.nofile_soft is None:
            return None
        return self.nofile_soft - (self.open_fds or 0)

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
    from llmdoctor.proxies import proxy_host, target_route

    result = ClientLimits()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result.nofile_soft = None if soft == resource.RLIM_INFINITY else int(soft)
    result.nofile_hard = None if hard == resource.RLIM_INFINITY else int(hard)
    result.port_range = _port_range(PORT_RANGE_FILE)
    try:
        result.open_fds = psutil.Process().num_fds()
    except (psutil.Error, OSError, AttributeError):  # num_fds is POSIX only
        result.open_fds = None
    if ctx.target is not None:
        host, result.port = ctx.target.host.strip("[]"), ctx.target.port
        route = target_route(ctx.target)
        proxied = proxy_host(route)
        if proxied is not None:  # the user's path: the sockets go to the proxy
            host, result.port = proxied[0].strip("[]"), proxied[1]
            result.via_proxy = route.settings.proxy_url or ""
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
    """Latency of the minimal request alone and with N in flight, in one interleaved run.

    One request alone, then N at once, then the other(s) alone: drift hits both sides alike. Each is
    timed in full (`single_ms`, `parallel_ms`) and from the first byte after its connection was set up
    (`single_service_ms`, `parallel_service_ms`): the parallel requests open connections of their own,
    and a handshake over a long path (or a stall on a dead address) is not the server queueing.
    `lag_ms` is the worst scheduling lag of llmdoctor while they ran; `server_queue_ms` the server's
    own mean queue time of the parallel requests (its histogram, scraped after them in place of the
    last request alone), where it exports one.
    """

    n: int
    requested: int
    single_ms: list[float] = field(default_factory=list)
    parallel_ms: list[float] = field(default_factory=list)
    parallel_wall_ms: float = 0.0
    max_in_flight: int = 0
    errors: int = 0
    note: str = ""
    single_service_ms: list[float] = field(default_factory=list)
    parallel_service_ms: list[float] = field(default_factory=list)
    parallel_setup_ms: list[float] = field(default_factory=list)
    lag_ms: float | None = None
    server_queue_ms: float | None = None
    server_queue_requests: float | None = None

    @property
    def singles(self) -> list[float]:
        """The alone requests compared: from the first byte after connect (totals in older recordings)."""
        return self.single_service_ms or self.single_ms

    @property
    def parallels(self) -> list[float]:
        """The parallel requests compared: from the first byte after connect (totals in older recordings)."""
        return self.parallel_service_ms or self.parallel_ms

    @property
    def single_p50_ms(self) -> float | None:
        """Median latency of one request alone (connection set-up excluded)."""
        import statistics  # on use: it costs start-up time (fractions, decimal)

        return statistics.median(self.singles) if self.singles else None

    @property
    def parallel_p50_ms(self) -> float | None:
        """Median latency with N requests in flight (connection set-up excluded)."""
        import statistics  # on use: it costs start-up time (fractions, decimal)

        return statistics.median(self.parallels) if self.parallels else None

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
        if not single or not self.parallel_wall_ms or not self.parallels:
            return None
        wall = self.parallel_wall_ms - (max(self.parallel_setup_ms) if self.parallel_setup_ms else 0.0)
        return min(float(self.n), len(self.parallels) * single / max(wall, 1e-6))


def concurrency(ctx: Context) -> ConcurrencyResult:
    """Latency at 1 vs N parallel requests; at most N in flight, within the request budget."""
    from llmdoctor.context import ProbeUnavailable

    off = CONCURRENCY.off_reason(ctx.options)
    if off:
        raise ProbeUnavailable(off)
    return concurrency_step(ctx, ctx.options.network.concurrency)


def _queue_reference(ctx: Context) -> tuple[ServerMetrics, str] | None:
    """The run's latest metrics scrape and its URL, when the backend exports a queue-time histogram."""
    metrics = ctx.optional(SERVER_METRICS)
    if metrics is None or metrics.latest.queue_time is None:
        return None
    url = ctx.options.evidence.metrics_url or metrics.url
    return (metrics.latest, url) if url else None


def _server_queue(ctx: Context, reference: ServerMetrics, url: str, parallel: int) -> tuple[float | None, str]:
    """The server's mean queue time (ms) of the `parallel` requests, from one scrape after them.

    The histogram moved from the run's latest scrape (`reference`) to now by every generation request
    sent since; when exactly ours moved it (no other traffic), the queue time in the window is put on
    the parallel requests, the only ones that could wait behind ours (the others ran one at a time).
    """
    from llmdoctor.probes.metrics import fetch_text, metrics_delta, normalize

    ours = sum(1 for t in ctx.request_history if t.generation and t.started_at > reference.scraped_at)
    text = fetch_text(ctx, url)
    if text is None:
        return None, f"GET {url} failed after the parallel requests"
    after = normalize(text, url)
    if after.queue_time is None or reference.queue_time is None:
        return None, "no queue-time histogram in the scrape after the parallel requests"
    delta = metrics_delta(reference, after, ours)
    count = after.queue_time.count - reference.queue_time.count
    if delta.counter_reset or count != ours:
        return None, (f"the queue-time histogram counted {count:.0f} requests where llmdoctor sent {ours}: "
                      "other traffic, so it says nothing of ours")
    total_s = after.queue_time.sum - reference.queue_time.sum
    return round(total_s * 1000.0 / max(parallel, 1), 3), ""


def concurrency_step(ctx: Context, requested: int) -> ConcurrencyResult:
    """One request alone, `requested` at once, then the rest of `SINGLE_REQUESTS` alone (fewer if the budget is short).

    Where the backend exports a queue-time histogram, the last request alone is replaced by one scrape
    after the parallel requests: the server's own queue time of them, which decides over the client's.
    """
    from concurrent.futures import ThreadPoolExecutor

    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.measurements.client_host import worst_lag_ms
    from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK

    base = ctx.optional(BASELINE)
    model = base.model if base is not None else ctx.get(DISCOVERY).model
    if model is None:
        raise ProbeUnavailable("no model to probe: pass --model")
    reference = _queue_reference(ctx)  # first: it may measure the metrics probe, which sends
    left = ctx.client.budget_left
    n = min(requested, left - SINGLE_REQUESTS)
    if n < 2:
        raise ProbeUnavailable(
            f"request budget too small for --concurrency {requested}: {left} left; raise --max-requests"
        )
    result = ConcurrencyResult(n=n, requested=requested)
    if n < requested:
        result.note = f"capped at {n} by the request budget"
    timings: list[RequestTiming] = []

    def send() -> RequestTiming:
        timing = ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, stream=True, extra={"model": model})
        timings.append(timing)
        return timing

    def alone() -> None:
        t = send()
        if t.ok and t.total_ms is not None:
            result.single_ms.append(t.total_ms)
            result.single_service_ms.append(max(0.0, t.total_ms - t.setup_ms))
        else:
            result.errors += 1

    lock = threading.Lock()
    in_flight = 0
    gate = threading.Barrier(n)

    def one() -> RequestTiming:
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

    alone()  # interleaved: one alone before the parallel requests, the rest after
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="llmdoctor-concurrency") as pool:
        outcomes = list(pool.map(lambda _: one(), range(n)))
    result.parallel_wall_ms = (time.perf_counter() - started) * 1000
    if reference is not None:
        result.server_queue_ms, note = _server_queue(ctx, *reference, n)
        result.server_queue_requests = float(n) if result.server_queue_ms is not None else None
        result.note = "; ".join(x for x in (result.note, note) if x)
    for _ in range(SINGLE_REQUESTS - 1 - (1 if reference is not None else 0)):
        alone()
    for t in outcomes:
        if t.ok and t.total_ms is not None:
            result.parallel_ms.append(t.total_ms)
            result.parallel_service_ms.append(max(0.0, t.total_ms - t.setup_ms))
            result.parallel_setup_ms.append(t.setup_ms)
        else:
            result.errors += 1
    result.lag_ms = worst_lag_ms(timings)
    return result
