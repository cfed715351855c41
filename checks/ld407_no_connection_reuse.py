"""LD407: connections are not reused, so every request pays connect (+TLS)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Frequency, Severity
from llmdoctor.limits import NO_KEEPALIVE_LIMITS
from llmdoctor.probes.catalog import TRANSPORT


class NoConnectionReuse(Check):
    """No keep-alive: every request opens a new connection and pays its handshake.

    ## What it checks
    Looks at the doctor's own requests (one HTTP client, keep-alive on): how many
    reused a connection, and whether the server answered `Connection: close`.
    Fires when none after the first could reuse one. The cost of a new connection
    is measured twice: from the requests' own connect+TLS phases, and from raw
    connections (TCP handshake + TLS handshake + what the server makes a new
    connection wait before it answers); the larger is used.

    ## Why it adds latency
    A new connection costs a TCP handshake (one round trip) and, over https, a TLS
    handshake (one or two more) before the request is even sent - on every request.

    ## Example
    7 requests, 0 reused, server sends `Connection: close`: +52 ms per request.

    ## Fix
    Server: enable HTTP keep-alive (and check the proxy in front: nginx
    `keepalive_timeout`, upstream `keepalive`). Client: create one client and reuse
    it - `httpx.Client()` / `requests.Session()` / one `aiohttp.ClientSession` for
    the process, not one per request.

    ## Caveats
    Based on the doctor's few requests; a proxy may keep client connections alive
    while closing upstream ones (invisible here).
    """

    id = "LD407"
    name = "no-connection-reuse"
    title = "Connections not reused"
    category = Category.NETWORK
    requires = (TRANSPORT,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        tr = ctx.get(TRANSPORT)
        ka = tr.keepalive
        if ka.reuse_works is not False:
            return
        costs = [c for c in (ka.handshake_p50_ms, tr.new_connection_ms) if c is not None]
        cost = max(costs) if costs else None
        if cost is None or cost < NO_KEEPALIVE_LIMITS.min_cost_ms:
            return
        who = "the server closes every connection (Connection: close)" if ka.server_close_header else (
            "no request could reuse a connection")
        evidence = [
            Evidence("requests / reused", f"{ka.requests} / {ka.reused}", "", "probe client"),
            Evidence("new connection cost", round(cost, 1), "ms", "transport"),
        ]
        if tr.new_connection_wait_ms:
            evidence.append(Evidence("server's wait before answering a new connection",
                                     round(tr.new_connection_wait_ms, 1), "ms", "transport"))
        if ka.fresh_total_p50_ms is not None:
            evidence.append(Evidence("median total, new connection", ka.fresh_total_p50_ms, "ms", "probe client"))
        if ka.reused_total_p50_ms is not None:
            evidence.append(Evidence("median total, reused", ka.reused_total_p50_ms, "ms", "probe client"))
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.HIGH if ka.server_close_header else Confidence.MEDIUM,
            title=f"No connection reuse: +{cost:.0f} ms handshake on every request",
            message=(
                f"Of {ka.requests} requests, {ka.reused} reused a connection: {who}. Each request pays "
                f"connect{' + TLS' if tr.scheme == 'https' else ''} again, about {cost:.0f} ms."
            ),
            cause=Cause.NO_KEEPALIVE,
            impact_ms=round(cost, 1),
            frequency=Frequency.EVERY_REQUEST,
            impact_basis="connect (+TLS) handshake per request",
            evidence=tuple(evidence),
            fix=Cause.NO_KEEPALIVE.fix,
        )
