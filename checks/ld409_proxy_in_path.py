"""LD409: the endpoint is reached through an HTTP proxy from the environment."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import TRANSPORT


class ProxyInPath(Check):
    """Proxy in the path: HTTP(S)_PROXY sends the endpoint's traffic through a proxy.

    ## What it checks
    Reads the proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, upper or lower
    case, as Python's `urllib` does) and `NO_PROXY` as curl documents it (domains, a
    leading dot, `*`, IP addresses and CIDR ranges, plus `host:port`), and fires when the
    endpoint's requests go through a proxy: the doctor's own requests did (its client is
    built from the same decision). It says whether the API key and credential headers
    are readable by the proxy (a plain-http endpoint behind an HTTP proxy).

    ## Why it adds latency
    A proxy adds a hop (often far away, for internet egress), its own connection
    handling, and may buffer streamed responses so tokens arrive in bursts.

    ## Example
    `HTTPS_PROXY=http://***@proxy.corp:3128`; `llm.internal` not in `NO_PROXY`.

    ## Fix
    Add the endpoint's host (or its domain, `.internal`) to `NO_PROXY`, or unset
    the proxy for this service; make sure the proxy does not buffer
    `text/event-stream` responses if it must stay.

    ## Caveats
    Only the environment is read: system-wide or PAC proxies and transparent proxies
    are not visible. The doctor's own raw-socket measurements go direct. httpx on its
    own (your Python application) reads `NO_PROXY` differently: it ignores CIDR ranges,
    and `.example.com` does not exempt `example.com` itself there.
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
        evidence = [Evidence(name, value, "", "environment") for name, value in proxy.variables.items()]
        if proxy.credentials_exposed:
            secrets = ("Its API key and credential headers go to the proxy in clear text: the endpoint is "
                       "plain http, so the proxy reads every request.")
        elif tr.scheme == "https":
            secrets = "The proxy sees the host name only (a CONNECT tunnel): the key stays inside TLS."
        else:
            secrets = "No API key or credential header is sent."
        evidence.append(Evidence("credentials readable by the proxy", proxy.credentials_exposed, "", "llmdoctor"))
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"Requests to {tr.host} go through a proxy",
            message=(
                f"{tr.scheme.upper()} requests to {tr.host} are sent through {proxy.proxy_url} "
                f"(from {proxy.variable or 'the environment'}); NO_PROXY does not exempt the host. {secrets}"
            ),
            impact_ms=None,
            impact_basis="not measured: the proxy's added hop and buffering",
            evidence=tuple(evidence),
            fix=Fix(
                "Exempt the endpoint from the proxy",
                (
                    f"Add {tr.host} (or its domain) to NO_PROXY / no_proxy.",
                    "If the proxy must stay, make it pass text/event-stream through unbuffered.",
                ),
            ),
            cause=Cause.GATEWAY_OVERHEAD,
        )
