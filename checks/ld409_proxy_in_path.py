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
    Reads the proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`,
    upper or lower case) the way Python's `urllib` and httpx do, and fires when the
    endpoint's scheme has a proxy and `NO_PROXY` does not exempt its host.

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
    are not visible. The doctor's own raw-socket measurements go direct.
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
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"Requests to {tr.host} go through a proxy",
            message=(
                f"{tr.scheme.upper()} requests to {tr.host} are sent through {proxy.proxy_url} "
                "(from the environment); NO_PROXY does not exempt the host."
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
