"""The transport probe against real parts: the simulator, a delayed IP path, dead addresses, real TLS."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
import trustme

from llmdoctor.context import Context
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.options import Options
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.probes.transport import TransportResult, happy_eyeballs_order, keepalive_from, proxy_settings
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests import netpath
from tests.delayproxy import DelayProxy
from tests.netpath import DelayedPath

needs_real_paths = pytest.mark.skipif(bool(netpath.available()), reason=netpath.available() or "available")


@pytest.mark.slow  # a real network path (namespaces)
@needs_real_paths
def test_injected_50ms_rtt_is_measured_within_10_percent():
    with SimServer(get_profile("healthy")) as sim, DelayedPath(0.025) as path:
        port = path.forward(("127.0.0.1", sim.port))
        ctx = Context(Target(f"http://{path.address}:{port}/v1"), Options.of(samples=5))
        result = ctx.get(TRANSPORT)
    assert result.tcp_connections == 5 and len(result.connect_ms) == 5
    assert result.rtt_ms == pytest.approx(50, rel=0.10)
    assert result.jitter_ms is not None and result.jitter_ms < 5
    assert result.h2c is False  # the simulator speaks HTTP/1.1 only
    # The cross-check agrees: a warm request cannot come back sooner than one round trip.
    assert result.warm_ttfb_ms is not None and result.warm_ttfb_ms >= 45 and not result.handshake_contradicted
    assert result.new_connection_wait_ms == 0.0 and result.new_connection_ms == pytest.approx(50, rel=0.10)
    # Keep-alive works: every request after the first reused the connection.
    ka = result.keepalive
    assert ka.reuse_works and ka.fresh == 1 and ka.reused == ka.requests - 1
    assert result.baseline_total_p50_ms is not None
    assert result.rtt_share == pytest.approx(result.rtt_ms / result.baseline_total_p50_ms)


@pytest.mark.slow  # a real network path (namespaces)
@needs_real_paths
def test_closing_server_pays_a_handshake_per_request():
    with SimServer(get_profile("close-connections")) as sim, DelayedPath(0.025) as path:
        port = path.forward(("127.0.0.1", sim.port))
        ctx = Context(Target(f"http://{path.address}:{port}/v1"), Options.of(samples=4))
        result = ctx.get(TRANSPORT)
        generation = [t for t in ctx.client.history if t.path.endswith("/chat/completions")]
    ka = result.keepalive
    assert ka.reuse_works is False and ka.server_close_header and ka.reused == 0
    assert ka.fresh == ka.requests == len(ctx.client.history)
    assert sim.connections_accepted >= ka.requests
    # A new connection costs one more round trip, measured in full; the requests show it.
    assert result.new_connection_ms == pytest.approx(50, rel=0.10)
    assert ka.handshake_p50_ms == pytest.approx(50, rel=0.10)
    warm = sorted(t.total_ms for t in generation[1:])
    assert warm[0] > 2 * 50 + get_profile("close-connections").fixed_ms


def test_server_slow_to_read_is_not_round_trip_and_costs_new_connections_in_full():
    """A server that waits 150 ms before reading a new connection (here: the delaying proxy's set-up).

    Before: RTT = (connect + exchange) / 2 = 76 ms on loopback, a new connection 76 ms.
    """
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), 0.0, setup_s=0.150) as proxy:
        ctx = Context(Target(f"http://127.0.0.1:{proxy.port}/v1"), Options.of(samples=5))
        result = ctx.get(TRANSPORT)
    assert result.rtt_ms is not None and result.rtt_ms < 5  # loopback: the handshake alone
    assert result.first_answer_ms is not None and result.first_answer_ms >= 150
    assert result.new_connection_ms == pytest.approx(150, rel=0.15)


def test_behind_a_tcp_proxy_the_handshake_is_the_proxys_and_the_warm_request_shows_the_rest():
    """A user-space proxy adding 25 ms each way after its own (local) handshake, as TCP-terminating balancers do."""
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), 0.025) as proxy:
        result = Context(Target(f"http://127.0.0.1:{proxy.port}/v1"), Options.of(samples=3)).get(TRANSPORT)
    assert result.rtt_ms is not None and result.rtt_ms < 5
    assert result.warm_ttfb_ms is not None and result.warm_ttfb_ms >= 50
    # The proxy connects upstream (50 ms set-up) before it forwards the first bytes: that is a new connection's cost.
    assert result.new_connection_ms == pytest.approx(50, rel=0.15)


def test_happy_eyeballs_order_interleaves_families():
    v6, v4 = ["2001:db8::1", "2001:db8::2", "2001:db8::3"], ["192.0.2.1", "192.0.2.2"]
    assert happy_eyeballs_order(v6 + v4) == ["2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2", "2001:db8::3"]
    # getaddrinfo's first answer names the preferred family (gai.conf may prefer IPv4).
    assert happy_eyeballs_order(v4 + v6) == ["192.0.2.1", "2001:db8::1", "192.0.2.2", "2001:db8::2", "2001:db8::3"]
    assert happy_eyeballs_order(v4 + v6, "ipv6")[:2] == ["2001:db8::1", "192.0.2.1"]
    assert happy_eyeballs_order(["192.0.2.1", "192.0.2.1"]) == ["192.0.2.1"] and happy_eyeballs_order([]) == []


def test_a_warm_request_quicker_than_the_handshakes_bounds_the_round_trip():
    result = TransportResult(host="h", port=1, scheme="http", connect_ms=[40.0, 41.0, 39.0], warm_ttfb_ms=3.0,
                             warm_request="GET /v1/models")
    assert result.handshake_contradicted and result.rtt_ms == 3.0
    agreeing = TransportResult(host="h", port=1, scheme="http", connect_ms=[40.0, 41.0, 39.0], warm_ttfb_ms=52.0)
    assert not agreeing.handshake_contradicted and agreeing.rtt_ms == 40.0


@contextlib.contextmanager
def _tls_listener(*names: str) -> Iterator[tuple[int, str, list[str | None]]]:
    """A real TLS listener on 127.0.0.1 (trustme certificate for `names`) offering h2.

    Yields its port, the CA file and the SNI names the clients sent (None: no SNI).
    """
    ca = trustme.CA()
    cert = ca.issue_cert(*names)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    server_ctx.set_alpn_protocols(["h2", "http/1.1"])
    sni: list[str | None] = []
    server_ctx.sni_callback = lambda _sock, name, _ctx: sni.append(name)  # type: ignore[assignment]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(2)
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with ca.cert_pem.tempfile() as ca_file:
            yield sock.getsockname()[1], ca_file, sni
    finally:
        stop.set()
        thread.join(2)
        sock.close()


@pytest.fixture
def tls_server():
    """The TLS listener with a certificate for localhost and 127.0.0.1: (port, CA file)."""
    with _tls_listener("localhost", "127.0.0.1") as (port, ca_file, _):
        yield port, ca_file


def test_tls_to_an_ip_literal_sends_no_sni_and_checks_the_ip():
    with _tls_listener("127.0.0.1") as (port, ca_file, sni):
        result = Context(Target(f"https://127.0.0.1:{port}/v1"),
                         Options.of(samples=3, ca_bundle=ca_file, timeout_s=3)).get(TRANSPORT)
    assert result.tls_error == "" and len(result.tls_handshake_ms) == 3 and result.alpn == "h2"
    assert len(sni) >= 3 and set(sni) == {None}  # RFC 6066: no SNI for an IP address (probe and client)
    # The certificate is checked against the IP: one issued for another address fails.
    with _tls_listener("127.0.0.2", "localhost") as (port, ca_file, sni):
        wrong = Context(Target(f"https://127.0.0.1:{port}/v1"), Options.of(ca_bundle=ca_file, timeout_s=3))
        result = wrong.get(TRANSPORT)
    assert "CERTIFICATE_VERIFY_FAILED" in result.tls_error and "127.0.0.1" in result.tls_error


def test_tls_to_a_name_sends_it_as_sni():
    with _tls_listener("localhost") as (port, ca_file, sni):
        ctx = Context(Target(f"https://localhost:{port}/v1"), Options.of(ca_bundle=ca_file, timeout_s=3))
        result = ctx.get(TRANSPORT)
    assert result.tls_error == "" and set(sni) == {"localhost"}


def test_tls_handshake_version_and_alpn(tls_server):
    port, ca_file = tls_server
    ctx = Context(Target(f"https://localhost:{port}/v1"), Options.of(samples=3, ca_bundle=ca_file, timeout_s=3))
    result = ctx.get(TRANSPORT)
    assert result.tls_error == ""
    assert result.tls_version in ("TLSv1.3", "TLSv1.2") and result.tls_cipher
    assert len(result.tls_handshake_ms) == 3 and result.tls_p50_ms is not None
    assert result.alpn == "h2" and result.http2 is True
    assert result.new_connection_ms == pytest.approx(result.rtt_ms + result.tls_p50_ms)


def test_tls_without_the_ca_fails_verification(tls_server):
    port, _ = tls_server
    result = Context(Target(f"https://localhost:{port}/v1"), Options.of(timeout_s=3)).get(TRANSPORT)
    assert "CERTIFICATE_VERIFY_FAILED" in result.tls_error and result.tls_handshake_ms == []
    insecure = Context(Target(f"https://localhost:{port}/v1"), Options.of(insecure=True, timeout_s=3))
    assert insecure.get(TRANSPORT).tls_error == ""


def test_nothing_listening_is_unavailable():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    ctx = Context(Target(f"http://127.0.0.1:{port}/v1"), Options.of(samples=3))
    assert ctx.optional(TRANSPORT) is None
    assert "cannot connect" in next(s.reason for s in ctx.statuses() if s.name == "transport")


def test_proxy_settings_from_environment(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_settings("https", "llm.internal").used is False
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.svc.cluster.local")
    through = proxy_settings("https", "api.example.com")
    assert through.used and through.proxy_url == "http://***@proxy.corp:3128"
    assert "s3cret" not in repr(through.variables)
    bypassed = proxy_settings("https", "llm.svc.cluster.local")
    assert bypassed.proxy_url and bypassed.bypassed and not bypassed.used
    assert proxy_settings("http", "api.example.com").used is False  # only HTTPS_PROXY is set


def test_keepalive_summary():
    def t(reused: bool, connect: float | None, total: float, close: bool = False) -> RequestTiming:
        headers = {"connection": "close"} if close else {}
        return RequestTiming("POST", "/v1/chat/completions", status=200, reused_connection=reused,
                             connect_ms=connect, tls_ms=None if connect is None else 20.0,
                             total_ms=total, response_headers=headers)

    ka = keepalive_from([t(False, 10, 300), t(True, None, 250), t(True, None, 260)])
    assert (ka.fresh, ka.reused, ka.reuse_works) == (1, 2, True)
    assert ka.handshake_p50_ms == 30 and ka.reused_total_p50_ms == 255
    closing = keepalive_from([t(False, 10, 300, True), t(False, 12, 310, True)])
    assert closing.reuse_works is False and closing.handshake_p50_ms == 31
