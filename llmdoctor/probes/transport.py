"""Transport to the endpoint (probe ``transport``): round trip, TLS, keep-alive, HTTP/2, proxies.

Raw sockets, not HTTP requests (their number is reported in ``tcp_connections``):

- the endpoint's addresses (the system resolver's; with ``--dns-server``, that server's answers;
  an IP literal as given), each tried in Happy-Eyeballs order (RFC 8305: families interleaved,
  starting with the preferred one) until one connects. Every failure is kept with its cause
  (refused, unreachable, timeout) and the time ``connect()`` took to fail: the stall a client
  that tries addresses in turn pays on every new connection;
- several fresh TCP connections to the address that connects, each timed for ``connect()``:
  the TCP handshake is one round trip, and the kernel answers it whatever the server is doing,
  so it is the round trip (``rtt_ms``). A server slow to read or to answer cannot inflate it.
  Over plain http each connection then sends the HTTP/2 connection preface, which an h2c
  server answers with SETTINGS and any other server answers (an error) or closes at once: its
  answer time beyond the round trip is what a new connection waits for the server;
- for https, TLS handshakes (``ssl``, honouring ``--insecure`` / ``--ca-bundle``) with ALPN
  ``h2, http/1.1``: handshake time, version, cipher, whether HTTP/2 is offered. An IP-literal
  endpoint sends no SNI and its certificate is checked against the IP (a SAN ``IP:`` entry).

Cross-check: the quickest request of the probe client on an already-open connection (its first
byte) cannot arrive sooner than one round trip; when it does, the handshakes were slowed by
something other than distance and that request's time bounds the round trip instead.

From the probe client's own requests (the baseline's and every other one so far): how many
opened a fresh connection and how many reused one, what a fresh connection cost
(connect + TLS), and whether the server answers ``Connection: close``.

From the environment: ``HTTP(S)_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` and whether the endpoint
goes through a proxy, as `llmdoctor.proxies` decides it for the probe client; credentials are masked.
When it does, the probe takes the user's path: the round trip is the handshake with the proxy, the
TLS handshakes go through a ``CONNECT`` tunnel, and the proxy's cost is measured through it and
around it (`llmdoctor.probes.proxy_path`); nothing connects straight to the endpoint except that
comparison.
"""

from __future__ import annotations

import errno
import itertools
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, DNS
from llmdoctor.probes.proxy_path import ProxyPath, measure_proxy_path, tunnel
from llmdoctor.proxies import ProxySettings, proxy_settings, target_route

if TYPE_CHECKING:
    import ssl

    from llmdoctor.context import Context

__all__ = [
    "ConnectAttempt",
    "KeepAlive",
    "ProxyPath",
    "ProxySettings",
    "TransportResult",
    "happy_eyeballs_order",
    "keepalive_from",
    "probe",
    "proxy_settings",
]

def _statistics() -> ModuleType:
    """The statistics module, imported on first use (it pulls in fractions and decimal: start-up time)."""
    import statistics

    return statistics


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
MIN_SAMPLES, MAX_SAMPLES = 3, 10
TLS_SAMPLES = 3
EXCHANGE_TIMEOUT_S = 3.0
# How long one address may take to connect or fail: past Linux's neighbour-discovery give-up
# (3 probes of 1 s: a host gone from the LAN fails after ~3 s), so that stall is measured.
ATTEMPT_TIMEOUT_S = 5.0
MAX_ADDRESSES = 6
# A warm request must beat the handshake by this much (share, and ms) to contradict it.
CONTRADICTION_SHARE, CONTRADICTION_MIN_MS = 0.2, 1.0
# A late first answer on a new connection counts beyond a round trip and this much scheduling noise.
LATE_ANSWER_SLACK_MS = 1.0

_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN,
                errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT}


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
class ConnectAttempt:
    """One ``connect()`` to one resolved address, in the order the probe tried them."""

    address: str
    family: str = "ipv4"
    #: connected | refused | unreachable (no route, no ARP/NDP answer) | timeout | error
    outcome: str = ""
    #: Time until connect() returned or failed: the stall a failing address costs.
    ms: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        """The address accepted the connection."""
        return self.outcome == "connected"


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
    #: Where the addresses came from: the system resolver, a --dns-server, /etc/hosts, an IP literal.
    resolver: str = ""
    #: The addresses in the order they were tried (Happy Eyeballs), at most MAX_ADDRESSES.
    resolved: list[str] = field(default_factory=list)
    attempts: list[ConnectAttempt] = field(default_factory=list)
    attempt_timeout_s: float = ATTEMPT_TIMEOUT_S
    #: The probe client's quickest request on an already-open connection: first byte, and which.
    warm_ttfb_ms: float | None = None
    warm_request: str = ""
    #: The proxy in the path, measured through it and around it (None: the endpoint is reached directly).
    proxy_path: ProxyPath | None = None

    @property
    def connect_p50_ms(self) -> float | None:
        """Median time of ``connect()``: one TCP handshake."""
        return _statistics().median(self.connect_ms) if self.connect_ms else None

    @property
    def rtt_samples_ms(self) -> list[float]:
        """Round-trip samples, one per connection: the TCP handshake (``connect()``) time."""
        return list(self.connect_ms)

    @property
    def handshake_contradicted(self) -> bool:
        """A request on a warm connection answered clearly sooner than a handshake: they were not distance.

        Clearly: by 20% of the handshake and at least a millisecond, more than a busy host's noise.
        """
        hs = self.connect_p50_ms
        if hs is None or self.warm_ttfb_ms is None:
            return False
        return self.warm_ttfb_ms + max(CONTRADICTION_MIN_MS, CONTRADICTION_SHARE * hs) < hs

    @property
    def rtt_ms(self) -> float | None:
        """Round-trip time to the server: the median handshake, bounded by the quickest warm request."""
        hs = self.connect_p50_ms
        if hs is not None and self.handshake_contradicted:
            assert self.warm_ttfb_ms is not None
            return self.warm_ttfb_ms
        return hs

    @property
    def jitter_ms(self) -> float | None:
        """Standard deviation of the handshake samples."""
        samples = self.rtt_samples_ms
        return _statistics().stdev(samples) if len(samples) >= 2 else None

    @property
    def first_answer_ms(self) -> float | None:
        """Median time from connect() to the server's answer to the first bytes (plain http only)."""
        return _statistics().median(self.exchange_ms) if self.exchange_ms else None

    @property
    def new_connection_wait_ms(self) -> float:
        """What a new connection waits for the server beyond a round trip (a server slow to read/answer).

        The quickest first answer on a new connection minus the larger of the handshake and the
        quickest warm request (which bounds the end-to-end round trip, through any TCP proxy): a
        lower bound, counted only when it exceeds another round trip (or 1 ms). Behind a
        TCP-terminating proxy it holds the proxy's own connect upstream, and, with no warm
        request to compare (a server that closes every connection), the round trip beyond it.
        """
        rtt = self.rtt_ms
        if not self.exchange_ms or rtt is None:
            return 0.0
        # The quickest first answer: a server slow to read is slow on every new connection, while
        # a busy host's scheduling delays only some of them.
        extra = min(self.exchange_ms) - max(rtt, self.warm_ttfb_ms or 0.0)
        return extra if extra > max(rtt, LATE_ANSWER_SLACK_MS) else 0.0

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
        """What opening a connection costs a request, measured: TCP handshake + TLS + the server's wait."""
        connect = self.connect_p50_ms
        if connect is None:
            return None
        return connect + (self.tls_p50_ms or 0.0) + self.new_connection_wait_ms

    @property
    def rtt_share(self) -> float | None:
        """The round trip as a share of the baseline request's total latency."""
        if self.rtt_ms is None or not self.baseline_total_p50_ms:
            return None
        return self.rtt_ms / self.baseline_total_p50_ms

    @property
    def failed_attempts(self) -> list[ConnectAttempt]:
        """Addresses that failed before one connected (what a client trying them in turn waits on)."""
        if not any(a.ok for a in self.attempts):
            return []
        return list(itertools.takewhile(lambda a: not a.ok, self.attempts))

    @property
    def fallback_stall_ms(self) -> float:
        """Time spent on failing addresses before one connected, as measured."""
        return sum(a.ms for a in self.failed_attempts)


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


def _family(address: str) -> str:
    return "ipv6" if ":" in address else "ipv4"


def happy_eyeballs_order(addresses: Sequence[str], first_family: str | None = None) -> list[str]:
    """The order RFC 8305 (section 4) tries addresses in: families interleaved, duplicates dropped.

    The first family is `first_family`, or that of the first address (getaddrinfo sorts by
    RFC 6724 and /etc/gai.conf: its first answer is the system's preferred family).
    """
    unique = list(dict.fromkeys(addresses))
    if not unique:
        return []
    first = first_family or _family(unique[0])
    leading = [a for a in unique if _family(a) == first]
    trailing = [a for a in unique if _family(a) != first]
    return [a for pair in itertools.zip_longest(leading, trailing) for a in pair if a is not None]


def _addresses(ctx: Context, host: str, port: int, timeout_s: float) -> tuple[list[str], str]:
    """The endpoint's addresses in the order to try them, and where they came from."""
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.dns import is_ip_literal, system_lookup

    bare = host.strip("[]")
    if is_ip_literal(bare):
        return [bare], "IP literal"
    if ctx.options.network.dns_server:
        # The resolver the user names is the one the application uses: connect where it points.
        dns = ctx.optional(DNS)
        if dns is not None and dns.hosts_file_addresses:
            return happy_eyeballs_order(dns.hosts_file_addresses), "/etc/hosts"
        working = dns.working_resolver if dns is not None else None
        if working is not None:
            answers = {t: [a for q in working.queries if q.rdtype == t for a in q.answers if is_ip_literal(a)]
                       for t in ("AAAA", "A")}
            if answers["AAAA"] or answers["A"]:
                return (happy_eyeballs_order(answers["AAAA"] + answers["A"], "ipv6"),
                        f"DNS server {working.server} (--dns-server)")
    _, addresses, error = system_lookup(bare, port, timeout_s)
    if not addresses:
        raise ProbeUnavailable(f"cannot resolve {host}: {error or 'no address'}")
    return happy_eyeballs_order(addresses), "system resolver (getaddrinfo)"


def _connect(address: str, port: int, timeout_s: float) -> tuple[ConnectAttempt, socket.socket | None]:
    """One timed connect(): the attempt (outcome, measured duration) and the socket when it connected."""
    attempt = ConnectAttempt(address=address, family=_family(address))
    sock = socket.socket(socket.AF_INET6 if attempt.family == "ipv6" else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)
    started = time.perf_counter()
    try:
        sock.connect((address, port))
        attempt.outcome = "connected"
    except TimeoutError:
        attempt.outcome, attempt.error = "timeout", f"no answer within {timeout_s:g} s"
    except ConnectionRefusedError as exc:
        attempt.outcome, attempt.error = "refused", f"{type(exc).__name__}: {exc.strerror or exc}"
    except OSError as exc:
        attempt.outcome = "unreachable" if exc.errno in _UNREACHABLE else "error"
        attempt.error = f"{type(exc).__name__}: {exc.strerror or exc}"
    attempt.ms = (time.perf_counter() - started) * 1000
    if not attempt.ok:
        sock.close()
        return attempt, None
    return attempt, sock


def _exchange(result: TransportResult, sock: socket.socket) -> bool:
    """Send the HTTP/2 preface and time the first answer; False when the server did not answer in time."""
    started = time.perf_counter()
    try:
        sock.sendall(H2_PREFACE)
        try:
            reply = sock.recv(64)
        except ConnectionResetError:
            reply = b""
    except TimeoutError:
        result.errors.append("no answer to the first bytes on a new connection within the timeout")
        return False
    except OSError as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return True
    result.exchange_ms.append((time.perf_counter() - started) * 1000)
    if reply:
        is_settings = len(reply) >= 9 and reply[3] == 0x04
        result.h2c = bool(result.h2c) or is_settings
    return True


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


def _tls_sample(result: TransportResult, context: ssl.SSLContext, timeout_s: float) -> None:
    import ssl

    sock = _tls_socket(result, timeout_s)
    if sock is None:
        return
    try:
        # An IP literal as server_hostname: ssl sends no SNI and checks the certificate's IP SAN.
        tls = context.wrap_socket(sock, server_hostname=result.host.strip("[]"), do_handshake_on_connect=False)
        started = time.perf_counter()
        tls.do_handshake()
        result.tls_handshake_ms.append((time.perf_counter() - started) * 1000)
        result.tls_version = tls.version() or ""
        cipher = tls.cipher()
        result.tls_cipher = cipher[0] if cipher else ""
        result.alpn = tls.selected_alpn_protocol() or ""
        tls.close()
    except (OSError, ssl.SSLError, ValueError) as exc:
        result.tls_error = f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()


def _tls_socket(result: TransportResult, timeout_s: float) -> socket.socket | None:
    """A connection to handshake on: to the endpoint, or a CONNECT tunnel through the proxy in the path."""
    path = result.proxy_path
    through = path is not None and path.address and not path.not_measured
    host, _, port = (path.address.rpartition(":") if through and path is not None else (result.address, "", ""))
    _, sock = _connect(host.strip("[]"), int(port) if port else result.port, timeout_s)
    result.tcp_connections += 1
    if sock is None:
        result.tls_error = f"cannot connect to {host} for a TLS handshake"
        return None
    if through:
        try:
            _, status = tunnel(sock, result.host, result.port)
        except OSError as exc:
            status, result.tls_error = None, f"CONNECT through the proxy: {type(exc).__name__}: {exc}"
        if status != 200:
            result.tls_error = result.tls_error or f"the proxy answered CONNECT with {status or 'nothing'}"
            sock.close()
            return None
    return sock


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


def _first_connection(ctx: Context, result: TransportResult) -> socket.socket:
    """Try the addresses in order until one connects; every attempt is kept with its measured stall."""
    from llmdoctor.context import ProbeUnavailable

    result.attempt_timeout_s = min(ATTEMPT_TIMEOUT_S, ctx.options.request.timeout_s)
    for address in result.resolved:
        attempt, sock = _connect(address, result.port, ctx.cap_timeout(result.attempt_timeout_s))
        result.tcp_connections += 1
        result.attempts.append(attempt)
        if sock is not None:
            result.address = address
            result.connect_ms.append(attempt.ms)
            return sock
    failures = "; ".join(f"{a.address}: {a.error} after {a.ms:,.0f} ms" for a in result.attempts)
    raise ProbeUnavailable(f"cannot connect to {result.host}:{result.port}: {failures}")


def _measure(ctx: Context, result: TransportResult) -> TransportResult:
    target = ctx.target
    assert target is not None
    route = target_route(target)
    result.proxy = route.settings
    timeout_s = min(EXCHANGE_TIMEOUT_S, ctx.options.request.timeout_s)
    samples = max(MIN_SAMPLES, min(MAX_SAMPLES, ctx.options.request.samples))
    if route.proxy is not None:
        path = measure_proxy_path(route, target.scheme, target.host, target.port, samples, ctx.cap_timeout,
                                  timeout_s)
        result.proxy_path = path
        result.tcp_connections += path.connections
        if not path.not_measured:  # the user's path: the round trip is the one to the proxy
            if not path.proxy_connect_ms:
                from llmdoctor.context import ProbeUnavailable

                raise ProbeUnavailable(f"cannot connect to the proxy {path.proxy}: "
                                       + ("; ".join(path.errors) or "no address"))
            result.resolver = f"the proxy from {route.settings.variable or 'the environment'}"
            result.address, result.resolved = path.address, [path.address]
            result.connect_ms = list(path.proxy_connect_ms)
            result.errors.extend(path.errors)
            return _finish(ctx, result, timeout_s)
        result.errors.append(f"proxy in the path not measured ({path.not_measured}): the round trip below is "
                             "to the endpoint directly, around it")
    addresses, result.resolver = _addresses(ctx, target.host, target.port, ctx.cap_timeout(timeout_s))
    result.resolved = addresses[:MAX_ADDRESSES]
    sock: socket.socket | None = _first_connection(ctx, result)
    exchange = target.scheme == "http"  # over https the TLS handshake is the first exchange
    for _ in range(samples):
        if sock is None:
            attempt, sock = _connect(result.address, result.port, ctx.cap_timeout(timeout_s))
            result.tcp_connections += 1
            if sock is None:
                result.errors.append(f"{attempt.outcome}: {attempt.error}")
                break  # refused or timed out now: the next samples would fail (or wait) alike
            result.connect_ms.append(attempt.ms)
        try:
            sock.settimeout(ctx.cap_timeout(timeout_s))
            if exchange:
                exchange = _exchange(result, sock)  # a server that does not answer is not asked again
        finally:
            sock.close()
            sock = None
    return _finish(ctx, result, timeout_s)


def _finish(ctx: Context, result: TransportResult, timeout_s: float) -> TransportResult:
    """TLS handshakes (https), then what the probe client's own requests showed of connection reuse."""
    if result.scheme == "https":
        context = _tls_context(ctx)
        for _ in range(TLS_SAMPLES):
            _tls_sample(result, context, ctx.cap_timeout(timeout_s))
            if result.tls_error:
                break

    baseline = ctx.optional(BASELINE)
    if baseline is not None:
        result.baseline_total_p50_ms = baseline.total_p50_ms
    history = list(getattr(ctx.client, "history", []))
    if not history and baseline is not None:
        history = list(baseline.warmup) + list(baseline.samples)
    result.keepalive = keepalive_from(history)
    warm = [t for t in history if t.reused_connection and t.ttfb_ms is not None and t.status is not None]
    if warm:
        quickest = min(warm, key=lambda t: t.ttfb_ms or 0.0)
        result.warm_ttfb_ms, result.warm_request = quickest.ttfb_ms, f"{quickest.method} {quickest.path}"
    return result
