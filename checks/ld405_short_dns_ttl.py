"""LD405: the host's DNS answers have a very short TTL."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import DNS

SHORT_TTL_S = 30
WORTH_MS = 5.0


class ShortDnsTtl(Check):
    """Short DNS TTL: caches expire quickly, so lookups repeat.

    ## What it checks
    Reads the TTL of the A/AAAA answers for the endpoint's host. Fires when it is
    under 30 s and an uncached lookup costs at least 5 ms.

    ## Why it adds latency
    A cache may keep an answer only for its TTL. With a few seconds, nearly every
    new connection triggers a fresh lookup upstream; a slow resolver (LD402) then
    costs on every connection rather than once.

    ## Example
    `llm.example.com` A TTL 5 s; a lookup costs 40 ms.

    ## Fix
    Raise the TTL where the record is published (60-300 s is common for
    load-balanced services), or keep long-lived connections so lookups are rare.

    ## Caveats
    Short TTLs are deliberate for fast failover (DNS load balancing, Kubernetes
    headless services); weigh the failover time against the lookups.
    """

    id = "LD405"
    name = "short-dns-ttl"
    title = "Short DNS TTL"
    category = Category.NETWORK
    requires = (DNS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        dns = ctx.get(DNS)
        ttl, working = dns.min_ttl, dns.working_resolver
        if ttl is None or ttl >= SHORT_TTL_S or working is None or working.lookup_ms is None:
            return
        cost = working.lookup_ms
        if cost < WORTH_MS:
            return
        yield Finding(
            severity=Severity.INFO,
            confidence=Confidence.MEDIUM,
            title=f"{dns.host} has a {ttl} s DNS TTL",
            message=(
                f"Answers for {dns.host}{dns.whose} may be cached for only {ttl} s, so lookups costing "
                f"{cost:.0f} ms repeat for connections opened after that."
            ),
            impact_ms=round(cost, 1),
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="one uncached lookup per new connection after the TTL expires",
            evidence=(
                Evidence("TTL", ttl, "s", f"dns: {working.server}"),
                Evidence("uncached lookup", round(cost, 1), "ms", f"dns: {working.server}"),
            ),
            fix=Fix(
                "Raise the TTL or keep connections open",
                (
                    "Publish the record with a TTL of 60-300 s unless fast failover needs less.",
                    "Keep one long-lived client with keep-alive so few connections are opened.",
                ),
            ),
            cause=Cause.SLOW_DNS,
        )
