"""LD411: time of every request is spent in front of the model server."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from llmdoctor.analysis.noise import LAG_FACTOR, explained_by_lag
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.stats import percentile
from llmdoctor.probes.attribution import RequestSplit
from llmdoctor.probes.catalog import ATTRIBUTION

MIN_IN_FRONT_MS = 50.0
#: ... and at least this share of what the client waited for (the server's own clock says it is fast).
IN_FRONT_SHARE = 0.2


def _split_by_lag(splits: list[RequestSplit]) -> tuple[list[RequestSplit], list[RequestSplit]]:
    """(explained, unexplained): the requests whose time in front the client's own worst scheduling lag
    while they ran explains, and the others.

    A client that wakes late stamps the first token (or the headers) late by as long as it slept: that
    time lands "in front of the server", whatever the server's clock says.
    """
    explained: list[RequestSplit] = []
    unexplained: list[RequestSplit] = []
    for s in splits:
        (explained if explained_by_lag(s.in_front_ms or 0.0, s.client_lag_ms) else unexplained).append(s)
    return explained, unexplained


def _by_how_much(splits: list[RequestSplit]) -> str:
    """The time in front against the lag that explains it, for the request with the most (in words)."""
    worst = max(splits, key=lambda s: s.in_front_ms or 0.0)
    return (f"the largest: {worst.in_front_ms or 0.0:,.0f} ms in front against a worst lag of "
            f"{worst.client_lag_ms or 0.0:,.1f} ms while it ran, within the {LAG_FACTOR:g}× of it that the lag "
            "explains")


class InFrontOfServer(Check):
    """Time in front of the model server: gateways, balancers, auth or distance cost every request.

    ## What it checks
    Joins the client's clock with the server's own for each "Say ok." request of the baseline: the
    server's time to its headers (``openai-processing-ms``), to its first token (llama.cpp
    ``timings.prompt_ms``, the TTFT histogram of vLLM or SGLang around our requests, Ollama's load
    and prompt-eval durations) or its whole time (TGI ``x-total-time``, an end-to-end histogram).
    What the client waited for beyond the server's own time is spent *in front of the model
    server*. Fires when that is 50 ms or more per request (median) and at least 20% of what the
    client waited for.

    ## Why it adds latency
    A gateway that authenticates, routes or rate-limits, a load balancer, a service mesh sidecar, a
    far region: each adds its time to every request before the model sees it. No model, batch size
    or GPU change removes it, and the model's own dashboards never show it.

    ## Example
    The client waited 335 ms for the first token; the server's ``openai-processing-ms`` says it
    answered its headers in 0 ms and the first token came 30 ms later: 301 ms of every request is
    spent in front of it (an auth subrequest in nginx, here).

    ## Fix
    Find the hop: send the same request to the model server directly from the gateway's host; the
    difference is the gateway's. Then cache what it computes per request, keep its upstream
    connections open, or move it next to the model server.

    ## Caveats
    Needs a server clock: without one the time stays merged in the client's phases (the check is
    skipped, saying so). The time in front includes the network's round trip to the server (LD406
    measures it), the server's own HTTP handling before its clock starts and, for llama.cpp (whose
    timings have no queue), any wait for a free slot. Metrics means shared with other clients'
    traffic are not subtracted (the check is skipped, saying so): on a busy server they mix others'
    queue waits into "the server's time" and ours into "in front". A client starved of CPU reads
    the answer late, and that lateness lands in front of the server too: a request whose time in
    front is within twice llmdoctor's own worst scheduling lag while it ran is no evidence of a hop
    and is left out; when that leaves half the requests or fewer, or a median under 50 ms, the check
    is skipped, saying by how much.
    """

    id = "LD411"
    name = "in-front-of-server"
    title = "Time spent in front of the model server"
    category = Category.NETWORK
    requires = (ATTRIBUTION,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        att = ctx.get(ATTRIBUTION)
        in_front, server = att.in_front, att.server
        if not in_front:
            why = "; ".join(att.typical.notes[:3]) or "the server reports no time of its own"
            raise CheckSkipped(f"no server clock splits the baseline's requests: {why}")
        p50 = statistics.median(in_front)
        server_p50 = statistics.median(server) if server else 0.0
        share = p50 / (p50 + server_p50) if p50 + server_p50 > 0 else 0.0
        t = att.typical
        if any("shared traffic" in n for n in t.notes):
            # Means over other clients' requests too: our time minus them is no time of a hop in front, large
            # or small (on real vLLM with two background streams, the queue behind them read as 1.6 s "in front",
            # and as nothing once the requests whose answer waited for this client were judged by their first byte).
            raise CheckSkipped("the server's clocks are means over other clients' requests too (shared traffic): "
                               "subtracted from our requests' times they measure no hop in front of the server")
        if p50 < MIN_IN_FRONT_MS or share < IN_FRONT_SHARE:
            return
        # A client that woke late puts its own lateness in front of the server: time its lag explains is no hop.
        splits = [s for s in att.splits if s.in_front_ms is not None]
        explained, unexplained = _split_by_lag(splits)
        if explained:
            rest = [s.in_front_ms or 0.0 for s in unexplained]
            if 2 * len(unexplained) <= len(splits) or statistics.median(rest) < MIN_IN_FRONT_MS:
                raise CheckSkipped(
                    f"{p50:,.0f} ms per request (median) passed in front of the model server by its own clock, but "
                    f"llmdoctor's own scheduling lag while they ran explains {len(explained)} of {len(splits)} "
                    f"requests ({_by_how_much(explained)}): a client starved of CPU stamps the answer late. "
                    "Rerun from a quieter host")
            in_front = rest
            p50 = statistics.median(in_front)
            share = p50 / (p50 + server_p50) if p50 + server_p50 > 0 else 0.0
            if share < IN_FRONT_SHARE:
                return
        metrics_only = all("mean of" in s or "averaged over" in s for s in t.sources) if t.sources else False
        if len(in_front) >= 3 and not metrics_only:
            confidence = Confidence.HIGH
        else:
            confidence = Confidence.MEDIUM
        p90 = percentile(in_front, 90)
        evidence = [
            Evidence("in front of the model server (median)", round(p50, 1), "ms", "attribution"),
            Evidence("in front of the model server (p90)", round(p90 or p50, 1), "ms", "attribution"),
            Evidence("the server's own time (median)", round(server_p50, 1), "ms", "; ".join(t.sources)),
            Evidence("requests joined", len(in_front), "", "baseline"),
            Evidence("split anchored at", f"the server's {t.anchor}", "", "; ".join(t.sources)),
        ]
        if explained:
            evidence.append(Evidence("requests the client's own lag explains (left out)",
                                     f"{len(explained)} / {len(splits)}", "", "lag sampler"))
        for name, value in att.proxy_headers.items():
            evidence.append(Evidence(f"response header {name}", value, "", "typical answer"))
        evidence += [Evidence("note", n) for n in t.notes]
        yield Finding(
            Severity.WARNING,
            confidence,
            f"{p50:,.0f} ms of every request is spent in front of the model server",
            (f"The client waited {p50 + server_p50:,.0f} ms per request once it was sent; by the server's own "
             f"clock ({t.sources[0] if t.sources else 'its report'}), {p50:,.0f} ms of it ({share:.0%}) passed "
             "before the model server saw the request or after it answered — gateways, load balancers, auth, "
             f"distance — and {server_p50:,.0f} ms in the server."),
            Fix(
                "Find and trim the hop in front of the model server.",
                (
                    "Send the same request to the model server directly from the gateway's host: the "
                    "difference is the gateway's (auth, routing, rate limiting, a sidecar).",
                    "Cache per-request work in the gateway (auth decisions, token introspection) instead of "
                    "calling a service on every request.",
                    "Keep the gateway's upstream connections open (nginx: `keepalive` in the upstream block "
                    "with `proxy_http_version 1.1` and `proxy_set_header Connection \"\"`).",
                    "Run the gateway and the model server in the same zone as the callers.",
                ),
            ),
            cause=Cause.GATEWAY_OVERHEAD,
            impact_ms=round(p50, 1),
            frequency=Frequency.EVERY_REQUEST,
            impact_basis="median over the baseline's requests: client time − the server's own time",
            evidence=tuple(evidence),
        )
