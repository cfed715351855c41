"""Issue 4's acceptance, end to end: real probes on loopback parts, then the checks on them."""

from __future__ import annotations

import json
import socket
import time

import pytest
import trustme
from llmdoctor.checks.ld402_slow_dns import SlowDns
from llmdoctor.checks.ld403_dns_fallback import DnsFallback
from llmdoctor.checks.ld404_ipv6_unreachable import Ipv6Unreachable
from llmdoctor.checks.ld405_short_dns_ttl import ShortDnsTtl
from llmdoctor.checks.ld406_rtt_share import RttShare
from llmdoctor.checks.ld407_no_connection_reuse import NoConnectionReuse

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes import dns as dnsprobe
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.runner import run_one
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests import netpath
from tests.cliutil import run_cli
from tests.delayproxy import DelayProxy
from tests.dnsserver import DnsResponder
from tests.netpath import DeadAddresses, DelayedPath
from tests.tlsfront import TlsFront

needs_real_paths = pytest.mark.skipif(bool(netpath.available()), reason=netpath.available() or "available")


@pytest.fixture
def no_system_dns(monkeypatch):
    """getaddrinfo must not reach the machine's (non-loopback) resolver: unknown names fail fast."""
    monkeypatch.setattr(dnsprobe, "system_lookup", lambda h, p, t: (0.3, [], "gaierror: unknown name"))


@pytest.mark.usefixtures("no_system_dns")
def test_150ms_dns_delay_is_the_top_network_finding_within_20_percent():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    records = {"llm.test": {"A": ["127.0.0.1"], "AAAA": ["::1"]}}
    try:
        with DnsResponder(records, delay_s=0.150, ttl=300) as server:
            ctx = Context(Target(f"http://llm.test:{port}/v1"), Options.of(dns_server=server.address))
            outcomes = [run_one(c, ctx) for c in (SlowDns, DnsFallback, Ipv6Unreachable, ShortDnsTtl)]
    finally:
        listener.close()
    findings = sorted(
        (f for o in outcomes for f in o.findings),
        key=lambda f: (f.severity.rank, -(f.impact_ms or 0) * f.confidence.weight),
    )
    assert findings[0].check_id == "LD402"
    assert findings[0].impact_ms == pytest.approx(150, rel=0.20)
    # ::1 refuses (the listener is IPv4 only): the happy-eyeballs finding is there too, ranked below.
    assert [f.check_id for f in findings] == ["LD402", "LD404"]


@pytest.mark.slow  # a real network path (namespaces)
@needs_real_paths
def test_closing_connections_quantify_the_per_request_handshake():
    """A server answering Connection: close over a real 50 ms path (TUN delay line)."""
    with SimServer(get_profile("close-connections")) as sim, DelayedPath(0.025) as path:
        port = path.forward(("127.0.0.1", sim.port))
        ctx = Context(Target(f"http://{path.address}:{port}/v1"), Options.of(samples=4))
        reuse = run_one(NoConnectionReuse, ctx)
        rtt = run_one(RttShare, ctx)
        tr = ctx.get(TRANSPORT)
    (finding,) = reuse.findings
    measured = (tr.connect_ms, tr.exchange_ms, tr.keepalive.handshake_ms)
    assert finding.impact_ms == pytest.approx(50, rel=0.10), measured  # one extra round trip per request
    assert "Connection: close" in finding.message
    assert finding.title.startswith("No connection reuse: +") and "handshake on every request" in finding.title
    assert rtt.findings and rtt.findings[0].impact_ms == pytest.approx(50, rel=0.10)


def test_healthy_loopback_endpoint_has_no_transport_findings():
    with SimServer(get_profile("healthy")) as sim:
        ctx = Context(Target(sim.base_url), Options.of(samples=3))
        assert [run_one(c, ctx).status for c in (NoConnectionReuse, RttShare)] == ["passed", "passed"]


# -- issue 15's transport acceptance: real sockets, real paths ------------------------------------


def _stall_of_one_connect(address: str, port: int, timeout_s: float) -> float:
    """What a client meets: one connect() to the address, timed until it fails (ms)."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    sock.settimeout(timeout_s)
    started = time.perf_counter()
    try:
        sock.connect((address, port))
    except OSError:
        pass
    finally:
        sock.close()
    return (time.perf_counter() - started) * 1000


@pytest.mark.slow  # a real network path (namespaces)
@needs_real_paths
@pytest.mark.parametrize("silent", [False, True], ids=["unreachable", "dropped"])
def test_dead_first_address_falls_back_and_reports_the_real_stall(silent: bool):
    """AAAA points at a host gone from its link (or a silent drop), A at the server: IPv6 is tried first."""
    with SimServer(get_profile("healthy")) as sim, DeadAddresses(stall_s=1.5) as dead:
        bad = dead.silent_ipv6 if silent else dead.ipv6
        timeout_s = 2.0
        real = _stall_of_one_connect(bad, sim.port, timeout_s)
        records = {"llm.test": {"AAAA": [bad], "A": ["127.0.0.1"]}}
        with DnsResponder(records) as dns_srv:
            ctx = Context(Target(f"http://llm.test:{sim.port}/v1"),
                          Options.of(dns_server=dns_srv.address, timeout_s=timeout_s, samples=3))
            transport = ctx.get(TRANSPORT)
            outcome = run_one(Ipv6Unreachable, ctx)
    assert [a.address for a in transport.attempts] == [bad, "127.0.0.1"]
    failed, working = transport.attempts
    assert failed.outcome == ("timeout" if silent else "unreachable") and working.ok
    assert transport.address == "127.0.0.1" and len(transport.connect_ms) == 3  # the samples use the fallback
    assert failed.ms == pytest.approx(real, rel=0.20)
    (finding,) = outcome.findings
    assert finding.impact_ms == pytest.approx(real, rel=0.20)
    assert bad in finding.title and "127.0.0.1" in finding.title
    assert ("gave no answer" if silent else "was unreachable") in finding.message
    assert finding.confidence.value == ("medium" if silent else "high")


def test_server_slow_to_read_is_no_slow_network():
    """A server that waits 150 ms before reading a new connection: loopback RTT, no LD406."""
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), 0.0, setup_s=0.150) as proxy:
        ctx = Context(Target(f"http://127.0.0.1:{proxy.port}/v1"), Options.of(samples=5))
        rtt = run_one(RttShare, ctx)
        transport = ctx.get(TRANSPORT)
    assert rtt.status == "passed", [f.title for f in rtt.findings]
    assert transport.rtt_ms is not None and transport.rtt_ms < 5


def test_https_to_an_ip_literal_runs_the_transport_checks(capsys, tmp_path):
    """https://127.0.0.1 with a trusted certificate for the IP (trustme CA via --ca-bundle): LD406-409 run."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    saved = tmp_path / "measurements.json"
    with SimServer(get_profile("healthy")) as sim, TlsFront(("127.0.0.1", sim.port), cert) as front, \
            ca.cert_pem.tempfile() as ca_file:
        result = run_cli(capsys, "check", "-e", f"https://127.0.0.1:{front.port}/v1", "--ca-bundle", ca_file,
                         "--select", "LD4", "--json", "--save-measurements", str(saved))
    report = result.report
    statuses = {c["check_id"]: (c["status"], c["reason"]) for c in report["checks"]}
    for check_id in ("LD406", "LD407", "LD408", "LD409"):
        assert statuses[check_id][0] in ("passed", "failed"), (check_id, statuses[check_id])
    transport = json.loads(saved.read_text())["measurements"]["transport"]
    assert transport["tls_error"] == "" and len(transport["tls_handshake_ms"]) == 3
    assert transport["tls_version"] and transport["resolver"] == "IP literal"
