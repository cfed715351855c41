"""LD409: the endpoint is reached through an HTTP proxy from the environment, and what it costs."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.probes.proxy_path import ProxyPath

#: Below this a measured proxy cost is said (info), not a warning: a proxy next door costs next to nothing.
MIN_COST_MS = 10.0


def _measured(path: ProxyPath | None) -> str:
    """What the probe measured of the proxy, in words ("" when nothing)."""
    if path is None or path.through_typical_ms is None:
        return ""
    what = ("a HEAD request through it" if path.method == "HEAD" else "opening a CONNECT tunnel through it")
    closes = (" The proxy closes every connection after its answer, so each request also pays a new connection "
              "to it." if path.proxy_closes else "")
    through = f"Measured: {what} takes {path.through_typical_ms:,.1f} ms (connect to the proxy + its answer)"
    if path.cost_ms is None:
        return (f"{through}; the endpoint cannot be reached without the proxy ({path.direct_error}), so its cost is "
                f"not split from the rest of the path.{closes}")
    assert path.direct_typical_ms is not None
    return (f"{through}, around it {path.direct_typical_ms:,.1f} ms: the proxy costs ~{path.cost_ms:,.0f} ms "
            f"{'on every request' if path.per == 'request' else 'per new connection'}.{closes}")


class ProxyInPath(Check):
    """Proxy in the path: HTTP(S)_PROXY sends the endpoint's traffic through a proxy, at a measured cost.

    ## What it checks
    Reads the proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, upper or lower
    case, as Python's `urllib` does) and `NO_PROXY` as curl documents it (domains, a
    leading dot, `*`, IP addresses and CIDR ranges, plus `host:port`), and fires when the
    endpoint's requests go through a proxy: the doctor's own requests did (its client is
    built from the same decision), and so did its round-trip probe. It measures the
    proxy's cost: a `HEAD /` through it (for https, the `CONNECT` that opens the tunnel)
    against the same around it, when the endpoint is reachable without it; the
    difference is the impact, paid on every request (plain http: each request goes
    through the proxy) or per new connection (https: the tunnel). It says whether the
    API key and credential headers are readable by the proxy (a plain-http endpoint
    behind an HTTP proxy). A warning from 10 ms, or when the key is exposed, or when the
    cost cannot be split; a cheaper proxy is info.

    ## Why it adds latency
    A proxy adds a hop (often far away, for internet egress), its own connection
    handling (tinyproxy, for one, closes every client connection after one request, so
    every request pays a new connection to it), and may buffer streamed responses so
    tokens arrive in bursts. The time shows in the report's waterfall as a "proxy" phase
    in front of the server, and it explains a large fixed cost per request (LD702).

    ## Example
    `HTTP_PROXY=http://***@proxy.corp:3128`, `llm.internal` not in `NO_PROXY`: a HEAD
    through it takes 207 ms, around it 0.3 ms: the proxy costs ~207 ms on every request.

    ## Fix
    Add the endpoint's host (or its domain, `.internal`) to `NO_PROXY`, or unset
    the proxy for this service; if it must stay, use a proxy nearer to the client or the
    endpoint, one that keeps client connections open, and make sure it does not buffer
    `text/event-stream` responses.

    ## Caveats
    Only the environment is read: system-wide or PAC proxies and transparent proxies
    are not visible. Only `http://` proxies are measured (an `https://` or SOCKS proxy is
    named, its cost not measured). The cost around the proxy is measured only where this
    machine reaches the endpoint directly; where it does not, the time through it is
    said, not split. httpx on its own (your Python application) reads `NO_PROXY`
    differently: it ignores CIDR ranges, and `.example.com` does not exempt
    `example.com` itself there.
    """

    id = "LD409"
    name = "proxy-in-path"
    title = "Proxy in the path"
    category = Category.NETWORK
    requires = (TRANSPORT,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        tr = ctx.get(TRANSPORT)
        proxy = tr.proxy
        if not proxy.used:
            return
        path = tr.proxy_path
        evidence = [Evidence(name, value, "", "environment") for name, value in proxy.variables.items()]
        if proxy.credentials_exposed:
            secrets = ("Its API key and credential headers go to the proxy in clear text: the endpoint is "
                       "plain http, so the proxy reads every request.")
        elif tr.scheme == "https":
            secrets = "The proxy sees the host name only (a CONNECT tunnel): the key stays inside TLS."
        else:
            secrets = "No API key or credential header is sent."
        evidence.append(Evidence("credentials readable by the proxy", proxy.credentials_exposed, "", "llmdoctor"))
        cost = path.cost_ms if path is not None else None
        if path is not None and path.through_typical_ms is not None:
            evidence += [Evidence("through the proxy", round(path.through_typical_ms, 1), "ms", "transport"),
                         Evidence("around the proxy", None if path.direct_typical_ms is None else
                                  round(path.direct_typical_ms, 1), "ms", "transport"),
                         Evidence("proxy closes each connection", path.proxy_closes, "", "transport")]
        measured = _measured(path)
        if not measured:
            reason = (path.not_measured or "; ".join(path.errors)) if path is not None else ""
            measured = f"Its cost was not measured ({reason or 'no measurement'})."
        steps = [f"Add {tr.host} (or its domain) to NO_PROXY / no_proxy"
                 + (" (it answers directly: measured around the proxy)." if cost is not None else ".")]
        steps.append("If the proxy must stay: use one nearer to this client or to the endpoint"
                     + (", one that keeps client connections open" if path is not None and path.proxy_closes else "")
                     + ".")
        steps.append("Make the proxy pass text/event-stream through unbuffered.")
        paid = Frequency.NEW_CONNECTION if path is not None and path.per == "connection" else Frequency.EVERY_REQUEST
        cheap = cost is not None and cost < MIN_COST_MS and not proxy.credentials_exposed
        title = f"Requests to {tr.host} go through a proxy" + (
            f": ~{cost:,.0f} ms {'per request' if paid is Frequency.EVERY_REQUEST else 'per new connection'}"
            if cost is not None else "")
        yield Finding(
            severity=Severity.INFO if cheap else Severity.WARNING,
            confidence=Confidence.HIGH,
            title=title,
            message=(
                f"{tr.scheme.upper()} requests to {tr.host} are sent through {proxy.proxy_url} "
                f"(from {proxy.variable or 'the environment'}); NO_PROXY does not exempt the host. {measured} "
                f"{secrets}"
            ),
            impact_ms=cost,
            frequency=paid,
            impact_basis=("through the proxy − around it (raw HEAD / CONNECT, fresh connections, medians)"
                          if cost is not None else "not measured: the proxy's added hop and buffering"),
            evidence=tuple(evidence),
            fix=Fix("Exempt the endpoint from the proxy", tuple(steps)),
            cause=Cause.GATEWAY_OVERHEAD,
        )
