"""The transport probe against real loopback parts: the simulator, a delaying TCP proxy, real TLS."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
import trustme

from llmdoctor.context import Context
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.probes.timing import RequestTiming
from llmdoctor.probes.transport import keepalive_from, proxy_settings
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Options, Target
from tests.delayproxy import DelayProxy


def test_injected_50ms_rtt_is_measured_within_10_percent():
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), 0.025) as proxy:
        ctx = Context(Target(f"http://127.0.0.1:{proxy.port}/v1"), Options.of(samples=5))
        result = ctx.get(TRANSPORT)
    assert result.tcp_connections == 5 and len(result.connect_ms) == 5
    assert result.rtt_ms == pytest.approx(50, rel=0.10)
    assert result.jitter_ms is not None and result.jitter_ms < 5
    assert result.h2c is False  # the simulator speaks HTTP/1.1 only
    # Keep-alive works: every request after the first reused the connection.
    ka = result.keepalive
    assert ka.reuse_works and ka.fresh == 1 and ka.reused == ka.requests - 1
    assert result.baseline_total_p50_ms is not None
    assert result.rtt_share == pytest.approx(result.rtt_ms / result.baseline_total_p50_ms)


def test_closing_server_pays_a_handshake_per_request():
    with SimServer(get_profile("close-connections")) as sim, \
            DelayProxy(("127.0.0.1", sim.port), 0.025) as proxy:
        ctx = Context(Target(f"http://127.0.0.1:{proxy.port}/v1"), Options.of(samples=4))
        result = ctx.get(TRANSPORT)
        generation = [t for t in ctx.client.history if t.path.endswith("/chat/completions")]
    ka = result.keepalive
    assert ka.reuse_works is False and ka.server_close_header and ka.reused == 0
    assert ka.fresh == ka.requests == len(ctx.client.history)
    assert sim.connections_accepted >= ka.requests
    # A new connection costs one more round trip; the requests show it.
    assert result.new_connection_ms == pytest.approx(50, rel=0.10)
    warm = sorted(t.total_ms for t in generation[1:])
    assert warm[0] > 50 + get_profile("close-connections").fixed_ms


@pytest.fixture
def tls_server():
    """A real TLS listener on 127.0.0.1 (trustme certificate for localhost) offering h2."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    server_ctx.set_alpn_protocols(["h2", "http/1.1"])
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
    with ca.cert_pem.tempfile() as ca_file:
        yield sock.getsockname()[1], ca_file
    stop.set()
    thread.join(2)
    sock.close()


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
