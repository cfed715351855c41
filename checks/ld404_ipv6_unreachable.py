"""LD404: the host has IPv6 (AAAA) addresses that do not accept connections."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import DNS

# RFC 8305's recommended connection attempt delay: what happy eyeballs waits before IPv4.
HAPPY_EYEBALLS_DELAY_MS = 250.0


class Ipv6Unreachable(Check):
    """AAAA addresses that do not connect: an IPv6 fallback penalty on new connections.

    ## What it checks
    Tries a TCP connection (short timeout) to every address the host resolves to,
    on the endpoint's port. Fires when an IPv6 address fails while an IPv4 one
    works.

    ## Why it adds latency
    Clients try IPv6 first. With happy eyeballs (RFC 8305) they wait about 250 ms
    before racing IPv4; clients without it (Python's `socket.create_connection`,
    used by httpx and requests) try each address in turn and wait for the IPv6
    connect to fail, or time out, before IPv4.

    ## Example
    `llm.example.com` has AAAA 2001:db8::5 (timeout after 1 s) and A 192.0.2.5
    (connects in 3 ms).

    ## Fix
    Publish AAAA records only where the service listens on IPv6 (or make it listen
    on `::`); or make the client prefer IPv4 (`precedence ::ffff:0:0/96 100` in
    /etc/gai.conf, or connect to the IPv4 address).

    ## Caveats
    A refused connection fails fast (small penalty); a filtered one costs the full
    timeout. The probe's own connect timeout is short, so real timeouts can be longer.
    """

    id = "LD404"
    name = "ipv6-unreachable"
    title = "IPv6 addresses do not connect"
    category = Category.NETWORK
    requires = (DNS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        dns = ctx.get(DNS)
        bad = dns.unreachable_ipv6
        good_v4 = [a for a in dns.addresses if a.family == "ipv4" and a.ok]
        if not bad or not good_v4:
            return
        timeouts = [a for a in bad if a.error.startswith("timeout")]
        penalty = dns.query_timeout_s * 1000 if timeouts else HAPPY_EYEBALLS_DELAY_MS
        evidence = [Evidence(f"IPv6 {a.address}", a.error, "", "dns: TCP connect") for a in bad]
        evidence.append(Evidence(f"IPv4 {good_v4[0].address}", good_v4[0].connect_ms, "ms", "dns: TCP connect"))
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.MEDIUM if timeouts else Confidence.LOW,
            title=f"{dns.host} has {len(bad)} IPv6 address(es) that do not connect",
            message=(
                f"{', '.join(a.address for a in bad)} failed ({bad[0].error}) while IPv4 "
                f"{good_v4[0].address} connects; clients that try IPv6 first lose time on every new connection."
            ),
            impact_ms=penalty,
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="happy-eyeballs delay (250 ms) or connect timeout per new connection",
            evidence=tuple(evidence),
            fix=Fix(
                "Make IPv6 work, drop the AAAA record, or prefer IPv4",
                (
                    "Have the service (and its load balancer) listen on IPv6, or remove the AAAA records.",
                    "Prefer IPv4 on the client: `precedence ::ffff:0:0/96 100` in /etc/gai.conf.",
                ),
            ),
            cause=Cause.IPV6_FALLBACK,
        )
