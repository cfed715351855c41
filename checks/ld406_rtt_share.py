"""LD406: the network round trip is a large share of the minimal request's latency."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import TRANSPORT

SHARE = 0.20
MIN_RTT_MS = 10.0


class RttShare(Check):
    """High RTT share: the round trip to the server is a big part of every request.

    ## What it checks
    Measures the round-trip time as the TCP handshake of several raw connections
    (the median ``connect()`` time, with jitter): the kernel answers a handshake
    whatever the server is doing, so a server slow to read or to answer cannot
    pass for distance. Cross-checked by the quickest request on an open
    connection (its first byte cannot come back sooner than one round trip).
    Compares it with the median total latency of the minimal "Say ok." request;
    fires when the round trip is at least 20% of it and 10 ms or more.

    ## Why it adds latency
    Every request pays at least one round trip even on a reused connection; a
    streamed answer pays it before the first token. No server tuning removes it.

    ## Example
    RTT 48 ms (jitter 3 ms) against a 180 ms baseline: 27% of the floor is distance.

    ## Fix
    Deploy the endpoint (or a replica) closer to the callers - same region, same
    zone; call it from a service next to it rather than from a far client; avoid
    extra hops (VPN, hair-pinned load balancers).

    ## Caveats
    The RTT is measured from this machine: run the doctor where your application
    runs. A TCP-terminating proxy or load balancer answers the handshake itself:
    the round trip is then the one to it, and the distance beyond it shows only
    as the gap to the quickest warm request (in the evidence).
    """

    id = "LD406"
    name = "rtt-share"
    title = "Round trip dominates the floor"
    category = Category.NETWORK
    requires = (TRANSPORT,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        tr = ctx.get(TRANSPORT)
        rtt, share, total = tr.rtt_ms, tr.rtt_share, tr.baseline_total_p50_ms
        if rtt is None or share is None or total is None or rtt < MIN_RTT_MS or share < SHARE:
            return
        jitter = tr.jitter_ms
        evidence = [
            Evidence("round-trip time (TCP handshake, median)", round(tr.connect_p50_ms or rtt, 1), "ms", "transport"),
            Evidence("baseline total (median)", round(total, 1), "ms", "baseline"),
            Evidence("samples (raw TCP connections)", len(tr.rtt_samples_ms), "", "transport"),
        ]
        if jitter is not None:
            evidence.append(Evidence("jitter (stdev)", round(jitter, 1), "ms", "transport"))
        if tr.warm_ttfb_ms is not None:
            evidence.append(Evidence(f"quickest warm request ({tr.warm_request}), first byte",
                                     round(tr.warm_ttfb_ms, 1), "ms", "probe client"))
        bounded = (f" (the handshakes took {tr.connect_p50_ms:.0f} ms, but a request on an open connection came "
                   f"back in {rtt:.0f} ms: that bounds the round trip)") if tr.handshake_contradicted else ""
        yield Finding(
            severity=Severity.WARNING if share >= 0.5 else Severity.INFO,
            confidence=(Confidence.HIGH if jitter is not None and jitter < rtt / 4 and not tr.handshake_contradicted
                        else Confidence.MEDIUM),
            title=f"Round trip is {share:.0%} of the minimal request ({rtt:.0f} ms)",
            message=(
                f"The round trip to {tr.host}:{tr.port} is {rtt:.0f} ms{bounded} against a {total:.0f} ms "
                "minimal request: every request pays it before its first token."
            ),
            cause=Cause.SLOW_NETWORK,
            impact_ms=round(rtt, 1),
            impact_basis="one round trip per request",
            evidence=tuple(evidence),
            fix=Fix(
                "Move caller and endpoint closer together",
                (
                    "Serve from the callers' region/zone, or add a replica there.",
                    "Remove extra hops (VPN, cross-region load balancers) between client and server.",
                ),
            ),
        )
