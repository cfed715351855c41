"""LD408: the TLS handshake is slow."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import TRANSPORT

SLOW_MS = 50.0


class SlowTls(Check):
    """Slow TLS handshake: new https connections spend long in the handshake.

    ## What it checks
    Times a few TLS handshakes (ALPN h2/http1.1) on fresh connections and fires
    when the median exceeds the round trips the protocol needs (one for TLS 1.3,
    two for TLS 1.2) by 50 ms or more.

    ## Why it adds latency
    The handshake runs before the request on every new connection: extra round
    trips (TLS 1.2), slow key exchange or signing (large RSA keys, busy or
    software-only crypto on the terminating proxy), OCSP fetches.

    ## Example
    TLSv1.2 handshake 140 ms with a 20 ms round trip: 100 ms beyond the network.

    ## Fix
    Enable TLS 1.3 on the terminating server, use ECDSA certificates, session
    resumption and OCSP stapling; keep connections alive so handshakes are rare (LD407).

    ## Caveats
    Measured from this machine's TLS stack; a client with session resumption pays less.
    """

    id = "LD408"
    name = "slow-tls"
    title = "Slow TLS handshake"
    category = Category.NETWORK
    requires = (TRANSPORT,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        tr = ctx.get(TRANSPORT)
        tls, rtt = tr.tls_p50_ms, tr.rtt_ms
        if tls is None or rtt is None:
            return
        trips = 1 if tr.tls_version == "TLSv1.3" else 2
        excess = tls - trips * rtt
        if excess < SLOW_MS:
            return
        yield Finding(
            severity=Severity.WARNING if tr.keepalive.reuse_works is False else Severity.INFO,
            confidence=Confidence.MEDIUM,
            title=f"TLS handshake takes {tls:.0f} ms ({tr.tls_version})",
            message=(
                f"The {tr.tls_version} handshake takes {tls:.0f} ms, {excess:.0f} ms more than its "
                f"{trips} round trip(s) of {rtt:.0f} ms; every new https connection pays it."
            ),
            impact_ms=round(tls, 1),
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="TLS handshake per new connection",
            evidence=(
                Evidence("TLS handshake (median)", round(tls, 1), "ms", "transport"),
                Evidence("round trip", round(rtt, 1), "ms", "transport"),
                Evidence("version / cipher", f"{tr.tls_version} / {tr.tls_cipher}", "", "transport"),
            ),
            fix=Fix(
                "Speed up or avoid TLS handshakes",
                (
                    "Enable TLS 1.3 and session resumption on the terminating server or load balancer.",
                    "Prefer ECDSA certificates; staple OCSP.",
                    "Reuse connections so the handshake is paid once (LD407).",
                ),
            ),
            cause=Cause.SLOW_TLS,
        )
