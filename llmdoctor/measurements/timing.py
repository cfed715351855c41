"""Timed record of one request sent to the endpoint.

Every request the doctor makes is described by one `RequestTiming`. Times are
milliseconds measured from the moment the request started (before connecting),
with a monotonic clock. Phases that did not happen (no TLS on plain HTTP, no
connect on a reused connection) are `None`, never 0.

What the *server* says about the same request is kept beside the client's clock, each
value with its origin (`ServerClock`): a response header (``openai-processing-ms``,
TGI's ``x-queue-time``), the body (llama.cpp's ``timings``, Ollama's durations) or the
server's metrics. Values are kept as sent; `llmdoctor.analysis.clocks` sets impossible ones aside.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ClockKind", "ClockOrigin", "ErrorKind", "FailedBy", "Outcome", "RequestTiming", "ServerClock",
           "describe_request"]


class ErrorKind:
    """Stable names for the ways a request can fail (strings, for JSON)."""

    REFUSED = "connection_refused"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    TLS = "tls_error"
    DNS = "dns_error"
    HTTP_STATUS = "http_status"
    PROTOCOL = "protocol_error"
    BAD_BODY = "bad_body"
    STREAM_CUT = "stream_cut"
    TOO_LARGE = "too_large"
    OTHER = "other"


class FailedBy:
    """Who failed a request (strings, for JSON): the layer that knows the failure names it.

    ``client``: this client (too many open files, no free local port, its own pool, the run's
    deadline); ``path``: something between it and the server (a proxy or gateway that closes,
    resets or answers with its own HTML error page, a pooled connection dropped in between, name
    resolution); ``server``: the server (its status and its own error body, its silence, its cut
    stream). Client and path failures are never counted as the server's.
    """

    CLIENT = "client"
    PATH = "path"
    SERVER = "server"


class Outcome:
    """How a request ended, beyond its error kind (strings, for JSON): see `RequestTiming.outcome`."""

    OK = "ok"
    #: A 2xx generation answer without a single generated token.
    EMPTY = "empty"
    #: A stream cut after some tokens (the answer is incomplete).
    TRUNCATED = "truncated"


class ClockKind:
    """What span of a request a server clock measures (strings, for JSON)."""

    #: From the server's receipt of the request until it sent its response headers
    #: (``openai-processing-ms``): for a non-streamed answer that is all of its work.
    HEADERS = "headers"
    #: The server's whole handling of the request (TGI ``x-total-time``, Ollama ``total_duration``).
    TOTAL = "total"
    #: Request validation and tokenization before queueing (TGI ``x-validation-time``).
    VALIDATION = "validation"
    QUEUE = "queue"
    #: Loading the model before the request could run (Ollama ``load_duration``).
    LOAD = "load"
    #: Prompt processing up to the first token (llama.cpp ``prompt_ms``, Ollama ``prompt_eval_duration``).
    PREFILL = "prefill"
    #: First to last output token (llama.cpp ``predicted_ms``, Ollama ``eval_duration``).
    DECODE = "decode"
    #: Prefill and decode together, queue excluded (TGI ``x-inference-time``).
    INFERENCE = "inference"
    #: The server's own time to first token, from its receipt of the request.
    TTFT = "ttft"
    #: The server's mean time between two output tokens.
    INTER_TOKEN = "inter_token"
    #: TGI ``x-time-per-token``: inference time over generated tokens (prefill included).
    PER_TOKEN = "per_token"
    #: Prompt tokens the server took from its cache (llama.cpp ``cache_n``): a count, not a time.
    CACHED_TOKENS = "cached_tokens"


class ClockOrigin:
    """Where a server clock was read (strings, for JSON)."""

    HEADER = "server_header"
    BODY = "server_body"
    METRICS = "server_metrics"


@dataclass
class ServerClock:
    """One duration the server reported for a request, with where it came from.

    `ms` is as the server sent it (possibly negative or absurd: `llmdoctor.analysis.clocks` judges it);
    `source` names the header, field or metric (``openai-processing-ms``, ``timings.prompt_ms``).
    `requests` > 1: a mean over that many requests (metrics deltas), of which `ours` were ours.
    """

    kind: str
    ms: float
    source: str
    origin: str = ClockOrigin.HEADER
    requests: int = 1
    ours: int = 1


@dataclass
class RequestTiming:
    """Phases, outcome and server hints of one request."""

    method: str
    path: str
    streamed: bool = False
    status: int | None = None
    error: str | None = None
    error_detail: str = ""
    started_at: float = 0.0
    connect_ms: float | None = None
    tls_ms: float | None = None
    sent_ms: float | None = None
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    first_content_ms: float | None = None
    first_reasoning_ms: float | None = None
    token_times_ms: list[float] = field(default_factory=list)
    #: Arrival of each body read of a streamed answer (ms) and its size in bytes: how the bytes
    #: came in, whatever the events inside them (a proxy that holds a stream shows few, late reads).
    read_times_ms: list[float] = field(default_factory=list)
    read_bytes: list[int] = field(default_factory=list)
    total_ms: float | None = None
    bytes_received: int = 0
    reused_connection: bool = False
    http_version: str = ""
    content_events: int = 0
    reasoning_events: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    server_timing: dict[str, float] = field(default_factory=dict)
    #: The server's own clocks for this request (headers, body), each with its origin.
    server_clocks: list[ServerClock] = field(default_factory=list)
    response_headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    #: The probe that sent it (stamped by the run's context): "baseline", "sweep", ...
    probe: str = ""
    #: A second attempt: after a ``Retry-After`` wait, or on a new connection after a pooled one was closed.
    retried: bool = False
    #: The address (``ip:port``) the answer came from.
    peer: str = ""
    #: The ``X-Request-Id`` and W3C ``traceparent`` it was sent with (`llmdoctor.probes.trace_ids`):
    #: how an operator finds it in the server's logs and traces.
    request_id: str = ""
    traceparent: str = ""
    #: The worst scheduling lag llmdoctor's own process suffered while the request ran (ms; the lag
    #: sampler, `llmdoctor.measurements.client_host`): any timestamp of this request may be up to this late.
    client_lag_ms: float | None = None
    #: Set when this request failed by our own doing, as the probe that sent it judged: our probe's
    #: prompt did not fit the model's window (`llmdoctor.probes.window`). Never the server's failure.
    misfit: str = ""
    #: Who failed it (`FailedBy`): set on every request that did not end with a 2xx and no error.
    failed_by: str | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed with a 2xx status and no error."""
        return self.error is None and self.status is not None and 200 <= self.status < 300

    @property
    def generation(self) -> bool:
        """Whether this was a generation request (chat or text completion)."""
        return self.method == "POST" and self.path.rstrip("/").endswith("/completions")

    @property
    def outcome(self) -> str:
        """``ok``, ``empty`` (no token), ``truncated`` (a stream cut after tokens), ``http_<status>``, or the error."""
        if self.ok:
            if self.generation and self.output_tokens == 0 and not self.text:
                return Outcome.EMPTY
            return Outcome.OK
        if self.error == ErrorKind.STREAM_CUT and self.content_events + self.reasoning_events > 0:
            return Outcome.TRUNCATED
        if self.status is not None and not 200 <= self.status < 300:
            return f"http_{self.status}"
        return self.error or "unknown_error"

    @property
    def output_tokens(self) -> int:
        """Generated tokens: the server's usage count when given, else the events seen."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return self.content_events + self.reasoning_events

    @property
    def setup_ms(self) -> float:
        """Connection set-up this request paid: TCP connect (which includes DNS in httpx) + TLS."""
        return (self.connect_ms or 0.0) + (self.tls_ms or 0.0)

    @property
    def decode_ms(self) -> float | None:
        """Time from the first to the last token."""
        if self.ttft_ms is None or not self.token_times_ms:
            return None
        return self.token_times_ms[-1] - self.ttft_ms

    @property
    def inter_token_ms(self) -> list[float]:
        """Gaps between consecutive token events."""
        t = self.token_times_ms
        return [b - a for a, b in zip(t, t[1:])]


def describe_request(timing: RequestTiming, request_headers: dict[str, str]) -> str:
    """One log line for --verbose: method, path, outcome, times and the (masked) headers sent.

    `request_headers` must already be masked (`ProbeClient.request_headers`); the caller
    passes the line through the run's `Redactor` as well.
    """
    outcome = f"HTTP {timing.status}" if timing.status is not None else (timing.error or "no answer")
    if timing.status is not None and timing.error:
        outcome += f" ({timing.error})"
    parts = [f"{timing.method} {timing.path} -> {outcome}"]
    for label, value in (("ttfb", timing.ttfb_ms), ("ttft", timing.ttft_ms), ("total", timing.total_ms)):
        if value is not None:
            parts.append(f"{label} {value:.0f} ms")
    if timing.error_detail:
        parts.append(timing.error_detail[:200])
    sent = ", ".join(f"{name}: {value}" for name, value in sorted(request_headers.items()))
    return " · ".join(parts) + f" [sent headers: {sent}]"
