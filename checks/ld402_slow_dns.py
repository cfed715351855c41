"""LD402: resolving the endpoint's host name is slow."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import DNS

SLOW_MS = 50.0
VERY_SLOW_MS = 100.0


class SlowDns(Check):
    """Slow DNS: every new connection waits for a slow name lookup.

    ## What it checks
    Times the lookup of the endpoint's host: the system resolver (`getaddrinfo`)
    and, with `--dns-server IP[:PORT]`, that server (A and AAAA, sent together).
    Fires when one lookup takes 50 ms or more (warning from 100 ms). An endpoint
    given as an IP address never fires: nothing is resolved.

    ## Why it adds latency
    Most HTTP clients resolve the host for every new connection (httpx, requests
    and aiohttp keep no DNS cache of their own, or a short one). A request that
    cannot reuse a connection waits for the lookup before it can even connect.

    ## Example
    `llm.internal` takes 152 ms at 10.0.0.2:53; each new connection pays it.

    ## Fix
    Cache lookups close to the client: a local caching resolver (systemd-resolved,
    nscd, dnsmasq, NodeLocal DNSCache on Kubernetes); reuse connections so lookups
    are rare (LD407); or, for a fixed internal endpoint, use its IP or an /etc/hosts
    entry, as the article suggests.

    ## Caveats
    One lookup is measured; a warm cache on the resolver can make it fast now and
    slow after its TTL (LD405). The system resolver may consult a cache that the
    server given with --dns-server does not have.
    """

    id = "LD402"
    name = "slow-dns"
    title = "Slow DNS resolution"
    category = Category.NETWORK
    requires = (DNS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        dns = ctx.get(DNS)
        if dns.is_ip_literal:
            return
        lookup = dns.lookup_ms
        if lookup is None:
            return  # nothing answered: LD403 reports failing resolvers
        fallback = dns.fallback_penalty_ms
        own = lookup - fallback  # a fallback is LD403's finding, not this one's
        if own < SLOW_MS:
            return
        working = dns.working_resolver
        where = f"at {working.server}" if dns.explicit_servers and working else "by the system resolver"
        evidence = [Evidence("lookup time", round(own, 1), "ms", "dns")]
        if dns.system_ms is not None:
            evidence.append(Evidence("system resolver (getaddrinfo)", round(dns.system_ms, 1), "ms", "dns"))
        if working is not None and working.lookup_ms is not None:
            evidence.append(Evidence(f"DNS server {working.server}", round(working.lookup_ms, 1), "ms", "dns"))
        yield Finding(
            severity=Severity.WARNING if own >= VERY_SLOW_MS else Severity.INFO,
            confidence=Confidence.HIGH,
            title=f"Resolving {dns.host} takes {own:.0f} ms",
            message=(
                f"{dns.host}{dns.whose} resolves {where} in {own:.0f} ms; every request that opens a new "
                "connection waits for this lookup first."
            ),
            impact_ms=round(own, 1),
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="resolution time per new connection",
            evidence=tuple(evidence),
            fix=Fix(
                "Cache DNS near the client, or avoid the lookup",
                (
                    "Run a local caching resolver (systemd-resolved, nscd, dnsmasq; NodeLocal DNSCache "
                    "on Kubernetes).",
                    "Reuse connections (keep-alive, one long-lived client) so lookups are rare.",
                    f"For a fixed internal endpoint, use its IP address or an /etc/hosts entry for {dns.host}.",
                ),
            ),
            cause=Cause.SLOW_DNS,
        )
