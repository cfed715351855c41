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

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from llmdoctor import __version__
from llmdoctor.clocks import header_clocks
from llmdoctor.probes.errors import BodyStop, BudgetExhausted, DeadlineReached, classify, parse_retry_after
from llmdoctor.probes.lag import LagSampler
from llmdoctor.probes.stream_reader import (
    apply_completion,
    error_message,
    generation_body,
    header_timings,
    ms,
    peer,
    read_stream,
    snippet,
)
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
ERROR_BODY_READ_BYTES = 64 << 10
# After ``data: [DONE]`` the server should end the body at once; wait this long for the end
# (so the connection stays reusable) before giving up on it without an error.
DONE_GRACE_S = 1.0
# The longest Retry-After (seconds) the client honours with its one retry; longer: no retry.
MAX_RETRY_AFTER_S = 10.0
# A request is not started with less time than this left before the run's deadline.
MIN_REQUEST_S = 0.05
_BACKOFF_STATUSES = (429, 503)
# httpcore trace events that mark a request's first contact with the network.
_NETWORK_START = ("connection.connect_tcp.started", "http11.send_request_headers.started")
#: The largest CA bundle read (Mozilla's whole bundle is ~200 KiB).
MAX_CA_BUNDLE_BYTES = 16 << 20
_ssl_lock = threading.Lock()
_ssl_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}



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
        body = generation_body(self.target.model, {"messages": messages}, max_tokens, stream, extra)
        mode = "sse" if stream else "completion"
        timing, _ = self._request("POST", "/chat/completions", mode=mode, body=body)
        return timing

    def completion(
        self, prompt: str, *, max_tokens: int, stream: bool = True, extra: dict[str, Any] | None = None
    ) -> RequestTiming:
        """POST ``/completions`` (legacy text completion); see `chat` for `extra`."""
        body = generation_body(self.target.model, {"prompt": prompt}, max_tokens, stream, extra)
        timing, _ = self._request("POST", "/completions", mode="sse" if stream else "completion", body=body)
        return timing

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
                timing.error, timing.error_detail = classify(exc)
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
                timing.total_ms = ms(end - t0)
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
            return ms(b - a) if a is not None and b is not None else None

        timing.connect_ms = span("connection.connect_tcp")
        timing.tls_ms = span("connection.start_tls")
        if (t := marks.get("http11.send_request_body.complete")) is not None:
            timing.sent_ms = ms(t - t0)
        headers_done = marks.get("http11.receive_response_headers.complete")
        if timing.ttfb_ms is None and headers_done is not None:
            timing.ttfb_ms = ms(headers_done - t0)
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
        timing.ttfb_ms = ms(hdr_t - t0)
        timing.status = response.status_code
        timing.http_version = response.http_version
        timing.peer = peer(response)
        timing.response_headers = self.redactor.obj(redact_headers(response.headers))
        timing.server_timing.update(header_timings(response.headers))
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
                message = error_message(json.loads(data))
            except ValueError:
                pass
            if message is None:
                message = snippet(data, self.redactor) or response.reason_phrase
            timing.error = ErrorKind.HTTP_STATUS
            # Redact before truncating, so a cut can never leave half a key behind.
            timing.error_detail = self.redactor.text(f"HTTP {response.status_code}: {message}")[:300]
            timing.total_ms = ms(time.perf_counter() - t0)
            return None

        if mode == "sse" and ctype == "application/json":
            # The server ignored stream=true and answered with one JSON document.
            timing.streamed = False
            mode = "completion"
        if mode == "sse" and ctype == "text/html":
            data, _ = self._read_all(response, deadline, limit=ERROR_BODY_READ_BYTES, truncate=True)
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = self.redactor.text(
                f"expected an event stream, got {ctype} (a proxy or login page?): {snippet(data, self.redactor)}"
            )[:300]
            timing.total_ms = ms(time.perf_counter() - t0)
            return None
        if mode == "sse":
            self._read_stream(response, timing, t0, deadline, ctype)
            return None

        data, problem = self._read_all(response, deadline, limit=self.max_body_bytes)
        timing.total_ms = ms(self._arrival() - t0)
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
                f"expected JSON, got {ctype or 'no content type'}: {snippet(data, self.redactor)}"
            )[:300]
            return None
        if mode == "completion":
            apply_completion(obj, timing, self.redactor)
        return obj

    def _chunks(self, response: httpx.Response, deadline: float, limit: int) -> Iterator[tuple[bytes, float]]:
        """Body chunks with their arrival time; `_Stop` on the wall deadline or the size limit."""
        total = 0
        for data in response.iter_bytes():
            now = self._arrival()
            total += len(data)
            if now > (self._deadline.at or deadline):  # the deadline may be shortened after [DONE]
                raise BodyStop(ErrorKind.READ_TIMEOUT, self._timeout_detail(deadline))
            if total > limit:
                raise BodyStop(ErrorKind.TOO_LARGE, f"response body larger than {limit} bytes")
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
        except BodyStop as stop:
            return b"".join(parts), (stop.kind, stop.detail)
        except httpx.HTTPError as exc:
            kind, detail = classify(exc)
            return b"".join(parts), (kind, "while reading the body: " + detail)
        return b"".join(parts)[: limit if truncate else None], None

    def _read_stream(
        self, response: httpx.Response, timing: RequestTiming, t0: float, deadline: float, ctype: str
    ) -> None:
        def on_done(at: float) -> None:
            # Wait briefly for the end of the body, which keeps the connection reusable.
            self._deadline.at = min(deadline, at + DONE_GRACE_S)

        def cut(exc: httpx.HTTPError) -> tuple[str, str]:
            kind, detail = classify(exc)
            if kind == ErrorKind.PROTOCOL:
                kind = ErrorKind.STREAM_CUT
            return kind, "while streaming: " + detail

        read_stream(self._chunks(response, deadline, self.max_body_bytes), timing, t0, ctype, self.redactor,
                    now=self._arrival, on_done=on_done, cut=cut)
        timing.bytes_received = response.num_bytes_downloaded
