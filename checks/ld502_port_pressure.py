"""LD502: ephemeral ports are scarce, or many TIME_WAIT sockets show connection churn."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import CLIENT_LIMITS

TIME_WAIT_SHARE = 0.10
FEW_PORTS = 10_000
MANY_TIME_WAIT = 100


class PortPressure(Check):
    """Ephemeral ports / TIME_WAIT pressure: connection churn eats local ports.

    ## What it checks
    Reads the ephemeral port range and counts this machine's TCP sockets to the
    endpoint's address and port by state. Fires when TIME_WAIT sockets to the
    endpoint use 10% of the range (or 100+ with a range under 10,000 ports).

    ## Why it adds latency
    Each closed connection holds its local port in TIME_WAIT for about 60 s. A client
    opening a connection per request exhausts the range: `connect()` fails with
    `EADDRNOTAVAIL` or waits, and requests stall or error in bursts.

    ## Example
    18,000 sockets to 10.0.0.5:8000 in TIME_WAIT out of 28,232 ephemeral ports.

    ## Fix
    Reuse connections (keep-alive, one pooled client; see LD407); widen
    `net.ipv4.ip_local_port_range`; `net.ipv4.tcp_tw_reuse=1` lets outgoing
    connections reuse TIME_WAIT ports safely.

    ## Caveats
    A snapshot of this machine only; listing sockets can need privileges.
    """

    id = "LD502"
    name = "port-pressure"
    title = "Ephemeral port pressure"
    category = Category.CLIENT
    requires = (CLIENT_LIMITS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        limits = ctx.get(CLIENT_LIMITS)
        ports = limits.ephemeral_ports
        if ports is None:
            return
        tw = limits.time_wait
        share = tw / ports
        if share < TIME_WAIT_SHARE and not (ports < FEW_PORTS and tw >= MANY_TIME_WAIT):
            return
        yield Finding(
            severity=Severity.CRITICAL if share >= 0.5 else Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"{tw} sockets to the endpoint in TIME_WAIT ({share:.0%} of ephemeral ports)",
            message=(
                f"{tw} connections to the endpoint were closed in the last minute or so and still hold "
                f"local ports; the range has {ports} ports. New connections will start failing."
            ),
            impact_ms=None,
            impact_basis="connect failures and stalls when ports run out",
            evidence=(
                Evidence("TIME_WAIT to endpoint", tw, "", "client_limits"),
                Evidence("ESTABLISHED to endpoint", limits.established, "", "client_limits"),
                Evidence("ephemeral port range", "-".join(map(str, limits.port_range)), "", "client_limits"),
                Evidence("TIME_WAIT (all)", limits.time_wait_total, "", "client_limits"),
            ),
            fix=Fix(
                "Stop opening a connection per request",
                (
                    "Reuse connections: one pooled client per process (see LD407).",
                    "Widen net.ipv4.ip_local_port_range; set net.ipv4.tcp_tw_reuse=1.",
                ),
            ),
            cause=Cause.CLIENT_LIMITS,
        )
