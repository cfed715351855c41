"""Decode cost per output token, from the clocks that saw it: the stream, or the server's histogram.

The client times every token event of a stream. When several tokens arrive in one read — a
starved API server (vLLM's merges tokens into one chunk under CPU starvation), a buffering proxy
(nginx's default ``proxy_buffering on``) — the gaps between events are zero and the stream says
nothing about decode: "0.0 ms per output token". The server's own inter-token histogram
(vLLM ``vllm:inter_token_latency_seconds``, `llmdoctor.probes.backends`) still measured every gap;
its delta between the scrapes around the baseline is the decode cost of the requests in that window.
It is *ours* when the histogram gained exactly the gaps our baseline requests had (tokens − 1 each);
otherwise other traffic moved it and it is the server's mean, said so.

Nothing here sends a request: it reads the baseline and the metrics probes' results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.measurements.server_metrics import ServerMetricsResult
from llmdoctor.measurements.timing import RequestTiming

__all__ = ["MERGED_SHARE", "ServerDecode", "StreamDecode", "server_decode", "stream_decode"]

#: The stream is merged when fewer than this share of the token gaps were seen as separate reads.
MERGED_SHARE = 0.5


@dataclass(frozen=True)
class StreamDecode:
    """Decode as the client's stream saw it, over the requests with two tokens or more."""

    requests: int
    tokens: int
    #: Token gaps the requests had (tokens − 1 each) and those seen as separate reads.
    gaps: int
    gaps_seen: int
    per_token_ms: float | None

    @property
    def merged(self) -> bool:
        """Whether tokens mostly arrived together, so the stream's gaps do not time decode."""
        return self.gaps > 0 and self.gaps_seen < MERGED_SHARE * self.gaps


def _reads(t: RequestTiming) -> int:
    """Separate arrivals among the token events (events handled from one read share a time)."""
    return len(set(t.token_times_ms))


def stream_decode(timings: Sequence[RequestTiming]) -> StreamDecode:
    """Mean ms per output token from first to last token, over the successful requests of `timings`.

    A request's tokens are the server's usage count when given, else the events seen; the mean is
    (last token − first token) / (tokens − 1), which stays right when some events carried several
    tokens, but is meaningless when nearly all came in one read (`StreamDecode.merged`).
    """
    used = [t for t in timings if t.ok and t.token_times_ms and t.output_tokens >= 2]
    tokens = sum(t.output_tokens for t in used)
    gaps = sum(t.output_tokens - 1 for t in used)
    seen = sum(min(_reads(t), t.output_tokens) - 1 for t in used)
    spans = sum(t.token_times_ms[-1] - t.token_times_ms[0] for t in used)
    per_token = spans / gaps if gaps else None
    return StreamDecode(len(used), tokens, gaps, seen, per_token)


@dataclass(frozen=True)
class ServerDecode:
    """The server's inter-token histogram over the baseline's window."""

    per_token_ms: float
    gaps: float
    #: Gaps our baseline requests had in the window (None: not known).
    our_gaps: int | None
    source: str

    @property
    def ours(self) -> bool:
        """Whether the histogram gained exactly our requests' gaps (no other traffic in the window)."""
        return self.our_gaps is not None and self.our_gaps > 0 and self.gaps == self.our_gaps


def server_decode(metrics: ServerMetricsResult | None, ours: Sequence[RequestTiming] = ()) -> ServerDecode | None:
    """The inter-token histogram's mean over the scrapes' window; None when not exported or reset.

    `ours` are the baseline requests; those that started after the first scrape count as in the window.
    """
    d = metrics.delta if metrics is not None else None
    if metrics is None or d is None or d.inter_token_ms is None or d.counter_reset:
        return None
    gaps = d.counts.get("inter_token")
    if gaps is None or gaps <= 0:
        return None
    window = [t for t in ours if t.ok and t.started_at >= metrics.before.scraped_at]
    our_gaps = sum(max(0, t.output_tokens - 1) for t in window) if window else None
    return ServerDecode(d.inter_token_ms, gaps, our_gaps, f"{metrics.backend} inter-token histogram ({metrics.url})")
