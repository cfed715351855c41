"""How a streamed answer reached the client, against how fast the server made its tokens.

A server that streams makes one token every few milliseconds; the client should see them arrive
at that pace. A buffering hop between them (nginx's default ``proxy_buffering on``, a CDN, a
compressing proxy) holds the bytes and releases them at once at the end, or in bursts when its
buffer fills or its flush timer fires. The client's own clock alone cannot tell a fast server from
a held stream, so each stream is compared with a *token clock*: the server's own decode time for
the request (llama.cpp ``timings.predicted_ms``, a metrics decode or inter-token mean, Ollama's
``eval_duration``), else the decode rate the output-length sweep measured from whole-request
times (which a buffering hop does not change).

The arrival of the last token anchors the comparison: a hop that holds the stream releases it
when the server is done, so the first token was held by about the decode time the client did not
see — ``held = expected decode − seen decode``. Measured behind nginx 1.22 (``proxy_buffering on``,
a close-delimited upstream stream): a short answer comes in one read at the end, a long one in
bursts as nginx's buffers fill (64 tokens at 4 ms: 4 reads ~70 ms apart, the first 60 ms late).
Headers (``Server``, ``Via``, ``X-Accel-Buffering``, ``Content-Encoding``) are kept as supporting
evidence only, never as the evidence; those that name a hop (`hop_headers`: ``Via``, a CDN's
``X-Cache`` or ``CF-Ray``, a ``Server`` that is a proxy's) say there is one to hold the stream.

A client starved of CPU reads the socket late and sees the tokens in bursts too: when the only
token clock is the sweep's rate (measured by that same client), what sets a buffering hop apart
is that it holds every answer shorter than its buffer whole until the end (`whole_short_answers`),
where a stalled client only holds those its stalls happened to cover.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from llmdoctor.measurements.timing import ClockOrigin, RequestTiming

__all__ = [
    "BURST_TOKENS",
    "HELD_SHARE",
    "MIN_HELD_MS",
    "MIN_TOKENS",
    "SERVER_TOKEN_CLOCKS",
    "StreamShape",
    "TokenClock",
    "hop_headers",
    "proxy_headers",
    "stream_shape",
    "whole_short_answers",
]

#: Streams with fewer token events than this say nothing about their delivery.
MIN_TOKENS = 4
#: A stream is held when the client saw at most this share of the decode time it should have seen ...
HELD_SHARE = 0.5
#: ... and the missing time is at least this long.
MIN_HELD_MS = 20.0
#: ... or the tokens came in bursts of at least this many per read (the server made them one by one).
BURST_TOKENS = 4
#: Reads whose gaps (or sizes) vary by less than this coefficient of variation are "regular".
REGULAR_CV = 0.3
#: Response headers that hint at a hop in between (supporting evidence only).
PROXY_HEADERS = ("server", "via", "x-accel-buffering", "content-encoding", "x-cache", "cf-ray")
#: Of those, the ones whose presence names a hop (RFC 9110's ``Via``; a CDN's cache and ray ids) ...
HOP_HEADERS = ("via", "x-cache", "cf-ray")
#: ... and the ``Server`` values that are a proxy's, not a model server's (a model server behind one
#: of these shows the proxy's name: nginx replaces the upstream's ``Server`` by its own).
HOP_SERVERS = ("nginx", "openresty", "envoy", "caddy", "traefik", "cloudflare", "apache", "varnish", "awselb",
               "akamai", "kong", "google frontend", "cloudfront")
#: A stream whose first token came at this share of its total or later arrived whole at the end.
WHOLE_TTFT_SHARE = 0.9
#: The token clocks that are the server's own (the others are inferred from the client's timings).
SERVER_TOKEN_CLOCKS = (ClockOrigin.BODY, ClockOrigin.METRICS)


@dataclass(frozen=True)
class TokenClock:
    """The expected time between two output tokens, and whose clock says so."""

    per_token_ms: float
    source: str
    #: ``server_body``, ``server_metrics`` (the server's own) or ``inferred`` (the sweep fit).
    clock: str


@dataclass
class StreamShape:
    """One streamed answer's delivery: token events, the reads they came in, and what was held."""

    path: str
    tokens: int
    reads: int
    ttft_ms: float
    total_ms: float
    seen_decode_ms: float
    expected_decode_ms: float | None = None
    expected_source: str = ""
    expected_clock: str = ""
    #: Burst pattern of the reads that carried tokens: "one read", "bursts every ~N ms",
    #: "bursts of ~N bytes", "bursts", or "" (one read per token or so).
    pattern: str = ""
    gaps_ms: list[float] = field(default_factory=list)
    #: The worst scheduling lag of the client while this answer streamed (None: not measured).
    client_lag_ms: float | None = None

    @property
    def held_ms(self) -> float:
        """How long the first token was held on the way (0 when the stream came at the server's pace)."""
        if self.expected_decode_ms is None:
            return 0.0
        return max(0.0, self.expected_decode_ms - self.seen_decode_ms)

    @property
    def held(self) -> bool:
        """Whether the stream was held back between the server and the client.

        Held: 20 ms or more of the decode went unseen, and either most of it did (one read at the end)
        or the tokens came several to a read (bursts: a buffer filling, a flush timer).
        """
        if self.expected_decode_ms is None or self.held_ms < MIN_HELD_MS:
            return False
        return (self.seen_decode_ms <= HELD_SHARE * self.expected_decode_ms
                or self.tokens / max(1, self.reads) >= BURST_TOKENS)

    @property
    def held_share(self) -> float:
        """The held time as a share of the expected decode (0..1)."""
        if not self.expected_decode_ms:
            return 0.0
        return min(1.0, self.held_ms / self.expected_decode_ms)

    @property
    def ttft_share(self) -> float:
        """Time to first token over the total: ≈ 1 when the whole answer came at the end."""
        return self.ttft_ms / self.total_ms if self.total_ms > 0 else 0.0

    @property
    def whole_at_end(self) -> bool:
        """All its tokens came in one read, at the end of the request."""
        return self.pattern == "one read" and self.ttft_share >= WHOLE_TTFT_SHARE

    @property
    def server_clocked(self) -> bool:
        """Whether its expected decode is the server's own clock (not the sweep's inferred rate)."""
        return self.expected_clock in SERVER_TOKEN_CLOCKS


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean > 0 else None


def _reads_with_tokens(t: RequestTiming) -> list[tuple[float, int]]:
    """(arrival ms, bytes) of the body reads that carried token events, in order."""
    token_instants = set(t.token_times_ms)
    sizes: dict[float, int] = {}
    for at, size in zip(t.read_times_ms, t.read_bytes):
        if at in token_instants:
            sizes[at] = sizes.get(at, 0) + size
    if not sizes:  # no read record (an old recording): the token instants themselves
        return [(at, 0) for at in sorted(token_instants)]
    return sorted(sizes.items())


def _pattern(t: RequestTiming, reads: list[tuple[float, int]]) -> tuple[str, list[float]]:
    tokens = len(t.token_times_ms)
    if len(reads) == 1:
        return "one read", []
    if tokens / len(reads) < 3:
        return "", []
    times = [at for at, _ in reads]
    gaps = [b - a for a, b in zip(times, times[1:])]
    gap_cv = _cv(gaps)
    if gap_cv is not None and gap_cv < REGULAR_CV and len(gaps) >= 2:
        return f"bursts every ~{statistics.median(gaps):,.0f} ms", gaps
    sizes = [float(size) for _, size in reads[:-1] if size]  # the last read is whatever was left
    size_cv = _cv(sizes)
    if size_cv is not None and size_cv < REGULAR_CV:
        return f"bursts of ~{statistics.median(sizes):,.0f} bytes", gaps
    return "bursts", gaps


def stream_shape(t: RequestTiming, clock: TokenClock | None, own_decode_ms: float | None = None,
                 own_source: str = "") -> StreamShape | None:
    """The delivery of one streamed answer, or None when it says nothing (not streamed, too few tokens).

    The expected decode is the request's own server decode time when given (`own_decode_ms`),
    else (tokens − 1) × the token clock's per-token time.
    """
    if not (t.ok and t.streamed and len(t.token_times_ms) >= MIN_TOKENS and t.ttft_ms is not None
            and t.total_ms is not None):
        return None
    reads = _reads_with_tokens(t)
    pattern, gaps = _pattern(t, reads)
    shape = StreamShape(
        path=t.path, tokens=len(t.token_times_ms), reads=len(reads), ttft_ms=t.ttft_ms, total_ms=t.total_ms,
        seen_decode_ms=max(0.0, t.token_times_ms[-1] - t.token_times_ms[0]), pattern=pattern, gaps_ms=gaps,
        client_lag_ms=t.client_lag_ms,
    )
    if own_decode_ms is not None:
        shape.expected_decode_ms, shape.expected_source, shape.expected_clock = own_decode_ms, own_source, "server_body"
    elif clock is not None:
        shape.expected_decode_ms = clock.per_token_ms * (shape.tokens - 1)
        shape.expected_source = f"{shape.tokens - 1} × {clock.per_token_ms:.2f} ms/token ({clock.source})"
        shape.expected_clock = clock.clock
    return shape


def proxy_headers(t: RequestTiming) -> dict[str, str]:
    """The response headers that hint at a hop in between (supporting evidence, never the evidence)."""
    lower = {k.lower(): v for k, v in t.response_headers.items()}
    return {name: lower[name] for name in PROXY_HEADERS if name in lower}


def hop_headers(headers: dict[str, str]) -> dict[str, str]:
    """Of `proxy_headers`' result, the headers that name a hop in between (a proxy's ``Server``, ``Via`` ...)."""
    hops = {name: value for name, value in headers.items() if name in HOP_HEADERS}
    server = headers.get("server", "")
    if any(name in server.lower() for name in HOP_SERVERS):
        hops["server"] = server
    return hops


def whole_short_answers(shapes: list[StreamShape]) -> tuple[list[StreamShape], list[StreamShape]]:
    """The shorter half of the answers that a hold could show on, and those of them that came whole at the end.

    Answers that should have taken `MIN_HELD_MS` or more to stream count; the shorter half is those
    of at most the median token count. A buffering hop holds every answer shorter than its buffer
    until the end; a client that stalls only the ones its stalls covered.
    """
    timed = [s for s in shapes if (s.expected_decode_ms or 0.0) >= MIN_HELD_MS]
    if not timed:
        return [], []
    median = statistics.median(s.tokens for s in timed)
    short = [s for s in timed if s.tokens <= median]
    return short, [s for s in short if s.whole_at_end]
