"""LD410: the stream is held back between the server and you."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from llmdoctor.analysis.delivery import MIN_HELD_MS, StreamShape, hop_headers, whole_short_answers
from llmdoctor.analysis.noise import LAG_FACTOR, explained_by_lag, lag_noisy
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.client_host import ClientHostResult
from llmdoctor.probes.catalog import ATTRIBUTION, CLIENT_HOST, HOST
from llmdoctor.probes.host import HostResult

#: A stream says something about holding only when it should have taken this long to arrive.
MIN_EXPECTED_MS = 2 * MIN_HELD_MS
#: The finding needs this many held streams, and this share of the informative ones.
MIN_HELD_STREAMS = 2
HELD_MAJORITY = 0.6


def _host_pressure(host: ClientHostResult | None, held: list[StreamShape]) -> str:
    """The run's own evidence that the client was starved of CPU, in words ("" when there is none)."""
    why = []
    if host is not None and host.saturated:
        why.append(f"the client host was saturated: {host.readings()}")
    if lag_noisy(held):
        lags = [s.client_lag_ms for s in held if s.client_lag_ms is not None]
        why.append(f"llmdoctor's own worst scheduling lag while each held answer streamed was "
                   f"{statistics.median(lags):,.0f} ms (median)")
    return "; ".join(why)


def _split_by_lag(held: list[StreamShape]) -> tuple[list[StreamShape], list[StreamShape]]:
    """(explained, unexplained): the held streams whose missing time the client's own worst scheduling lag
    while they streamed explains, and the others.

    A client that wakes late reads the first token late, and the rest at once: it sees less of the
    decode by about as long as it was late, whatever clock says how long the decode took.
    """
    explained: list[StreamShape] = []
    unexplained: list[StreamShape] = []
    for s in held:
        (explained if explained_by_lag(s.held_ms, s.client_lag_ms) else unexplained).append(s)
    return explained, unexplained


#: Processes that are proxies, not model servers: listening on the endpoint's port, they are a hop on this host.
PROXY_PROCESSES = ("haproxy", "nginx", "openresty", "envoy", "caddy", "tinyproxy", "traefik", "squid", "varnishd",
                   "httpd", "apache2", "lighttpd")


def _too_few(held: list[StreamShape], judged: list[StreamShape]) -> bool:
    """Too few held streams for the finding: under `MIN_HELD_STREAMS`, or under `HELD_MAJORITY` of those judged."""
    return len(held) < MIN_HELD_STREAMS or len(held) < HELD_MAJORITY * len(judged)


def _starved_sender(client: ClientHostResult | None, host: HostResult | None) -> str:
    """Why the server's own writer may have sent the events late, in words ("" when it cannot have).

    The server's process shares a saturated host with the client: it is starved too, makes its tokens
    on time by its engine's clock and writes their events late, one by one, as it gets the CPU.
    """
    listener = host.server_process if host is not None else None
    if client is None or not client.saturated or listener is None or listener.name.lower() in PROXY_PROCESSES:
        return ""  # a proxy listens on this host: it is a hop, and may hold the stream (haproxy, starved, does)
    return (f"the endpoint is served from this host by process {listener.pid} ({listener.name}), not a proxy, and "
            f"the host was saturated ({client.readings()})")


def _by_how_much(streams: list[StreamShape]) -> str:
    """The held time against the lag that explains it, for the stream with the most held (in words)."""
    worst = max(streams, key=lambda s: s.held_ms)
    return (f"the longest: {worst.held_ms:,.0f} ms missing against a worst lag of {worst.client_lag_ms or 0.0:,.1f} ms "
            f"while it streamed, within the {LAG_FACTOR:g}× of it that the lag explains")


def _impact(held: list[StreamShape], per_token: float, typical: int) -> tuple[float, str]:
    """How late the first token of a `typical`-token answer arrives, from the held streams.

    A hop holds until its buffer fills or the answer ends: answers at least as long as the typical
    one show its hold directly; a shorter answer held whole says the typical one would be held
    (about) whole too.
    """
    long = [s for s in held if s.tokens >= typical]
    if long:
        return statistics.median(s.held_ms for s in long), (
            f"first token late by the median hold of the {len(long)} held answer(s) of {typical}+ tokens")
    longest = max(held, key=lambda s: s.tokens)
    if longest.held_share < 0.9:
        return longest.held_ms, f"first token late by the hold of the longest held answer ({longest.tokens} tokens)"
    return per_token * max(0, typical - 1), (
        f"a {typical}-token answer held whole: {max(0, typical - 1)} × {per_token:.2f} ms/token of decode")


class HeldBackStream(Check):
    """Held-back stream: the tokens are made at the server's pace but reach you in one piece or in bursts.

    ## What it checks
    Compares how every streamed answer of the run arrived (the time of each server-sent event and
    of each body read) with how fast the server made its tokens: the server's own decode clock for
    the request (llama.cpp ``timings.predicted_ms``, the decode or inter-token histogram of vLLM or
    SGLang, Ollama's ``eval_duration``), else the decode rate the output-length sweep measured from
    whole-request times, which a buffering hop does not change. A stream is held when the client
    saw less than half the decode time the server spent, and 20 ms or more went missing; the check
    fires when most of the answers that should have taken 40 ms or more to arrive were held (at
    least two). It says how they came: all in one read at the end (time to first token ≈ total),
    or in bursts at a fixed interval or size. Response headers (``Server``, ``Via``,
    ``Content-Encoding``) are listed as supporting evidence, never as the evidence.

    ## Why it adds latency
    Streaming exists so the user sees the first token early. A hop that buffers the answer delivers
    the first token only when its buffer fills or the answer ends: the user waits for the whole
    generation, and the waterfall shows no decode at all. Every streamed request pays it.

    ## Example
    Behind nginx with its default ``proxy_buffering on``: 4 of 4 streamed answers arrived in one
    read at the end; the server made 63 tokens in 252 ms (4.0 ms a token by the sweep), the client
    saw them in 0.3 ms; a 64-token answer's first token arrives 250 ms late.

    ## Fix
    Make every hop between the model server and the client pass ``text/event-stream`` through as
    it comes (the steps below, checked against each proxy's own documentation). Then rerun: the
    "delivery (held on the way)" row of the waterfall goes away.

    ## Caveats
    The token clock is the server's when it reports one, else the sweep's fit (medium confidence).
    The sweep's rate is the client's own measurement, and a client starved of CPU reads the socket
    late and sees the tokens in bursts, as a buffering hop shows them: when only that rate anchors
    the comparison and the run's own readings show a starved client (the client host saturated, or
    llmdoctor's scheduling lag of 5 ms or more, median, while the held answers streamed), the check
    is skipped, saying so, unless a response header names a hop (``Via``, ``X-Cache``, ``CF-Ray``,
    a proxy's ``Server``) and most of the short answers came whole at the end, as a buffer holds
    every answer shorter than itself; then it fires at low confidence (a hop that does not buffer,
    before a badly starved client, can still look the same). With the server's own token clock the
    client's stalls do not move the expected decode, but they still make the client see less of it:
    whatever the clock, a held stream whose missing time is within twice llmdoctor's own worst
    scheduling lag while it streamed is no evidence of a hop, and is left out; when that leaves too
    few held streams the check is skipped, saying by how much (measured on a healthy real vLLM
    sharing 2 cores with the client: 169 ms missing against a worst lag of 96 ms while it streamed).
    A server on the client's own saturated host is starved too: its engine makes the tokens on time
    by its own clock and its writer sends their events late, each in a read of its own (measured on a
    real vLLM 0.32 with its per-request clocks, one busy loop per core: 216 ms "spread, but late"
    while llmdoctor's own lag stayed under half of that). A hop that holds the stream releases the
    events together (one read, or bursts), so held answers that came one event to a read are left
    out when the endpoint is served from this host by a process that is not a proxy (a proxy on the
    port is a hop: a real haproxy starved by four busy loops per core passes a held stream one event
    to a read too) and the host was saturated; when that leaves too few, the check is skipped, saying so.
    Behind a real nginx on a busy host the holds are 28-60 ms against lags of 4-9 ms, and it fires.
    A server that itself writes its events in batches looks held by its own clock too; compare with
    a request sent to the model server directly. Sources for the fixes: nginx ngx_http_proxy_module
    (``proxy_buffering``, ``X-Accel-Buffering``, ``proxy_ignore_headers``); Traefik v3.7 routing
    docs (``responseForwarding.flushInterval``, 100 ms by default, ignored for streaming responses);
    Caddy ``reverse_proxy`` docs (``flush_interval``; ``text/event-stream`` is flushed at once);
    Envoy FAQ "Why is Envoy sending 413s?" (filters stream by default, the buffer filter does not);
    Cloudflare "Response Buffering" (dynamic responses stream, cached ones and Enterprise's Response
    Buffering do not); AWS API Gateway "response transfer mode" (REST APIs buffer unless
    ``STREAM``); HAProxy 2.6 configuration manual (``option http-no-delay``): measured in
    llmdoctor's own tests, haproxy's defaults (it sends with MSG_MORE, so the kernel merges small
    writes) deliver a short answer in one read and a long one in bursts; with the option, one event
    per read. Google Cloud load balancers and AWS ALB are not covered: their documentation was not
    checked.
    """

    id = "LD410"
    name = "held-back-stream"
    title = "Stream held back on the way"
    category = Category.NETWORK
    requires = (ATTRIBUTION,)
    optional = (CLIENT_HOST, HOST)

    def run(self, ctx: Context) -> Iterator[Finding]:
        att = ctx.get(ATTRIBUTION)
        if not att.shapes:
            raise CheckSkipped("no successful streamed answer of 4 tokens or more in the run")
        judged = [s for s in att.judged if (s.expected_decode_ms or 0.0) >= MIN_EXPECTED_MS]
        if not judged:
            why = ("no token clock: the server reports none and the sweep gave no decode rate"
                   if not att.judged else f"no streamed answer should have taken {MIN_EXPECTED_MS:.0f} ms or more "
                   "to arrive (too few tokens, or too fast a server)")
            raise CheckSkipped(why)
        held = [s for s in judged if s.held]
        if _too_few(held, judged):
            return
        # Whatever the token clock, a client that reads late sees less of the decode: holds its lag explains
        # are no evidence of a hop.
        explained, unexplained = _split_by_lag(held)
        if _too_few(unexplained, judged):
            raise CheckSkipped(
                f"{len(held)} of {len(judged)} streamed answers arrived late or in bursts, but llmdoctor's own "
                f"scheduling lag while they streamed explains {len(explained)} of them ({_by_how_much(explained)}): "
                "a client starved of CPU reads the socket late and sees the tokens in bursts as a buffering hop "
                "would show them. Rerun from a quieter host")
        # Each event in a read of its own, but late: the bytes left the sender one event at a time, so no hop
        # held them (a buffer releases them together). A starved server's own writer sends them that way.
        client = ctx.optional(CLIENT_HOST)
        sender = _starved_sender(client, ctx.optional(HOST))
        spread = [s for s in unexplained if not s.pattern] if sender else []
        if spread:
            unexplained = [s for s in unexplained if s.pattern]
            if _too_few(unexplained, judged):
                raise CheckSkipped(
                    f"{len(held)} of {len(judged)} streamed answers arrived late, but {len(spread)} of them came one "
                    f"event to a read, as their sender wrote them, and {sender}: the server's own process, starved "
                    "of CPU, writes its events late one by one; a buffering hop releases them together. Rerun from a "
                    "quieter host")
        judged_held = len(held)
        held = unexplained
        # Only the sweep's rate, measured by this client, anchors them: a starved client looks the same.
        pressure = "" if any(s.server_clocked for s in held) else _host_pressure(client, held)
        hops = hop_headers(att.proxy_headers)
        short, whole = whole_short_answers(att.shapes)
        held_whole = len(whole) >= MIN_HELD_STREAMS and len(whole) >= HELD_MAJORITY * len(short)
        if pressure and not (hops and held_whole):
            raise CheckSkipped(
                f"{len(held)} of {len(judged)} streamed answers arrived late or in bursts, but the only token clock is "
                f"the output-length sweep's decode rate, measured by this client, and {pressure}: a client starved "
                "of CPU reads the socket late and sees the tokens in bursts as a buffering hop would show them"
                + ("" if hops else "; no response header names a hop in between")
                + ("" if held_whole else f"; {len(whole)} of {len(short)} short answers came whole at the end")
                + ". Rerun from a quiet host, or against a server that reports its own token clock")
        per_token = att.token_clock.per_token_ms if att.token_clock is not None else statistics.median(
            (s.expected_decode_ms or 0.0) / max(1, s.tokens - 1) for s in held)
        typical = ctx.options.workload.typical_output_tokens
        impact, basis = _impact(held, per_token, typical)
        patterns = [s.pattern for s in held if s.pattern]
        pattern = max(set(patterns), key=patterns.count) if patterns else "spread, but late"
        worst = max(held, key=lambda s: s.held_ms)
        server_clock = all(s.server_clocked for s in held)
        shared = att.token_clock is not None and "shared traffic" in att.token_clock.source
        confidence = Confidence.HIGH if server_clock and not shared and len(held) >= 3 else Confidence.MEDIUM
        if pressure:
            confidence = Confidence.LOW
        evidence = [
            Evidence("held streams / streams compared", f"{len(held)} / {len(judged)}", "", "attribution"),
            Evidence("how they arrived", pattern, "", "probe client (body reads)"),
            Evidence("longest hold (first token late by)", round(worst.held_ms, 1), "ms", worst.expected_source),
            Evidence(f"server decode vs seen ({worst.tokens} tokens)",
                     f"{worst.expected_decode_ms or 0.0:,.1f} vs {worst.seen_decode_ms:,.1f}", "ms", worst.path),
            Evidence("time to first token / total (median of held)",
                     round(100 * statistics.median(s.ttft_share for s in held), 1), "%", "probe client"),
        ]
        if att.token_clock is not None:
            evidence.append(Evidence("token clock", round(att.token_clock.per_token_ms, 2), "ms/token",
                                     att.token_clock.source))
        for name, value in att.proxy_headers.items():
            evidence.append(Evidence(f"response header {name} (supporting)", value, "", "typical answer"))
        if explained:
            evidence.append(Evidence("held answers the client's own lag explains (left out)",
                                     f"{len(explained)} / {judged_held}", "", "lag sampler"))
        if spread:
            evidence.append(Evidence("held answers sent one event to a read by a server on this saturated host "
                                     "(left out)", f"{len(spread)} / {judged_held}", "", "host, client_host"))
        if pressure:
            evidence += [
                Evidence("client under pressure (confidence lowered)", pressure, "", "client_host, lag sampler"),
                Evidence("short answers whole at the end", f"{len(whole)} / {len(short)}", "", "probe client"),
            ]
        yield Finding(
            Severity.WARNING,
            confidence,
            f"The stream is held back between the server and you ({pattern})",
            (f"{len(held)} of {len(judged)} streamed answers reached the client held back: the server made "
             f"{worst.tokens} tokens in {worst.expected_decode_ms or 0.0:,.0f} ms, the client saw them over "
             f"{worst.seen_decode_ms:,.1f} ms ({pattern}). A {typical}-token answer's first token arrives "
             f"~{impact:,.0f} ms late" + (": streaming gains the user nothing." if pattern == "one read" else
                                         ", and the rest comes in lumps.")
             + (f" The only token clock is the sweep's, on a busy client ({pressure}): the response names a hop "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(hops.items()))}) and {len(whole)} of {len(short)} short "
                "answers came whole at the end, as a buffer holds them, but a starved client can look the same."
                if pressure else "")),
            Fix(
                "Make every hop between the model server and the client pass the stream through unbuffered.",
                (
                    "nginx: `proxy_buffering off;` in the location that proxies the model server, or have the "
                    "server send `X-Accel-Buffering: no` (honoured unless `proxy_ignore_headers X-Accel-Buffering`).",
                    "HAProxy: `option http-no-delay` in the frontend or backend that carries the stream (by "
                    "default haproxy lets the kernel merge small writes, which holds SSE frames).",
                    "Traefik: responses recognised as streaming (text/event-stream) are flushed at once; for other "
                    "content types set `responseForwarding.flushInterval` (default 100 ms) to a negative value.",
                    "Caddy: `reverse_proxy` flushes text/event-stream at once; for other types set "
                    "`flush_interval -1`.",
                    "Envoy: keep filters that buffer whole bodies (the buffer filter) off the streaming route.",
                    "Cloudflare: keep the stream uncacheable (cached responses are buffered) and Response "
                    "Buffering (Enterprise) off for it.",
                    "AWS API Gateway (REST): set the integration's responseTransferMode to STREAM (default "
                    "BUFFERED; HTTP_PROXY and AWS_PROXY integrations only).",
                    "Compare with a request to the model server directly: the hop that holds it is the difference.",
                ),
            ),
            cause=Cause.HELD_BACK_STREAM,
            impact_ms=round(impact, 1),
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=basis,
            evidence=tuple(evidence),
        )
