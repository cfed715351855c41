"""LD403: a configured DNS server fails, so lookups wait for a timeout and fall back."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import DNS


class DnsFallback(Check):
    """Failing DNS server: lookups time out on it before another server answers.

    ## What it checks
    Queries each DNS server in order (`/etc/resolv.conf`, or `--dns-server` with
    several comma-separated servers) for the endpoint's host. Fires when a server
    ahead of the first working one times out or answers SERVFAIL/REFUSED, or when
    no server answers at all.

    ## Why it adds latency
    The system resolver asks servers in order and waits `options timeout:` (5 s by
    default in glibc) for a dead one before trying the next. Every lookup that is
    not cached pays that wait: seconds added to "connect" on new connections.

    ## Example
    10.0.0.2:53 timed out (2 queries); 10.0.0.3:53 answered in 4 ms: each lookup
    waits 5000 ms first.

    ## Fix
    Remove or replace the dead server in /etc/resolv.conf (or the DHCP/cloud
    network config that writes it); lower `options timeout:1 attempts:2` and add
    `rotate` while you fix it; run a local caching resolver.

    ## Caveats
    The penalty assumes glibc's sequential behaviour with the configured timeout;
    musl (Alpine) queries all servers in parallel and pays no fallback. One query
    round is measured: a flaky server may answer now and fail later.
    """

    id = "LD403"
    name = "dns-fallback"
    title = "Failing DNS server"
    category = Category.NETWORK
    requires = (DNS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        dns = ctx.get(DNS)
        if dns.is_ip_literal or not dns.resolvers:
            return
        failing = dns.failing_resolvers
        if not failing:
            return
        evidence = [
            Evidence(f"DNS server {r.server}", "timeout" if r.timed_out else "error: " + ", ".join(
                sorted({q.rcode or q.error for q in r.queries})), "", "dns")
            for r in failing
        ]
        fix = Fix(
            "Remove or replace the failing DNS server",
            (
                "Edit /etc/resolv.conf (or the network config that generates it) to drop the dead server.",
                "Meanwhile set `options timeout:1 attempts:2 rotate` to shorten the wait.",
                "Run a local caching resolver so most lookups never reach the upstream servers.",
            ),
        )
        working = dns.working_resolver
        if working is None:
            yield Finding(
                severity=Severity.CRITICAL,
                confidence=Confidence.HIGH,
                title=f"No DNS server resolves {dns.host}",
                message=(f"All {len(failing)} DNS server(s) failed for {dns.host}{dns.whose}; new connections "
                         "cannot resolve it."),
                impact_ms=dns.fallback_penalty_ms or None,
                frequency=Frequency.NEW_CONNECTION,
                impact_basis="time spent on failing servers per lookup",
                evidence=tuple(evidence),
                fix=fix,
                cause=Cause.ENDPOINT_UNREACHABLE,
            )
            return
        penalty = dns.fallback_penalty_ms
        evidence.append(Evidence(f"first working server {working.server}", working.lookup_ms, "ms", "dns"))
        evidence.append(Evidence("resolver timeout", dns.resolver_timeout_s, "s", "resolv.conf options"))
        yield Finding(
            severity=Severity.CRITICAL if penalty >= 1000 else Severity.WARNING,
            confidence=Confidence.MEDIUM,
            title=f"DNS falls back past {len(failing)} failing server(s): +{penalty:.0f} ms per lookup",
            message=(
                f"{', '.join(r.server for r in failing)} failed before {working.server} answered; "
                f"an uncached lookup of {dns.host}{dns.whose} waits about {penalty:.0f} ms first."
            ),
            impact_ms=round(penalty, 1),
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="fallback wait per uncached lookup (resolver timeout per failing server)",
            evidence=tuple(evidence),
            fix=fix,
            cause=Cause.SLOW_DNS,
        )
