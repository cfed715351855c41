"""Transport to the endpoint (probe ``transport``): round trip, TLS, keep-alive, HTTP/2, proxies.

Raw sockets, not HTTP requests (their number is reported in ``tcp_connections``):

- several fresh TCP connections, each timed for ``connect()`` and for one minimal exchange:
  the HTTP/2 connection preface, which an h2c server answers with SETTINGS and any other
  server answers (an error, a TLS alert) or closes at once. A new connection costs two round
  trips before a first answer (handshake, then exchange), so one sample's round trip is
  ``(connect + exchange) / 2``. This holds behind a TCP proxy or load balancer too, where
  ``connect()`` only reaches the proxy and the upstream handshake hides in the exchange;
- for https, TLS handshakes (``ssl``, honouring ``--insecure`` / ``--ca-bundle``) with ALPN
  ``h2, http/1.1``: handshake time, version, cipher, whether HTTP/2 is offered.

From the probe client's own requests (the baseline's and every other one so far): how many
opened a fresh connection and how many reused one, what a fresh connection cost
(connect + TLS), and whether the server answers ``Connection: close``.

From the environment: ``HTTP(S)_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` and whether the endpoint
goes through a proxy, as `llmdoctor.proxies` decides it for the probe client; credentials are masked.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from llmdoctor.probes.catalog import BASELINE
from llmdoctor.probes.timing import RequestTiming
from llmdoctor.proxies import ProxySettings, proxy_settings

if TYPE_CHECKING:
    import ssl

    from llmdoctor.context import Context

__all__ = ["KeepAlive", "ProxySettings", "TransportResult", "proxy_settings", "keepalive_from", "probe"]

def _statistics() -> ModuleType:
    """The statistics module, imported on first use (it pulls in fractions and decimal: start-up time)."""
    import statistics

    return statistics


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
MIN_SAMPLES, MAX_SAMPLES = 3, 10
TLS_SAMPLES = 3
EXCHANGE_TIMEOUT_S = 3.0


@dataclass
class KeepAlive:
    """Connection reuse seen in the probe client's requests."""

    requests: int = 0
    fresh: int = 0
    reused: int = 0
    server_close_header: bool = False
    handshake_ms: list[float] = field(default_factory=list)
    fresh_total_p50_ms: float | None = None
    reused_total_p50_ms: float | None = None

    @property
    def handshake_p50_ms(self) -> float | None:
        """Median connect + TLS time of the requests that opened a connection."""
        return _statistics().median(self.handshake_ms) if self.handshake_ms else None

    @property
    def reuse_works(self) -> bool | None:
        """True when later requests reused a connection, False when none could; None: too few."""
        if self.requests < 2:
            return None
        return self.reused > 0 and not self.server_close_header


@dataclass
class TransportResult:
    """Round trip, TLS and connection reuse towards the endpoint."""

    host: str
    port: int
    scheme: str
    address: str = ""
    connect_ms: list[float] = field(default_factory=list)
    exchange_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tcp_connections: int = 0
    h2c: bool | None = None
    tls_version: str = ""
    tls_cipher: str = ""
    tls_handshake_ms: list[float] = field(default_factory=list)
    tls_error: str = ""
    alpn: str = ""
    proxy: ProxySettings = field(default_factory=ProxySettings)
    keepalive: KeepAlive = field(default_factory=KeepAlive)
    baseline_total_p50_ms: float | None = None

    @property
    def connect_p50_ms(self) -> float | None:
        """Median time of ``connect()``."""
        return _statistics().median(self.connect_ms) if self.connect_ms else None

    @property
    def rtt_samples_ms(self) -> list[float]:
        """Round-trip estimates, one per connection: (connect + first exchange) / 2."""
        return [(c + e) / 2 for c, e in zip(self.connect_ms, self.exchange_ms)]

    @property
    def rtt_ms(self) -> float | None:
        """Median round-trip time to the server."""
        samples = self.rtt_samples_ms
        if samples:
            return _statistics().median(samples)
        return self.connect_p50_ms

    @property
    def jitter_ms(self) -> float | None:
        """Standard deviation of the round-trip samples."""
        samples = self.rtt_samples_ms
        return _statistics().stdev(samples) if len(samples) >= 2 else None

    @property
    def tls_p50_ms(self) -> float | None:
        """Median TLS handshake time (https only)."""
        return _statistics().median(self.tls_handshake_ms) if self.tls_handshake_ms else None

    @property
    def http2(self) -> bool | None:
        """HTTP/2 offered: ALPN ``h2`` (https) or an h2c answer to the preface (http)."""
        if self.scheme == "https":
            return None if not self.tls_version else self.alpn == "h2"
        return self.h2c

    @property
    def new_connection_ms(self) -> float | None:
        """What opening a connection costs a request: one round trip plus the TLS handshake."""
        if self.rtt_ms is None:
            return None
        return self.rtt_ms + (self.tls_p50_ms or 0.0)

    @property
    def rtt_share(self) -> float | None:
        """The round trip as a share of the baseline request's total latency."""
        if self.rtt_ms is None or not self.baseline_total_p50_ms:
            return None
        return self.rtt_ms / self.baseline_total_p50_ms


def keepalive_from(timings: list[RequestTiming]) -> KeepAlive:
    """Summarise connection reuse over requests (in the order they were sent)."""
    ka = KeepAlive()
    fresh_totals, reused_totals = [], []
    for t in timings:
        if t.total_ms is None or (t.error and t.status is None):
            continue
        ka.requests += 1
        if t.response_headers.get("connection", "").lower() == "close":
            ka.server_close_header = True
        if t.reused_connection:
            ka.reused += 1
            reused_totals.append(t.total_ms)
        elif t.connect_ms is not None:
            ka.fresh += 1
            ka.handshake_ms.append(t.connect_ms + (t.tls_ms or 0.0))
            fresh_totals.append(t.total_ms)
    ka.fresh_total_p50_ms = _statistics().median(fresh_totals) if fresh_totals else None
    ka.reused_total_p50_ms = _statistics().median(reused_totals) if reused_totals else None
    return ka


def _address(host: str, port: int, timeout_s: float) -> tuple[str, int]:
    from llmdoctor.probes.dns import system_lookup

    _, addresses, error = system_lookup(host.strip("[]"), port, timeout_s)
    if not addresses:
        from llmdoctor.context import ProbeUnavailable

        raise ProbeUnavailable(f"cannot resolve {host}: {error or 'no address'}")
    addr = addresses[0]
    return addr, socket.AF_INET6 if ":" in addr else socket.AF_INET


def _sample(result: TransportResult, family: int, timeout_s: float) -> None:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)
    result.tcp_connections += 1
    try:
        started = time.perf_counter()
        sock.connect((result.address, result.port))
        connected = time.perf_counter()
        sock.sendall(H2_PREFACE)
        try:
            reply = sock.recv(64)
        except ConnectionResetError:
            reply = b""
        answered = time.perf_counter()
    except OSError as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return
    finally:
        sock.close()
    result.connect_ms.append((connected - started) * 1000)
    result.exchange_ms.append((answered - connected) * 1000)
    if result.scheme == "http" and reply:
        is_settings = len(reply) >= 9 and reply[3] == 0x04
        result.h2c = bool(result.h2c) or is_settings


def _tls_context(ctx: Context) -> ssl.SSLContext:
    import ssl

    if ctx.options.network.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=ctx.options.network.ca_bundle)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def _tls_sample(result: TransportResult, context: ssl.SSLContext, family: int, timeout_s: float) -> None:
    import ssl

    from llmdoctor.probes.dns import is_ip_literal

    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    result.tcp_connections += 1
    try:
        sock.connect((result.address, result.port))
        server_name = None if is_ip_literal(result.host) else result.host
        tls = context.wrap_socket(sock, server_hostname=server_name, do_handshake_on_connect=False)
        started = time.perf_counter()
        tls.do_handshake()
        result.tls_handshake_ms.append((time.perf_counter() - started) * 1000)
        result.tls_version = tls.version() or ""
        cipher = tls.cipher()
        result.tls_cipher = cipher[0] if cipher else ""
        result.alpn = tls.selected_alpn_protocol() or ""
        tls.close()
    except (OSError, ssl.SSLError) as exc:
        result.tls_error = f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()


def probe(ctx: Context) -> TransportResult:
    """Measure round trip, TLS and keep-alive towards the endpoint (see the module docstring).

    Every TCP connection it opens is reported to the context, whether the probe succeeds or not.
    """
    from llmdoctor.context import ProbeUnavailable

    if ctx.target is None:
        raise ProbeUnavailable("no endpoint given")
    target = ctx.target
    result = TransportResult(host=target.host, port=target.port, scheme=target.scheme)
    try:
        return _measure(ctx, result)
    finally:
        ctx.note_raw_connections(result.tcp_connections)


def _measure(ctx: Context, result: TransportResult) -> TransportResult:
    from llmdoctor.context import ProbeUnavailable

    target = ctx.target
    assert target is not None
    result.proxy = proxy_settings(target.scheme, target.host, target.port,
                                  credentials=bool(target.api_key or target.headers))
    timeout_s = min(EXCHANGE_TIMEOUT_S, ctx.options.request.timeout_s)
    result.address, family = _address(target.host, target.port, ctx.cap_timeout(timeout_s))
    samples = max(MIN_SAMPLES, min(MAX_SAMPLES, ctx.options.request.samples))
    for _ in range(samples):
        _sample(result, family, ctx.cap_timeout(timeout_s))
        if result.errors and (not result.connect_ms or "timed out" in result.errors[-1]):
            break  # refused, or an exchange timed out: the next samples would fail (or wait) alike
    if not result.connect_ms:
        raise ProbeUnavailable(f"cannot connect to {target.host}:{target.port}: {result.errors[-1]}")
    if target.scheme == "https":
        context = _tls_context(ctx)
        for _ in range(TLS_SAMPLES):
            _tls_sample(result, context, family, ctx.cap_timeout(timeout_s))
            if result.tls_error:
                break

    baseline = ctx.optional(BASELINE)
    if baseline is not None:
        result.baseline_total_p50_ms = baseline.total_p50_ms
    history = list(getattr(ctx.client, "history", []))
    if not history and baseline is not None:
        history = list(baseline.warmup) + list(baseline.samples)
    result.keepalive = keepalive_from(history)
    return result
