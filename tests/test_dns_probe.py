"""The dns probe against a real DNS responder on loopback (dnspython) and real sockets."""

from __future__ import annotations

import socket

import pytest

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes import dns as dnsprobe
from llmdoctor.probes.catalog import DNS, TRANSPORT
from llmdoctor.target import Target
from tests.dnsserver import DnsResponder

HOST = "llm.test"


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 only (so ::1 on the same port refuses)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def loopback_system_lookup(monkeypatch):
    """Keep getaddrinfo off the network: names other than localhost fail as unknown, fast.

    The machine's own resolver is not a loopback address; tests must never query it.
    """

    def lookup(host: str, port: int, timeout_s: float):
        if host == "localhost":
            return 0.2, ["127.0.0.1"], ""
        return 0.3, [], "gaierror: [Errno -2] Name or service not known"

    monkeypatch.setattr(dnsprobe, "system_lookup", lookup)


def _probe(url: str, **options) -> dnsprobe.DnsResult:
    return Context(Target(url), Options.of(**options)).get(DNS)


def test_ip_literal_skips_resolution():
    result = _probe("http://127.0.0.1:8000/v1")
    assert result.is_ip_literal and result.system_ms is None and result.lookup_ms is None
    assert "IP address" in result.note and result.queries_sent == 0


@pytest.mark.usefixtures("loopback_system_lookup")
def test_injected_150ms_delay_is_measured_within_20_percent(listener):
    records = {HOST: {"A": ["127.0.0.1"]}}
    with DnsResponder(records, delay_s=0.150, ttl=300) as server:
        result = _probe(f"http://{HOST}:{listener}/v1", dns_server=server.address, timeout_s=2.0)
    resolver = result.resolvers[0]
    assert resolver.ok and resolver.server == server.address
    a = next(q for q in resolver.queries if q.rdtype == "A")
    assert a.answers == ["127.0.0.1"] and a.ttl == 300 and a.rcode == "NOERROR"
    assert result.lookup_ms == pytest.approx(150, rel=0.20)


@pytest.mark.usefixtures("loopback_system_lookup")
def test_silent_resolver_first_costs_the_resolver_timeout(listener):
    records = {HOST: {"A": ["127.0.0.1"]}}
    with DnsResponder(mode="silent") as dead, DnsResponder(records) as good:
        result = _probe(
            f"http://{HOST}:{listener}/v1", dns_server=f"{dead.address},{good.address}", timeout_s=0.5
        )
    assert dead.queries == 2  # A and AAAA both sent, neither answered
    assert [r.timed_out for r in result.resolvers] == [True, False]
    assert result.working_resolver is result.resolvers[1]
    assert result.fallback_penalty_ms == dnsprobe.GLIBC_TIMEOUT_S * 1000
    assert result.lookup_ms is not None and result.lookup_ms > 5000


@pytest.mark.usefixtures("loopback_system_lookup")
def test_servfail_resolver_is_not_ok():
    with DnsResponder(mode="servfail") as bad:
        result = _probe(f"http://{HOST}:80/v1", dns_server=bad.address, timeout_s=0.5)
    assert not result.resolvers[0].ok and not result.resolvers[0].timed_out
    assert {q.rcode for q in result.resolvers[0].queries} == {"SERVFAIL"}
    assert result.working_resolver is None and result.lookup_ms is None


@pytest.mark.usefixtures("loopback_system_lookup")
def test_aaaa_that_does_not_connect_is_reported(listener):
    """The transport probe connects where the --dns-server's answers point, IPv6 first."""
    records = {HOST: {"A": ["127.0.0.1"], "AAAA": ["::1"]}}
    with DnsResponder(records, ttl=5) as server:
        ctx = Context(Target(f"http://{HOST}:{listener}/v1"), Options.of(dns_server=server.address, max_requests=0))
        result = ctx.get(DNS)
        transport = ctx.get(TRANSPORT)
    assert result.min_ttl == 5
    assert [(a.address, a.outcome) for a in transport.attempts] == [("::1", "refused"), ("127.0.0.1", "connected")]
    assert transport.resolver == f"DNS server {server.address} (--dns-server)"
    assert [a.address for a in transport.failed_attempts] == ["::1"]


def test_real_getaddrinfo_on_localhost_and_hosts_override(listener, monkeypatch, tmp_path):
    # localhost resolves from /etc/hosts on every Linux; no DNS server is asked here.
    conf = tmp_path / "resolv.conf"
    conf.write_text("# no servers\noptions timeout:1 attempts:3\n")
    monkeypatch.setattr(dnsprobe, "RESOLV_CONF", str(conf))
    result = _probe(f"http://localhost:{listener}/v1")
    assert result.system_error == "" and "127.0.0.1" in result.system_addresses
    assert result.system_ms is not None and result.system_ms < 1000
    assert result.resolvers == [] and result.resolver_timeout_s == 1.0 and result.resolver_attempts == 3
    assert "127.0.0.1" in result.hosts_file_addresses and "overrides" in result.note
    assert result.lookup_ms == result.system_ms


def test_parsers():
    assert dnsprobe.parse_dns_servers("127.0.0.1:5353, [::1]:53,10.0.0.1") == [
        ("127.0.0.1", 5353), ("::1", 53), ("10.0.0.1", 53)
    ]
    with pytest.raises(ValueError):
        dnsprobe.parse_dns_servers("dns.example:53")
    servers, timeout, attempts = dnsprobe.parse_resolv_conf(
        "nameserver 10.0.0.2\n# nameserver 9.9.9.9\nnameserver fe80::1%eth0\noptions rotate timeout:2\n"
    )
    assert servers == ["10.0.0.2", "fe80::1"] and timeout == 2.0 and attempts == 2
    hosts = "127.0.0.1 localhost\n10.1.2.3 llm.test llm # inference\n#10.9.9.9 llm.test\n"
    assert dnsprobe.hosts_file_addresses("LLM.test", hosts) == ["10.1.2.3"]
    assert dnsprobe.hosts_file_addresses("other", hosts) == []


def test_bad_dns_server_option_is_unavailable_with_reason():
    ctx = Context(Target(f"http://{HOST}:80/v1"), Options.of(dns_server="not-an-ip"))
    assert ctx.optional(DNS) is None
    assert "bad --dns-server" in ctx.statuses()[0].reason


@pytest.fixture
def no_proxy_env(monkeypatch):
    """No proxy variable of this shell leaks in: each test sets its own."""
    import os

    for name in [k for k in os.environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.usefixtures("loopback_system_lookup")
def test_through_a_proxy_the_lookup_timed_is_the_proxys_name(no_proxy_env):
    """Issue 25: this machine never resolves the endpoint's name when a proxy carries the requests."""
    proxy = "proxy.test"
    with DnsResponder({proxy: {"A": ["127.0.0.1"]}}, delay_s=0.1, ttl=30) as server:
        no_proxy_env.setenv("HTTP_PROXY", f"http://user:secret@{proxy}:3128")
        result = _probe(f"http://{HOST}:8000/v1", dns_server=server.address, timeout_s=2.0)
        asked = server.queries
    assert result.host == proxy and result.endpoint_host == HOST and "secret" not in result.proxy
    assert result.proxy == "http://***@proxy.test:3128" and proxy in result.whose
    assert asked == 2 and result.resolvers[0].queries[0].answers == ["127.0.0.1"]  # only the proxy's name asked
    assert result.lookup_ms is not None and result.lookup_ms >= 100


@pytest.mark.usefixtures("loopback_system_lookup")
def test_no_proxy_covering_the_endpoint_resolves_the_endpoint(no_proxy_env):
    with DnsResponder({HOST: {"A": ["127.0.0.1"]}}) as server:
        no_proxy_env.setenv("HTTP_PROXY", "http://proxy.test:3128")
        no_proxy_env.setenv("NO_PROXY", ".test")
        result = _probe(f"http://{HOST}:8000/v1", dns_server=server.address, timeout_s=2.0)
    assert result.host == HOST and not result.proxy and not result.endpoint_host and result.whose == ""


def test_a_proxy_given_as_an_ip_address_needs_no_lookup(no_proxy_env):
    no_proxy_env.setenv("HTTPS_PROXY", "http://10.1.2.3:3128")
    result = _probe(f"https://{HOST}/v1")
    assert result.is_ip_literal and result.lookup_ms is None and result.queries_sent == 0
    assert "proxy" in result.note and HOST in result.note
