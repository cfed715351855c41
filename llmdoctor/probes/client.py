"""The timed, budgeted HTTP client: every request llmdoctor sends to the endpoint goes through it.

One `ProbeClient` per run. Each request

- counts against a budget (`max_requests`); `BudgetExhausted` is raised *before* sending;
- is timed phase by phase with ``time.perf_counter()`` from where it reaches the network
  (connect, or the first header byte on a pooled connection): TCP connect and TLS handshake
  (httpcore trace events), request sent, response headers (TTFB), first token and every
  token event of an SSE stream, end of body;
- is refused (`DeadlineReached`, before sending) once the run's deadline (``--deadline``) has
  passed, and otherwise gets at most the time left to the run as its own deadline;
- on 429 or 503 with a ``Retry-After`` of at most `MAX_RETRY_AFTER_S` seconds that fits in the
  budget and the deadline, waits that long and retries once (both requests count); it backs off
  like this once per run, and never without ``Retry-After``: the doctor reports rate limiting or
  unavailability instead of hammering;
- is bounded: a wall-clock deadline of `timeout_s` for the whole request (httpx's timeouts are
  per read, so a server dripping one byte a second would otherwise never time out), a maximum
  body size, a maximum SSE line length;
- never raises for endpoint trouble: the outcome is a `RequestTiming` whose `error` is an
  `ErrorKind` and whose `error_detail` has been through the `Redactor`, so the API key never
  appears in it;
- records its outcome: a retry is marked `retried`, the answering address is kept (`peer`), and,
  with a `LagSampler`, the worst scheduling lag this process suffered while it ran (`client_lag_ms`).

`connect_ms` is httpcore's ``connect_tcp`` span, which includes name resolution when the URL has a
host name (DNS is measured separately by the dns probe). `ttft_ms` of a non-streamed request is its
`total_ms`: nothing earlier is observable.

Redirects are reported, never followed (the key would be sent to the new location). HTTP/1.1.
Proxies from the environment are honoured, as the user's own application would.
The client is meant for sequential use (one request at a time per thread).
"""

from __future__ import annotations

import errno
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from llmdoctor import __version__
from llmdoctor.clocks import header_clocks, llamacpp_clocks
from llmdoctor.probes.lag import LagSampler
from llmdoctor.probes.sse import SSEError, SSEEvent, SSEParser
from llmdoctor.probes.timing import ErrorKind, RequestTiming
from llmdoctor.redact import Redactor, is_sensitive_header, mask_secret, redact_headers
from llmdoctor.target import ClientSetupError, Target

__all__ = [
    "ProbeClient",
    "BudgetExhausted",
    "ClientSetupError",
    "DeadlineReached",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_RETRY_AFTER_S",
    "USER_AGENT",
    "describe_request",
    "parse_retry_after",
]

DEFAULT_MAX_BODY_BYTES = 16 << 20
USER_AGENT = f"llmdoctor/{__version__}"
TEXT_KEEP_CHARS = 200
ERROR_BODY_READ_BYTES = 64 << 10
# After ``data: [DONE]`` the server should end the body at once; wait this long for the end
# (so the connection stays reusable) before giving up on it without an error.
DONE_GRACE_S = 1.0
# The longest Retry-After (seconds) the client honours with its one retry; longer: no retry.
MAX_RETRY_AFTER_S = 10.0
# A request is not started with less time than this left before the run's deadline.
MIN_REQUEST_S = 0.05
# Body reads of a stream whose arrival is kept (`RequestTiming.read_times_ms`); the rest are not.
MAX_READS_KEPT = 4096
_BACKOFF_STATUSES = (429, 503)
# httpcore trace events that mark a request's first contact with the network.
_NETWORK_START = ("connection.connect_tcp.started", "http11.send_request_headers.started")

# Server timing hints sent as response headers.
# TGI (huggingface/text-generation-inference, router/src/server.rs, `generate`): x-total-time,
# x-validation-time, x-queue-time, x-inference-time and x-time-per-token are
# `Duration::as_millis()` integers (ms); x-compute-time is `as_secs_f64()` (seconds);
# x-prompt-tokens, x-generated-tokens and x-compute-characters are counts. The streaming route
# only sends x-compute-type and x-compute-characters. OpenAI sends `openai-processing-ms`.
_HEADER_MS = {
    "x-total-time": "tgi.total_ms",
    "x-validation-time": "tgi.validation_ms",
    "x-queue-time": "tgi.queue_ms",
    "x-inference-time": "tgi.inference_ms",
    "x-time-per-token": "tgi.time_per_token_ms",
    "openai-processing-ms": "openai.processing_ms",
}
_HEADER_SECONDS = {"x-compute-time": "tgi.compute_ms"}
_HEADER_COUNTS = {
    "x-prompt-tokens": "tgi.prompt_tokens",
    "x-generated-tokens": "tgi.generated_tokens",
    "x-compute-characters": "tgi.compute_characters",
}


#: The largest CA bundle read (Mozilla's whole bundle is ~200 KiB).
MAX_CA_BUNDLE_BYTES = 16 << 20
_ssl_lock = threading.Lock()
_ssl_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}


class BudgetExhausted(Exception):
    """The run's request budget (``--max-requests``) is spent; nothing was sent."""


class DeadlineReached(BudgetExhausted):
    """The run's deadline (``--deadline``) has passed; nothing was sent.

    A subclass of `BudgetExhausted`: time is the other budget, and every probe that stops
    cleanly on a spent request budget stops the same way on a spent time budget.
    """


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date); None if absent/invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN or infinite
        return None
    return max(0.0, seconds)


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


class _Stop(Exception):
    """Internal: stop reading a body with this error kind and detail."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Wall-clock deadline inside httpcore: every socket operation gets at most the time left.


class _Deadline(threading.local):
    """The perf_counter() instant the current request of this thread must end by (or None)."""

    at: float | None = None
    #: perf_counter() when the last socket read of this thread's request returned: when the
    #: bytes being handled arrived, before httpx and this client spent any Python time on them.
    read_at: float | None = None

    def cap(self, timeout: float | None, exc: type[Exception]) -> float | None:
        if self.at is None:
            return timeout
        left = self.at - time.perf_counter()
        if left <= 0:
            raise exc("the request's wall-clock deadline has passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, self._deadline.cap(timeout, httpcore.ReadTimeout))
        self._deadline.read_at = time.perf_counter()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.cap(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = self._deadline.cap(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = self._deadline.cap(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = self._deadline.cap(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _install_deadline(client: httpx.Client, deadline: _Deadline) -> bool:
    """Wrap the network backend of every connection pool of `client`; False if not possible.

    httpx has no public hook for this: it reaches `transport._pool._network_backend`, present
    in httpcore 1.x (also for proxy pools). Without it the body loop still enforces the deadline
    between chunks, but not while response headers drip.
    """
    transports = [client._transport, *client._mounts.values()]  # noqa: SLF001
    ok = True
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            ok = ok and transport is None
            continue
        if not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend, deadline)  # type: ignore[union-attr]
    return ok


# ---------------------------------------------------------------------------------------------


@dataclass
class _StreamState:
    done: bool = False
    valid: int = 0
    malformed: int = 0
    last_event_ms: float | None = None
    #: When the first finish_reason came: the last token's time if no token event showed it.
    finish_ms: float | None = None
    content: list[str] = field(default_factory=list)
    content_len: int = 0
    reasoning: list[str] = field(default_factory=list)
    reasoning_len: int = 0

    def keep(self, kind: str, piece: str) -> None:
        if kind == "content" and self.content_len < TEXT_KEEP_CHARS:
            self.content.append(piece)
            self.content_len += len(piece)
        elif kind == "reasoning" and self.reasoning_len < TEXT_KEEP_CHARS:
            self.reasoning.append(piece)
            self.reasoning_len += len(piece)

    def text(self) -> str:
        return "".join(self.content or self.reasoning)[:TEXT_KEEP_CHARS]


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


_DNS_WORDS = ("name or service not known", "name resolution", "nodename nor servname",
              "no address associated", "getaddrinfo")


def _classify(exc: BaseException) -> tuple[str, str]:
    """Map an httpx/httpcore/OS exception to an `ErrorKind` and a one-line detail."""
    chain = list(_chain(exc))
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout):
        return ErrorKind.CONNECT_TIMEOUT, f"connect timed out: {msg}"
    if isinstance(exc, httpx.WriteTimeout):
        return ErrorKind.READ_TIMEOUT, f"sending the request timed out: {msg}"
    if isinstance(exc, httpx.TimeoutException):
        return ErrorKind.READ_TIMEOUT, f"read timed out: {msg}"
    if any(isinstance(e, ssl.SSLError | ssl.CertificateError) for e in chain):
        return ErrorKind.TLS, f"TLS error: {msg}"
    if isinstance(exc, httpx.ConnectError):
        if any(isinstance(e, ConnectionRefusedError) for e in chain) or any(
            getattr(e, "errno", None) == errno.ECONNREFUSED for e in chain
        ):
            return ErrorKind.REFUSED, f"connection refused: {msg}"
        if any(isinstance(e, socket.gaierror) for e in chain) or any(s in msg.lower() for s in _DNS_WORDS):
            return ErrorKind.DNS, f"name resolution failed: {msg}"
        return ErrorKind.OTHER, f"connect failed: {msg}"
    if isinstance(exc, httpx.ProtocolError | httpx.ReadError | httpx.WriteError):
        return ErrorKind.PROTOCOL, f"{type(exc).__name__}: {msg}"
    return ErrorKind.OTHER, f"{type(exc).__name__}: {msg}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None and n >= 0 else None


def _empty_token_delta(delta: Any, choice: dict[str, Any], *, first: bool) -> bool:
    """True for ``delta: {"content": ""}`` without a role: a token whose text is not out yet.

    A role chunk (vLLM/OpenAI send ``{"role": "assistant", "content": ""}`` first) is not a token.
    A final chunk (with a finish_reason) is one only when it is the `first` token of the answer:
    after tokens, an empty closing delta is bookkeeping; before any, the answer still finished, so
    the model generated its token. vLLM 0.32 streams a ``max_tokens=1`` answer whose token is half
    a UTF-8 character as a role chunk and then ``{"content": ""}`` with ``finish_reason: "length"``
    (fixtures/vllm/chat_stream_1token_empty.sse; the detokenizer holds the partial bytes back,
    ``vllm/v1/engine/detokenizer.py``); its ``completion_tokens`` is 1.
    """
    return (
        isinstance(delta, dict)
        and delta.get("content") == ""
        and "role" not in delta
        and not delta.get("tool_calls")
        and (first or not choice.get("finish_reason"))
    )


def _header_timings(headers: httpx.Headers) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, key in _HEADER_MS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v
    for name, key in _HEADER_SECONDS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v * 1000.0
    for name, key in _HEADER_COUNTS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v
    # W3C Server-Timing: "name;dur=12.3;desc=..., other;dur=4"
    for entry in ",".join(headers.get_list("server-timing")).split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for p in params:
            k, _, val = p.partition("=")
            if name and k.strip().lower() == "dur" and (v := _num(val.strip('"'))) is not None:
                out[f"server-timing.{name}"] = v
    return out


def _error_message(obj: Any) -> str | None:
    """The message of an error body: OpenAI ``{"error": {"message"}}``, TGI ``{"error": "..."}``, ..."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        parts = [str(err[k]) for k in ("message", "type", "code") if err.get(k) not in (None, "")]
        if parts:
            return " / ".join(dict.fromkeys(parts))
        return json.dumps(err)[:TEXT_KEEP_CHARS]
    if isinstance(err, str) and err:
        return err
    for key in ("message", "detail", "msg"):
        val = obj.get(key)
        if isinstance(val, str) and val:
            return val
        if val:
            return json.dumps(val)[:TEXT_KEEP_CHARS]
    return None


def _peer(response: httpx.Response) -> str:
    """``ip:port`` of the connection the response came on ("" when the transport does not say)."""
    stream = response.extensions.get("network_stream")
    try:
        addr = stream.get_extra_info("server_addr") if stream is not None else None
    except Exception:  # noqa: BLE001 - a transport without the information
        return ""
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return ""


def _tokens_from_headers(timing: RequestTiming) -> None:
    """Token counts from TGI headers when the body carried no usage."""
    if timing.prompt_tokens is None and "tgi.prompt_tokens" in timing.server_timing:
        timing.prompt_tokens = int(timing.server_timing["tgi.prompt_tokens"])
    if timing.completion_tokens is None and "tgi.generated_tokens" in timing.server_timing:
        timing.completion_tokens = int(timing.server_timing["tgi.generated_tokens"])


def _snippet(data: bytes, redactor: Redactor) -> str:
    """The body's first 200 characters, whitespace squeezed; redacted *before* the cut."""
    return redactor.text(" ".join(data.decode("utf-8", errors="replace").split()))[:TEXT_KEEP_CHARS]


class ProbeClient:
    """Timed, budgeted, redacting HTTP client for one endpoint (a context manager).

    `on_request` is called with every finished `RequestTiming`; `history` keeps them all.
    """

    def __init__(
        self,
        target: Target,
        *,
        timeout_s: float,
        max_requests: int,
        insecure: bool = False,
        ca_bundle: str | None = None,
        on_request: Callable[[RequestTiming], None] | None = None,
        before_send: Callable[[], None] | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        trust_env: bool = True,
        deadline_at: float | None = None,
        lag: LagSampler | None = None,
        other_origins: Iterable[str | None] = (),
    ) -> None:
        """`deadline_at`: the ``time.perf_counter()`` instant the whole run must end by (or None);
        `lag`: the run's lag sampler, whose worst lag during each request is stamped on it.

        `other_origins`: URLs on other origins the run will GET (a metrics exporter), so their
        route (direct or proxied) is decided up front too. Raises `ClientSetupError` when the
        client cannot be built.
        """
        self.target = target
        self.lag = lag
        self.timeout_s = float(timeout_s)
        self.deadline_at = deadline_at
        self.max_requests = int(max_requests)
        self.max_body_bytes = int(max_body_bytes)
        self.on_request = on_request
        # Called (outside the lock) before every request that passed the budget: a shared rate limit.
        self.before_send = before_send
        self.history: list[RequestTiming] = []
        self._sent = 0
        self._backed_off = False
        self._lock = threading.Lock()
        self._deadline = _Deadline()

        headers: dict[str, str] = {"User-Agent": USER_AGENT}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        for name, value in target.headers:
            headers[name] = value
        self.redactor = Redactor.for_request(target.api_key, list(headers.items()))
        self._credential_headers = [n for n in headers if n.lower() != "user-agent"]
        self._user_headers = frozenset(name.lower() for name, _ in target.headers)

        # The SSL context is built here, eagerly (loading CA certificates takes tens of ms),
        # so that the cost is not billed to the first request's timings.
        self._ssl_context = self._make_ssl_context(insecure, ca_bundle)
        connect_s = min(self.timeout_s, 10.0)
        credentials = bool(target.api_key) or any(is_sensitive_header(n) for n, _ in target.headers)
        transport, mounts = self._transports(trust_env, list(other_origins), credentials=credentials)
        try:
            self._client = httpx.Client(
                # Latin-1, as HTTP/1.1 carries header values (httpx would encode str values as ASCII).
                headers={name.encode("ascii"): value.encode("latin-1") for name, value in headers.items()},
                timeout=httpx.Timeout(self.timeout_s, connect=connect_s),
                follow_redirects=False,
                transport=transport,
                mounts=mounts,
                trust_env=trust_env,
            )
            self.deadline_enforced = _install_deadline(self._client, self._deadline)
            # Warm the request-building path (URL parsing, header encoding) without sending anything.
            self._client.build_request("POST", self._url("/", False), content=b"{}")
        except (httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
            raise ClientSetupError(self.redactor.text(f"cannot build the HTTP client: {exc}")) from None

    def _transports(self, trust_env: bool, others: list[str | None], *,
                    credentials: bool) -> tuple[httpx.HTTPTransport, dict[str, httpx.BaseTransport]]:
        """The endpoint's transport (direct or through its proxy) and one per other origin (`proxies`)."""
        from llmdoctor.proxies import ProxyError, ProxySettings, Route, proxy_transport, route_for

        options: dict[str, Any] = {"verify": self._ssl_context, "http1": True, "http2": False,
                                   "trust_env": trust_env}

        def route(scheme: str, host: str, port: int, creds: bool) -> Route:
            return route_for(scheme, host, port, credentials=creds) if trust_env else Route(None, ProxySettings())

        origin = urlsplit(self.target.base_url)
        own = (origin.scheme, origin.hostname or "", origin.port or (443 if origin.scheme == "https" else 80))
        self.route = route(*own, credentials)
        try:
            transport = proxy_transport(self.route, **options)
            mounts: dict[str, httpx.BaseTransport] = {}
            for url in others:
                if not url or "://" not in url:
                    continue  # a path on the endpoint's own origin
                other = urlsplit(url)
                key = (other.scheme, other.hostname or "", other.port or (443 if other.scheme == "https" else 80))
                if key == own or other.scheme not in ("http", "https"):
                    continue
                host = f"[{key[1]}]" if ":" in key[1] else key[1]
                mounts[f"{key[0]}://{host}:{key[2]}"] = proxy_transport(route(*key, False), **options)
        except ProxyError as exc:
            raise ClientSetupError(str(exc)) from None
        return transport, mounts

    @staticmethod
    def _make_ssl_context(insecure: bool, ca_bundle: str | None) -> ssl.SSLContext:
        """The SSL context for these settings (built once per process: loading certificates takes tens of ms)."""
        key: tuple[Any, ...] = (insecure, ca_bundle)
        if ca_bundle and not insecure:
            import os
            import stat

            try:
                st = os.stat(ca_bundle)
            except OSError as exc:
                raise ClientSetupError(f"--ca-bundle {ca_bundle}: cannot read the CA bundle: "
                                       f"{exc.strerror or exc}") from None
            if not stat.S_ISREG(st.st_mode):
                raise ClientSetupError(f"--ca-bundle {ca_bundle}: not a regular file (a CA bundle is a PEM file of CA "
                                       "certificates)")
            if st.st_size > MAX_CA_BUNDLE_BYTES:
                raise ClientSetupError(f"--ca-bundle {ca_bundle}: larger than {MAX_CA_BUNDLE_BYTES >> 20} MiB: "
                                       "not a CA bundle of PEM certificates")
            key = (insecure, ca_bundle, st.st_ino, st.st_size, st.st_mtime_ns)
        with _ssl_lock:
            cached = _ssl_contexts.get(key)
            if cached is not None:
                return cached
        if insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif ca_bundle:
            try:
                ctx = ssl.create_default_context(cafile=ca_bundle)
            except (OSError, ssl.SSLError, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                raise ClientSetupError(f"--ca-bundle {ca_bundle}: cannot load the CA bundle as PEM certificates "
                                       f"({reason})") from None
        else:
            ctx = httpx.create_ssl_context()
        with _ssl_lock:
            _ssl_contexts[key] = ctx
        return ctx

    # -- context manager / lifecycle ------------------------------------------------------------

    def __enter__(self) -> ProbeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    # -- budget ---------------------------------------------------------------------------------

    @property
    def requests_sent(self) -> int:
        """Requests started so far (every one counts, failed or not)."""
        return self._sent

    @property
    def budget_left(self) -> int:
        """Requests that may still be sent."""
        return max(0, self.max_requests - self._sent)

    def time_left(self) -> float | None:
        """Seconds left before the run's deadline (None without one; never negative)."""
        if self.deadline_at is None:
            return None
        return max(0.0, self.deadline_at - time.perf_counter())

    @property
    def request_headers(self) -> dict[str, str]:
        """The headers sent with every request, for --verbose: sensitive values and the value of
        every ``--header`` masked (the help promises those values are never printed)."""
        return {name: mask_secret(value) if name in self._user_headers else value
                for name, value in redact_headers(self._client.headers).items()}

    # -- public requests ------------------------------------------------------------------------

    def get_json(self, path: str, *, root: bool = False) -> tuple[RequestTiming, object | None]:
        """GET a JSON document; `root` makes `path` relative to `target.root_url` (native APIs)."""
        return self._request("GET", path, root=root, mode="json")

    def get_text(self, path: str, *, root: bool = False) -> tuple[RequestTiming, str | None]:
        """GET a text document (e.g. Prometheus ``/metrics``)."""
        return self._request("GET", path, root=root, mode="text")

    def get_json_url(self, url: str) -> tuple[RequestTiming, object | None]:
        """GET a JSON document by absolute URL, which must be on the endpoint's own origin.

        The credentials go only to the endpoint's scheme, host and port: another origin raises
        ValueError (a programming error, not an endpoint problem).
        """
        origin = urlsplit(self.target.base_url)
        other = urlsplit(url)
        if (other.scheme, other.hostname, other.port) != (origin.scheme, origin.hostname, origin.port):
            raise ValueError(f"refusing to send credentials to another origin: {url!r}")
        return self._request("GET", url, mode="json", absolute=True)

    def get_text_url(self, url: str) -> tuple[RequestTiming, str | None]:
        """GET a text document by absolute URL, e.g. an exporter on another host or port.

        Timed and counted like every request; the endpoint's credentials (Authorization and
        every ``--header``) are sent only when the URL is on the endpoint's own origin.
        """
        origin = urlsplit(self.target.base_url)
        other = urlsplit(url)
        same_origin = (other.scheme, other.hostname, other.port) == (origin.scheme, origin.hostname, origin.port)
        return self._request("GET", url, mode="text", absolute=True, anonymous=not same_origin)

    def post_json(
        self, path: str, body: object, *, root: bool = False
    ) -> tuple[RequestTiming, object | None]:
        """POST a JSON body and parse a JSON answer (native APIs such as ``/tokenize``)."""
        return self._request("POST", path, root=root, mode="json", body=body)

    def chat(
        self,
        messages: list[dict[str, Any]] | str,
        *,
        max_tokens: int,
        stream: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> RequestTiming:
        """POST ``/chat/completions``; a str is sent as one user message.

        Keys of `extra` are merged into the body last; a None value removes a key.
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        body = self._generation_body({"messages": messages}, max_tokens, stream, extra)
        mode = "sse" if stream else "completion"
        timing, _ = self._request("POST", "/chat/completions", mode=mode, body=body)
        return timing

    def completion(
        self, prompt: str, *, max_tokens: int, stream: bool = True, extra: dict[str, Any] | None = None
    ) -> RequestTiming:
        """POST ``/completions`` (legacy text completion); see `chat` for `extra`."""
        body = self._generation_body({"prompt": prompt}, max_tokens, stream, extra)
        timing, _ = self._request("POST", "/completions", mode="sse" if stream else "completion", body=body)
        return timing

    def _generation_body(
        self, base: dict[str, Any], max_tokens: int, stream: bool, extra: dict[str, Any] | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.target.model:
            body["model"] = self.target.model
        body.update(base)
        body["max_tokens"] = max_tokens
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        for key, value in (extra or {}).items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        return body

    # -- the one place that sends -------------------------------------------------------------

    def _url(self, path: str, root: bool) -> str:
        base = self.target.root_url if root else self.target.base_url
        return base.rstrip("/") + "/" + path.lstrip("/")

    def _request(
        self,
        method: str,
        path: str,
        *,
        mode: str,
        root: bool = False,
        body: object = None,
        absolute: bool = False,
        anonymous: bool = False,
    ) -> tuple[RequestTiming, Any]:
        self._take_budget(method, path)
        content = None if body is None else json.dumps(body).encode()
        url = path if absolute else self._url(path, root)
        timing, payload = self._attempt(method, url, mode, content, anonymous)
        if (
            timing.error == ErrorKind.PROTOCOL
            and timing.reused_connection
            and timing.status is None
            and self.budget_left > 0
            and self._can_start()
        ):
            # A pooled keep-alive connection that the server closed while it was idle (the
            # classic race when both sides use a ~5 s keep-alive): every HTTP client retries
            # this once on a new connection. Both attempts stay in `history` and count.
            self._take_budget(method, path)
            timing, payload = self._attempt(method, url, mode, content, anonymous, retried=True)
        elif timing.status in _BACKOFF_STATUSES and not self._backed_off:
            wait = self._backoff(timing)
            if wait is not None:
                self._backed_off = True  # one back-off per run: a server that keeps refusing is reported
                time.sleep(wait)
                self._take_budget(method, path)
                first = timing
                timing, payload = self._attempt(method, url, mode, content, anonymous, retried=True)
                if timing.status in _BACKOFF_STATUSES:
                    timing.error_detail = self.redactor.text(
                        f"{timing.error_detail} (also after waiting {wait:g} s as Retry-After asked; "
                        f"first answer: HTTP {first.status})"
                    )[:500]
        return timing, payload

    def _backoff(self, timing: RequestTiming) -> float | None:
        """Seconds to wait before the one retry of a 429/503, or None for no retry.

        Only with a ``Retry-After`` of at most `MAX_RETRY_AFTER_S`, budget left, and time left
        before the run's deadline for the wait plus the request itself.
        """
        wait = parse_retry_after(timing.response_headers.get("retry-after"))
        if wait is None or wait > MAX_RETRY_AFTER_S or self.budget_left <= 0:
            return None
        left = self.time_left()
        if left is not None and wait + max(MIN_REQUEST_S, min(self.timeout_s, 1.0)) > left:
            return None
        return wait

    def _can_start(self) -> bool:
        left = self.time_left()
        return left is None or left >= MIN_REQUEST_S

    def _take_budget(self, method: str, path: str) -> None:
        if not self._can_start():
            raise DeadlineReached(f"the run's deadline has passed; not sending {method} {path}")
        with self._lock:
            if self._sent >= self.max_requests:
                raise BudgetExhausted(f"request budget of {self.max_requests} spent; not sending {method} {path}")
            self._sent += 1
        if self.before_send is not None:
            self.before_send()

    def _attempt(
        self, method: str, url: str, mode: str, content: bytes | None, anonymous: bool = False,
        retried: bool = False,
    ) -> tuple[RequestTiming, Any]:
        # The URL path as sent ("/v1/models"), without a query string that could hold a secret.
        timing = RequestTiming(method=method, path=urlsplit(url).path, streamed=(mode == "sse"), retried=retried)
        marks: dict[str, float] = {}

        def trace(name: str, info: dict[str, Any]) -> None:
            now = time.perf_counter()
            if name == "http11.receive_response_headers.complete":  # stamped at the read that brought them
                now = self._arrival()
            marks.setdefault(name, now)

        extra_headers = {"Content-Type": "application/json"} if content is not None else {}
        if mode == "sse":
            extra_headers["Accept"] = "text/event-stream"
        payload: Any = None
        response: httpx.Response | None = None
        t0 = 0.0
        try:
            request = self._client.build_request(
                method, url, content=content, headers=extra_headers, extensions={"trace": trace}
            )
            if anonymous:
                for name in self._credential_headers:
                    request.headers.pop(name, None)
            timing.started_at = time.time()
            t0 = time.perf_counter()
            deadline = t0 + self.timeout_s
            if self.deadline_at is not None:
                deadline = min(deadline, self.deadline_at)
            self._deadline.at = deadline
            self._deadline.read_at = None
            try:
                response = self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                timing.error, timing.error_detail = _classify(exc)
            # The clock starts where the request reaches the network (TCP connect, or its first
            # header byte on a pooled connection), not before httpx's own Python work (pool
            # lookup, ~0.2 ms), which curl does not pay and which is no part of the endpoint.
            net = min((marks[k] for k in _NETWORK_START if k in marks), default=t0)
            timing.started_at += net - t0
            t0 = net
            if response is not None:
                payload = self._handle_response(response, timing, t0, deadline, marks, mode)
        except Exception as exc:  # never let endpoint trouble escape as an exception
            timing.error = ErrorKind.OTHER
            timing.error_detail = f"{type(exc).__name__}: {exc}"
        finally:
            end = time.perf_counter()
            if response is not None:
                try:
                    response.close()
                except Exception:  # closing a broken connection is not news
                    pass
            self._deadline.at = None
            self._fill_phases(timing, marks, t0)
            if timing.total_ms is None and t0:
                timing.total_ms = _ms(end - t0)
            if self.lag is not None and t0:
                timing.client_lag_ms = round(self.lag.worst_between(t0, end), 3)
            timing.error_detail = self.redactor.text(timing.error_detail)[:500]
            timing.text = self.redactor.text(timing.text)
            self.history.append(timing)
        if self.on_request is not None:
            self.on_request(timing)
        return timing, payload

    @staticmethod
    def _fill_phases(timing: RequestTiming, marks: dict[str, float], t0: float) -> None:
        def span(prefix: str) -> float | None:
            a, b = marks.get(prefix + ".started"), marks.get(prefix + ".complete")
            return _ms(b - a) if a is not None and b is not None else None

        timing.connect_ms = span("connection.connect_tcp")
        timing.tls_ms = span("connection.start_tls")
        if (t := marks.get("http11.send_request_body.complete")) is not None:
            timing.sent_ms = _ms(t - t0)
        headers_done = marks.get("http11.receive_response_headers.complete")
        if timing.ttfb_ms is None and headers_done is not None:
            timing.ttfb_ms = _ms(headers_done - t0)
        timing.reused_connection = (
            "connection.connect_tcp.started" not in marks and "http11.send_request_headers.started" in marks
        )

    # -- responses ------------------------------------------------------------------------------

    def _handle_response(
        self,
        response: httpx.Response,
        timing: RequestTiming,
        t0: float,
        deadline: float,
        marks: dict[str, float],
        mode: str,
    ) -> Any:
        now = time.perf_counter()
        hdr_t = marks.get("http11.receive_response_headers.complete", now)
        timing.ttfb_ms = _ms(hdr_t - t0)
        timing.status = response.status_code
        timing.http_version = response.http_version
        timing.peer = _peer(response)
        timing.response_headers = self.redactor.obj(redact_headers(response.headers))
        timing.server_timing.update(_header_timings(response.headers))
        timing.server_clocks.extend(header_clocks(response.headers))
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()

        if 300 <= response.status_code < 400:
            location = response.headers.get("location", "?")
            timing.error = ErrorKind.HTTP_STATUS
            timing.error_detail = (
                f"HTTP {response.status_code} redirect to {location} (not followed: the API key is "
                "never sent to another location; use the final URL)"
            )
            return None
        if not 200 <= response.status_code < 300:
            data, _ = self._read_all(response, deadline, limit=ERROR_BODY_READ_BYTES, truncate=True)
            message = None
            try:
                message = _error_message(json.loads(data))
            except ValueError:
                pass
            if message is None:
                message = _snippet(data, self.redactor) or response.reason_phrase
            timing.error = ErrorKind.HTTP_STATUS
            # Redact before truncating, so a cut can never leave half a key behind.
            timing.error_detail = self.redactor.text(f"HTTP {response.status_code}: {message}")[:300]
            timing.total_ms = _ms(time.perf_counter() - t0)
            return None

        if mode == "sse" and ctype == "application/json":
            # The server ignored stream=true and answered with one JSON document.
            timing.streamed = False
            mode = "completion"
        if mode == "sse" and ctype == "text/html":
            data, _ = self._read_all(response, deadline, limit=ERROR_BODY_READ_BYTES, truncate=True)
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = self.redactor.text(
                f"expected an event stream, got {ctype} (a proxy or login page?): {_snippet(data, self.redactor)}"
            )[:300]
            timing.total_ms = _ms(time.perf_counter() - t0)
            return None
        if mode == "sse":
            self._read_stream(response, timing, t0, deadline, ctype)
            return None

        data, problem = self._read_all(response, deadline, limit=self.max_body_bytes)
        timing.total_ms = _ms(self._arrival() - t0)
        timing.bytes_received = response.num_bytes_downloaded
        if problem is not None:
            timing.error, timing.error_detail = problem
            return None
        if mode == "text":
            return data.decode(response.encoding or "utf-8", errors="replace")
        try:
            obj = json.loads(data)
        except ValueError:
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = self.redactor.text(
                f"expected JSON, got {ctype or 'no content type'}: {_snippet(data, self.redactor)}"
            )[:300]
            return None
        if mode == "completion":
            self._apply_final(obj, timing)
        return obj

    def _chunks(self, response: httpx.Response, deadline: float, limit: int) -> Iterator[tuple[bytes, float]]:
        """Body chunks with their arrival time; `_Stop` on the wall deadline or the size limit."""
        total = 0
        for data in response.iter_bytes():
            now = self._arrival()
            total += len(data)
            if now > (self._deadline.at or deadline):  # the deadline may be shortened after [DONE]
                raise _Stop(ErrorKind.READ_TIMEOUT, self._timeout_detail(deadline))
            if total > limit:
                raise _Stop(ErrorKind.TOO_LARGE, f"response body larger than {limit} bytes")
            yield data, now

    def _arrival(self) -> float:
        """When the bytes now being handled arrived: the last socket read of this request.

        Not the clock after httpx built the response and parsed the chunk (~0.3-0.5 ms of Python
        when a body comes in the same read as its headers); the clock now if no read is known.
        """
        now = time.perf_counter()
        at = self._deadline.read_at
        return at if at is not None and at <= now else now

    def _timeout_detail(self, deadline: float) -> str:
        if self.deadline_at is not None and deadline >= self.deadline_at:
            return "no complete response before the run's deadline (--deadline)"
        return f"no complete response within {self.timeout_s:g} s"

    def _read_all(
        self, response: httpx.Response, deadline: float, *, limit: int, truncate: bool = False
    ) -> tuple[bytes, tuple[str, str] | None]:
        """Read a whole body; with `truncate`, stop quietly at `limit` (for error bodies)."""
        parts: list[bytes] = []
        size = 0
        try:
            for data, _ in self._chunks(response, deadline, limit if not truncate else 1 << 62):
                parts.append(data)
                size += len(data)
                if truncate and size >= limit:
                    break
        except _Stop as stop:
            return b"".join(parts), (stop.kind, stop.detail)
        except httpx.HTTPError as exc:
            kind, detail = _classify(exc)
            return b"".join(parts), (kind, "while reading the body: " + detail)
        return b"".join(parts)[: limit if truncate else None], None

    def _read_stream(
        self, response: httpx.Response, timing: RequestTiming, t0: float, deadline: float, ctype: str
    ) -> None:
        parser = SSEParser(dispatch_incomplete=True)
        st = _StreamState()
        problem: tuple[str, str] | None = None
        grace_set = False
        try:
            for data, now in self._chunks(response, deadline, self.max_body_bytes):
                now_ms = _ms(now - t0)
                if len(timing.read_times_ms) < MAX_READS_KEPT:
                    timing.read_times_ms.append(now_ms)
                    timing.read_bytes.append(len(data))
                for event in parser.feed(data):
                    self._on_event(event, now_ms, timing, st)
                if st.done and not grace_set:
                    # Wait briefly for the end of the body, which keeps the connection reusable.
                    grace_set = True
                    self._deadline.at = min(deadline, now + DONE_GRACE_S)
            end = self._arrival()
            for event in parser.close():
                self._on_event(event, _ms(end - t0), timing, st)
            timing.total_ms = _ms(end - t0)
        except _Stop as stop:
            problem = (stop.kind, stop.detail)
        except SSEError as exc:
            problem = (ErrorKind.TOO_LARGE, str(exc))
        except httpx.HTTPError as exc:
            kind, detail = _classify(exc)
            if kind == ErrorKind.PROTOCOL:
                kind = ErrorKind.STREAM_CUT
            problem = (kind, "while streaming: " + detail)
        timing.bytes_received = response.num_bytes_downloaded
        timing.text = st.text()
        finished = st.done or timing.finish_reason is not None

        if problem is not None and finished and problem[0] in (ErrorKind.READ_TIMEOUT, ErrorKind.STREAM_CUT):
            # The answer was complete; only the end of the body was late or missing.
            timing.total_ms = st.last_event_ms
            problem = None
        if timing.error is not None:  # an error event in the stream
            pass
        elif problem is not None:
            timing.error, timing.error_detail = problem
        elif st.valid == 0 and st.malformed:
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = (
                f"no valid JSON chunk in the event stream ({st.malformed} malformed; "
                f"content type {ctype or 'none'})"
            )
        elif st.valid == 0 and not st.done:
            timing.error = ErrorKind.STREAM_CUT if ctype == "text/event-stream" else ErrorKind.BAD_BODY
            timing.error_detail = f"the stream ended before its first event (content type {ctype or 'none'})"
        elif not finished:
            timing.error = ErrorKind.STREAM_CUT
            timing.error_detail = (
                f"the stream ended after {st.valid} chunks without [DONE] or a finish_reason"
            )
        if timing.error is None and st.malformed:
            timing.error_detail = f"{st.malformed} malformed data line(s) ignored"
        if timing.total_ms is None:
            timing.total_ms = _ms(time.perf_counter() - t0)
        if timing.error is None and timing.ttft_ms is None and st.finish_ms is not None and timing.completion_tokens:
            # No chunk showed a token, yet the server finished and counts them (usage): its
            # tokens came out with the finishing chunk (an empty ``delta: {}`` closing a held-back one).
            timing.ttft_ms = st.finish_ms
            timing.token_times_ms.append(st.finish_ms)
        _tokens_from_headers(timing)

    def _on_event(self, event: SSEEvent, now_ms: float, timing: RequestTiming, st: _StreamState) -> None:
        data = event.data.strip()
        if data == "[DONE]":
            st.done = True
            st.last_event_ms = now_ms
            return
        try:
            obj = json.loads(data)
        except ValueError:
            st.malformed += 1
            return
        if not isinstance(obj, dict):
            st.malformed += 1
            return
        st.valid += 1
        st.last_event_ms = now_ms
        if obj.get("error") or event.event == "error":
            if timing.error is None:
                timing.error = ErrorKind.OTHER
                message = _error_message(obj) or data[:TEXT_KEEP_CHARS]
                timing.error_detail = self.redactor.text(f"error event in the stream: {message}")[:300]
            return
        choices = obj.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(first, dict):
            choice = first
            delta = choice.get("delta")
            content: Any = None
            reasoning: Any = None
            if isinstance(delta, dict):
                content = delta.get("content")
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            elif isinstance(choice.get("text"), str):
                content = choice.get("text")
            token = False
            if isinstance(content, str) and content:
                timing.content_events += 1
                if timing.first_content_ms is None:
                    timing.first_content_ms = now_ms
                st.keep("content", content)
                token = True
            elif _empty_token_delta(delta, choice, first=timing.ttft_ms is None) and not reasoning:
                # llama.cpp sends one chunk per generated token; a byte-fallback token that does not
                # complete a UTF-8 character arrives as an empty content delta. It is still a token,
                # and so is vLLM's held-back first token that closes the answer.
                timing.content_events += 1
                token = True
            if isinstance(reasoning, str) and reasoning:
                timing.reasoning_events += 1
                if timing.first_reasoning_ms is None:
                    timing.first_reasoning_ms = now_ms
                st.keep("reasoning", reasoning)
                token = True
            if token:
                timing.token_times_ms.append(now_ms)
                if timing.ttft_ms is None:
                    timing.ttft_ms = now_ms
            if choice.get("finish_reason"):
                timing.finish_reason = str(choice["finish_reason"])
                if st.finish_ms is None:
                    st.finish_ms = now_ms
        self._apply_usage(obj, timing)

    @staticmethod
    def _apply_usage(obj: dict[str, Any], timing: RequestTiming) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            if (n := _int(usage.get("prompt_tokens"))) is not None:
                timing.prompt_tokens = n
            if (n := _int(usage.get("completion_tokens"))) is not None:
                timing.completion_tokens = n
        timings = obj.get("timings")  # llama.cpp server
        if isinstance(timings, dict):
            for key, value in timings.items():
                if (v := _num(value)) is not None and not isinstance(value, str):
                    timing.server_timing[f"llamacpp.{key}"] = v
            # The last timings object sent wins (llama.cpp may send one per chunk).
            timing.server_clocks = [c for c in timing.server_clocks if not c.source.startswith("timings.")]
            timing.server_clocks.extend(llamacpp_clocks(timings))

    def _apply_final(self, obj: Any, timing: RequestTiming) -> None:
        """Non-streamed completion: ttft_ms = total_ms, since nothing earlier is observable."""
        if not isinstance(obj, dict):
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = "expected a JSON object"
            return
        if obj.get("error"):
            timing.error = ErrorKind.OTHER
            timing.error_detail = self.redactor.text(f"error in the response: {_error_message(obj)}")[:300]
            return
        choices = obj.get("choices")
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = "no choices in the completion response"
            return
        choice = choices[0]
        message = choice.get("message")
        content: Any = choice.get("text")
        reasoning: Any = None
        if isinstance(message, dict):
            content = message.get("content")
            reasoning = message.get("reasoning_content") or message.get("reasoning")
        text = content if isinstance(content, str) and content else reasoning
        timing.text = text[:TEXT_KEEP_CHARS] if isinstance(text, str) else ""
        if choice.get("finish_reason"):
            timing.finish_reason = str(choice["finish_reason"])
        self._apply_usage(obj, timing)
        # Nothing before the end of the body is observable without streaming.
        timing.ttft_ms = timing.total_ms
        _tokens_from_headers(timing)
