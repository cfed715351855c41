"""LD404: an address of the host (usually its IPv6 one) does not connect, and clients wait on it first."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.probes.transport import ConnectAttempt

# RFC 8305's recommended connection attempt delay: what happy eyeballs waits before the next address.
HAPPY_EYEBALLS_DELAY_MS = 250.0
# A stall below this (a fast refusal) is reported as info: a client loses next to nothing.
WARNING_STALL_MS = 100.0

_CAUSE = {
    "unreachable": "no route to it, or no host answers for it on its link (ARP/NDP gave up)",
    "timeout": "its packets are dropped without an answer (a filtering firewall, a black-holed route)",
    "refused": "nothing listens there on this port",
}


def _describe(a: ConnectAttempt, limit_s: float) -> str:
    family = "IPv6" if a.family == "ipv6" else "IPv4"
    cause = _CAUSE.get(a.outcome, "the connect failed")
    if a.outcome == "timeout":
        return f"{family} {a.address} gave no answer for {a.ms:,.0f} ms (the probe's {limit_s:g} s limit): {cause}"
    return f"{family} {a.address} was {a.outcome} after {a.ms:,.0f} ms: {cause} ({a.error})"


class Ipv6Unreachable(Check):
    """Dead address first: an address tried before a working one (usually IPv6) does not connect.

    ## What it checks
    The transport probe tries the endpoint's addresses in the order clients do
    (Happy Eyeballs, RFC 8305: families interleaved, the preferred one - usually
    IPv6 - first) until one connects, and times each failure. Fires when one or
    more addresses fail before a working one: it names each, its cause (refused,
    unreachable, no answer) and the stall it cost, as measured (a warning from
    100 ms of stall, info below: a fast refusal costs next to nothing).

    ## Why it adds latency
    Clients that try addresses in turn (Python's `socket.create_connection`,
    used by httpx and requests; many HTTP libraries) wait for the dead address
    to fail on every new connection: a refusal is fast, a host gone from its
    link stalls for neighbour discovery (about 3 s on Linux), a silent drop until
    the client's connect timeout. Happy-Eyeballs clients (curl, browsers, Go)
    start the next address after ~250 ms instead.

    ## Example
    `llm.example.com` has AAAA 2001:db8::5 (unreachable after 3,020 ms: no host
    answers for it) and A 192.0.2.5 (connects in 3 ms): every new connection of
    an httpx client waits 3 s first.

    ## Fix
    Publish AAAA (and A) records only where the service listens; make the
    service and its load balancer listen on IPv6 (`::`); or make clients prefer
    IPv4 (`precedence ::ffff:0:0/96 100` in /etc/gai.conf) or use a
    Happy-Eyeballs client.

    ## Caveats
    A silent drop is only waited for up to the probe's own connect limit (5 s,
    or `--timeout` if shorter): the real stall is then at least that long. The
    order tried is this machine's (getaddrinfo honours /etc/gai.conf); with
    `--dns-server`, that server's answers in Happy-Eyeballs order.
    """

    id = "LD404"
    name = "ipv6-unreachable"
    title = "An address of the host does not connect"
    category = Category.NETWORK
    requires = (TRANSPORT,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        tr = ctx.get(TRANSPORT)
        failed = tr.failed_attempts
        if not failed:
            return
        working = tr.attempts[len(failed)]
        stall = tr.fallback_stall_ms
        timed_out = any(a.outcome == "timeout" for a in failed)
        if len(failed) == 1:
            dead = f"{'IPv6' if failed[0].family == 'ipv6' else 'IPv4'} {failed[0].address} does not connect"
        else:
            dead = f"{len(failed)} addresses do not connect"
        evidence = [Evidence(f"{a.family} {a.address}", f"{a.outcome} after {a.ms:,.0f} ms", "", "transport: connect")
                    for a in failed]
        evidence.append(Evidence(f"{working.family} {working.address}", round(working.ms, 1), "ms",
                                 "transport: connect"))
        evidence.append(Evidence("addresses from", tr.resolver, "", "transport"))
        yield Finding(
            severity=Severity.WARNING if stall >= WARNING_STALL_MS else Severity.INFO,
            confidence=Confidence.MEDIUM if timed_out else Confidence.HIGH,
            title=f"{tr.host}: {dead}: {stall:,.0f} ms stall before {working.address} connects",
            message=(
                "; ".join(_describe(a, tr.attempt_timeout_s) for a in failed)
                + f". Then {working.address} connected in {working.ms:,.1f} ms. A client that tries addresses "
                f"in turn (httpx, requests) waits {'at least ' if timed_out else ''}{stall:,.0f} ms on every new "
                f"connection; a Happy-Eyeballs client about {HAPPY_EYEBALLS_DELAY_MS:.0f} ms per dead address."
            ),
            impact_ms=round(stall, 1),
            impact_basis=("measured connect() stall before a working address, per new connection "
                          "(clients that try addresses in turn)" + ("; at least: the probe gave up" if timed_out
                                                                     else "")),
            evidence=tuple(evidence),
            fix=Fix(
                "Make every published address work, drop the dead ones, or prefer the working family",
                (
                    "Have the service (and its load balancer) listen on IPv6, or remove the AAAA records.",
                    "Remove DNS records of addresses that are gone (old replicas, moved hosts).",
                    "Prefer IPv4 on the client: `precedence ::ffff:0:0/96 100` in /etc/gai.conf.",
                ),
            ),
            cause=Cause.IPV6_FALLBACK,
        )
