"""LD401: connection set-up is a large share of a request."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.noise import explained_by_lag, timing_confidence
from llmdoctor.causes import Symptom
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import BASELINE, CLIENT_HOST, DISCOVERY

MIN_SETUP_MS = 20.0
SHARE_LIMIT = 0.25
ABSOLUTE_LIMIT_MS = 150.0


class NetworkShare(Check):
    """Network set-up share: DNS + TCP + TLS compared with the whole request.

    ## What it checks
    Takes the connection set-up of the run's first request, ``GET /v1/models``
    on a new connection (name resolution, TCP connect and TLS handshake, as
    timed by the probe client), and compares it
    with the median total of the warm "Say ok." requests.

    ## Why it adds latency
    A client that opens a new connection per request (no pooling, a
    short-lived process, a proxy that closes connections) pays this set-up on
    every call, before the server sees a byte. Far-away endpoints add a round
    trip per phase.

    ## Example
    Set-up 180 ms (connect 60 ms, TLS 120 ms) against a 400 ms request: 45% of
    the request is network before any inference.

    ## Fix
    Reuse connections (one long-lived HTTP client with a pool and keep-alive),
    deploy the endpoint near its users, resolve DNS once (or cache it), and
    prefer TLS 1.3 and HTTP/2 where the server offers them.

    ## Caveats
    Measured from this machine: run llmdoctor where the application runs.
    Fires when set-up exceeds 20 ms and either 25% of the request or 150 ms.
    On a busy client host a connect on loopback can take tens of ms because
    llmdoctor (or the server) waited for a CPU: a set-up that llmdoctor's own
    scheduling lag during that request explains (up to twice the lag) is not
    reported, and the confidence is lowered on a saturated client host.
    """

    id = "LD401"
    name = "network-share"
    title = "Network set-up share of a request"
    category = Category.NETWORK
    requires = (DISCOVERY, BASELINE)
    optional = (CLIENT_HOST,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        first = ctx.get(DISCOVERY).models_timing
        base = ctx.get(BASELINE)
        total = base.total_p50_ms
        connect, tls = first.connect_ms or 0.0, first.tls_ms or 0.0
        setup = first.setup_ms
        if total is None or first.reused_connection or setup < MIN_SETUP_MS:
            return
        share = setup / (total + setup)
        if share < SHARE_LIMIT and setup < ABSOLUTE_LIMIT_MS:
            return
        if explained_by_lag(setup, first.client_lag_ms):
            return  # llmdoctor itself woke that late while connecting: a busy client, not the network
        severity = Severity.WARNING if share >= SHARE_LIMIT else Severity.INFO
        evidence = [
            Evidence("TCP connect (incl. DNS)", round(connect, 1), "ms", "discovery"),
            Evidence("warm request total p50", round(total, 1), "ms", "baseline"),
        ]
        if first.tls_ms is not None:
            evidence.insert(1, Evidence("TLS handshake", round(tls, 1), "ms", "discovery"))
        if first.client_lag_ms is not None:
            evidence.append(Evidence("llmdoctor's own worst lag meanwhile", round(first.client_lag_ms, 1), "ms",
                                     "discovery"))
        yield Finding(
            severity,
            timing_confidence(Confidence.MEDIUM, host=ctx.optional(CLIENT_HOST), timings=(first,)),
            f"Connection set-up costs {setup:,.0f} ms ({share:.0%} of a request)",
            f"A new connection to {ctx.target.host if ctx.target else 'the endpoint'} costs {setup:,.0f} ms "
            f"before the server sees the request; a warm request takes {total:,.0f} ms.",
            Fix(
                "Reuse connections and bring the endpoint closer.",
                (
                    "Create one HTTP client per process and reuse it (connection pool, keep-alive).",
                    "Deploy the endpoint in the same region/zone as the application.",
                    "Use TLS 1.3 / HTTP/2; terminate TLS close to the client.",
                ),
            ),
            impact_ms=setup,
            frequency=Frequency.NEW_CONNECTION,
            impact_basis="paid by every request that opens a new connection",
            evidence=tuple(evidence),
            symptom=Symptom.SLOW_CONNECTION_SETUP,  # DNS, distance, TLS or no keep-alive say why
        )
