"""Through the proxy and around it: what a proxy from the environment costs the endpoint's requests.

Part of the ``transport`` probe, on raw sockets. When `llmdoctor.proxies` routes the endpoint
through an ``http://`` proxy (``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``, not exempted by
``NO_PROXY``), the user's requests take that path, so the probe measures it:

- **through it**, on fresh connections to the proxy: for a plain-http endpoint a ``HEAD /`` in
  absolute form (``HEAD http://host:port/``: the cheapest request a proxy forwards; a second one on
  the same connection when the proxy keeps it open), timed from ``connect()`` to the answer's
  status line; for an https endpoint the ``CONNECT host:port`` that opens the tunnel, timed from
  ``connect()`` to the proxy's ``200``;
- **around it**, only where the endpoint is reachable without it: the same on fresh connections
  to the endpoint itself (``HEAD /`` in origin form; for https, the TCP handshake alone).

The difference is the proxy's cost: for plain http on every request (each one goes through the
proxy; when the proxy closes every connection, as tinyproxy does, each request also pays a new
connection to it, while a direct client reuses its own), for https per new connection (the tunnel,
once up, carries the requests of its connection). An ``https://`` or SOCKS proxy is not measured
(its own TLS or handshake is not spoken here): the result says so.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmdoctor.proxies import Route

__all__ = ["ProxyPath", "measure_proxy_path", "proxy_address", "tunnel"]

#: The most bytes of a proxy's answer head read (status line and headers).
MAX_HEAD_BYTES = 16384


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


@dataclass
class ProxyPath:
    """A proxy in the endpoint's path, measured through it and around it (see the module docstring)."""

    #: The proxy, masked (``http://***@proxy:3128``), and the address:port connected to.
    proxy: str = ""
    address: str = ""
    #: HEAD (plain-http endpoint) or CONNECT (https endpoint).
    method: str = ""
    #: connect() to the proxy + its first answer, one per fresh connection.
    through_ms: list[float] = field(default_factory=list)
    #: A second HEAD on a connection to the proxy that stayed open (empty: the proxy closes each one).
    through_reused_ms: list[float] = field(default_factory=list)
    #: The TCP handshake alone to the proxy (the first hop's round trip).
    proxy_connect_ms: list[float] = field(default_factory=list)
    #: The same around the proxy, to the endpoint itself.
    direct_ms: list[float] = field(default_factory=list)
    direct_reused_ms: list[float] = field(default_factory=list)
    #: The proxy closed its connection after an answer (None: not seen).
    proxy_closes: bool | None = None
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Why the endpoint could not be measured around the proxy ("" when it was).
    direct_error: str = ""
    #: Why the proxy could not be measured at all ("" when it was).
    not_measured: str = ""
    connections: int = 0

    @property
    def per(self) -> str:
        """How often the cost is paid: ``request`` (plain http) or ``connection`` (an https tunnel)."""
        return "connection" if self.method == "CONNECT" else "request"

    @property
    def through_typical_ms(self) -> float | None:
        """What one request (http) or connection (https) takes through the proxy, as a client pays it."""
        return _median(self.through_reused_ms) or _median(self.through_ms)

    @property
    def direct_typical_ms(self) -> float | None:
        """The same around the proxy: a reused connection where the endpoint keeps it open."""
        return _median(self.direct_reused_ms) or _median(self.direct_ms)

    @property
    def cost_ms(self) -> float | None:
        """Through minus around: the proxy's cost per request (http) or per connection (https).

        None when either side is missing (the endpoint cannot be reached without the proxy).
        """
        through, direct = self.through_typical_ms, self.direct_typical_ms
        if through is None or direct is None:
            return None
        return max(0.0, through - direct)


def proxy_address(route: Route) -> tuple[str, int] | str:
    """(host, port) of the route's proxy, or why it is not measured here."""
    if route.proxy is None:
        return "no proxy"
    parts = urlsplit(route.proxy)
    if parts.scheme != "http":
        return f"a {parts.scheme}:// proxy is not measured (only http:// proxies are spoken to)"
    try:
        port = parts.port or 80
    except ValueError:
        return "the proxy URL has no valid port"
    if not parts.hostname:
        return "the proxy URL has no host"
    return parts.hostname, port


def _open(address: str, port: int, timeout_s: float) -> tuple[float, socket.socket | None, str]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)
    started = time.perf_counter()
    try:
        sock.connect((address, port))
    except OSError as exc:
        sock.close()
        return (time.perf_counter() - started) * 1000, None, f"{type(exc).__name__}: {exc.strerror or exc}"
    return (time.perf_counter() - started) * 1000, sock, ""


def _answer(sock: socket.socket, request: bytes) -> tuple[float, int | None, bool]:
    """Send `request`, read the answer's head: (ms to its first byte, status, connection closed after it)."""
    started = time.perf_counter()
    sock.sendall(request)
    data = sock.recv(MAX_HEAD_BYTES)
    ms = (time.perf_counter() - started) * 1000
    if not data:
        return ms, None, True
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD_BYTES:
        more = sock.recv(MAX_HEAD_BYTES)
        if not more:
            break
        data += more
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    try:
        status: int | None = int(head[0].split()[1])
    except (IndexError, ValueError):
        status = None
    closes = any(line.lower().replace(" ", "") == "connection:close" for line in head[1:])
    return ms, status, closes


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tunnel(sock: socket.socket, host: str, port: int) -> tuple[float, int | None]:
    """Ask the proxy on `sock` for a CONNECT tunnel to host:port: (ms to its answer, status)."""
    authority = _authority(host.strip("[]"), port)
    ms, status, _ = _answer(sock, f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    return ms, status


def _head(authority: str, target: str) -> bytes:
    return f"HEAD {target} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: llmdoctor\r\n\r\n".encode()


def _sample(result: ProxyPath, address: str, port: int, request: bytes | None, timeout_s: float,
            connect_only: bool, through: bool) -> bool:
    """One fresh connection: connect, the request (a second on the same connection if it stays open)."""
    connect_ms, sock, error = _open(address, port, timeout_s)
    result.connections += 1
    if sock is None:
        if through:
            result.errors.append(f"cannot connect to the proxy {address}:{port}: {error}")
        else:
            result.direct_error = f"cannot connect to the endpoint without the proxy: {error}"
        return False
    firsts, reused = (result.through_ms, result.through_reused_ms) if through else (result.direct_ms,
                                                                                      result.direct_reused_ms)
    try:
        if through:
            result.proxy_connect_ms.append(connect_ms)
        if connect_only or request is None:
            firsts.append(connect_ms)
            return True
        ms, status, closes = _answer(sock, request)
        if status is None:
            if through:
                result.errors.append("the proxy closed the connection without an answer")
            else:
                result.direct_error = "the endpoint closed the connection without an answer"
            return False
        firsts.append(connect_ms + ms)
        if through:
            result.statuses.append(status)
        if closes:
            if through:
                result.proxy_closes = True
            return True
        try:
            again, status2, _ = _answer(sock, request)
        except OSError:
            status2 = None
        if status2 is None:
            if through:
                result.proxy_closes = True
        else:
            reused.append(again)
            if through:
                result.proxy_closes = False
        return True
    except OSError as exc:
        message = f"{type(exc).__name__}: {exc}"
        if through:
            result.errors.append(message)
        else:
            result.direct_error = f"no answer from the endpoint without the proxy: {message}"
        return False
    finally:
        sock.close()


def measure_proxy_path(route: Route, scheme: str, host: str, port: int, samples: int,
                       timeout: Callable[[float], float], timeout_s: float) -> ProxyPath:
    """Measure the proxy of `route` through it and, when the endpoint is reachable without it, around it.

    `timeout` caps a timeout at the time left to the run (`Context.cap_timeout`).
    """
    from llmdoctor.probes.dns import is_ip_literal, system_lookup

    result = ProxyPath(proxy=route.settings.proxy_url or "", method="CONNECT" if scheme == "https" else "HEAD")
    where = proxy_address(route)
    if isinstance(where, str):
        result.not_measured = where
        return result
    proxy_host, proxy_port = where
    bare = proxy_host.strip("[]")
    addresses = [bare] if is_ip_literal(bare) else system_lookup(bare, proxy_port, timeout(timeout_s))[1]
    if not addresses:
        result.not_measured = f"cannot resolve the proxy {proxy_host}"
        return result
    result.address = f"{_authority(addresses[0], proxy_port)}"
    authority = _authority(host.strip("[]"), port)
    through_request = None if scheme == "https" else _head(authority, f"http://{authority}/")
    for _ in range(samples):
        if scheme == "https":
            connect_ms, sock, error = _open(addresses[0], proxy_port, timeout(timeout_s))
            result.connections += 1
            if sock is None:
                result.errors.append(f"cannot connect to the proxy {result.address}: {error}")
                break
            try:
                result.proxy_connect_ms.append(connect_ms)
                ms, status = tunnel(sock, host, port)
            except OSError as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
                break
            finally:
                sock.close()
            if status is None:
                result.errors.append("the proxy closed the connection without answering CONNECT")
                break
            result.statuses.append(status)
            if status != 200:  # a refusal comes back without reaching the endpoint: no measure of the path
                result.errors.append(f"the proxy answered CONNECT {host}:{port} with {status}")
                break
            result.through_ms.append(connect_ms + ms)
        elif not _sample(result, addresses[0], proxy_port, through_request, timeout(timeout_s), False, True):
            break
    direct = [host.strip("[]")] if is_ip_literal(host.strip("[]")) else system_lookup(
        host.strip("[]"), port, timeout(timeout_s))[1]
    if not direct:
        result.direct_error = f"{host} does not resolve without the proxy (this machine's resolver)"
        return result
    direct_request = None if scheme == "https" else _head(authority, "/")
    for _ in range(samples):
        if not _sample(result, direct[0], port, direct_request, timeout(timeout_s), scheme == "https", False):
            break
    if result.direct_error:
        result.direct_ms.clear()
        result.direct_reused_ms.clear()
    return result
