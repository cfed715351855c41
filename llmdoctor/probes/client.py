"""The timed, budgeted HTTP client: every request llmdoctor sends to the endpoint goes through it.

One `ProbeClient` per run (`ProbeClient.for_run`; its bounds a typed `ClientSettings`), made of
layers (`llmdoctor.probes.transports`, each an ``httpx.BaseTransport`` over an injected one) and
a reader that interprets what comes back (`llmdoctor.probes.stream_reader`). Each request

- counts against a budget (`max_requests`); `BudgetExhausted` is raised *before* sending; in
  strict mode, a probe that sends more than its declared plan raises `PlanExceeded`;
- is timed phase by phase on the injected `Clock` from where it reaches the network
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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from llmdoctor import __version__
from llmdoctor.analysis.clocks import header_clocks
from llmdoctor.measurements.client_host import LagSampler
from llmdoctor.measurements.timing import ErrorKind, RequestTiming
from llmdoctor.probes.client_settings import DEFAULT_MAX_BODY_BYTES, ClientSettings
from llmdoctor.probes.clock import SYSTEM_CLOCK, Clock
from llmdoctor.probes.errors import (
    BodyStop,
    BudgetExhausted,
    DeadlineReached,
    PlanExceeded,
    blame,
    classify,
    parse_retry_after,
)
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
from llmdoctor.probes.tls_context import ssl_context
from llmdoctor.probes.trace_ids import IDS, new_ids
from llmdoctor.probes.transports import (
    LABEL,
    MAX_RETRY_AFTER_S,
    NETWORK_START,
    RETRY,
    Attempt,
    BudgetTransport,
    DeadlineTransport,
    Retry,
    RetryTransport,
    TimingTransport,
    attempt_of,
    drop_connection,
    origin_transports,
)
from llmdoctor.proxies import carries_credentials
from llmdoctor.redact import Redactor, mask_secret, redact_headers
from llmdoctor.target import ClientSetupError, Target

if TYPE_CHECKING:
    from llmdoctor.options import Options

__all__ = [
    "ClientSettings",
    "ProbeClient",
    "BudgetExhausted",
    "ClientSetupError",
    "DeadlineReached",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_RETRY_AFTER_S",
    "PlanExceeded",
    "USER_AGENT",
    "parse_retry_after",
]

USER_AGENT = f"llmdoctor/{__version__}"
ERROR_BODY_READ_BYTES = 64 << 10
# After ``data: [DONE]`` the server should end the body at once; wait this long for the end
# (so the connection stays reusable) before giving up on it without an error.
DONE_GRACE_S = 1.0
# Request extension: how the client reads the answer ("sse", "completion", "json", "text").
_MODE = "llmdoctor.mode"
_BACKOFF_STATUSES = (429, 503)


class ProbeClient:
    """Timed, budgeted, redacting HTTP client for one endpoint (a context manager).

    `on_request` is called with every finished `RequestTiming`; `history` keeps them all.
    """

    def __init__(
        self,
        target: Target,
        settings: ClientSettings,
        *,
        on_request: Callable[[RequestTiming], None] | None = None,
        before_send: Callable[[], None] | None = None,
        lag: LagSampler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        transport: httpx.BaseTransport | None = None,
        plan: Callable[[], tuple[str, int] | None] | None = None,
    ) -> None:
        """`settings`: the client's bounds and network (`ClientSettings`); `lag`: the run's lag
        sampler, whose worst lag during each request is stamped on it.

        `transport`: the network layer under the client's own (default: an ``httpx.HTTPTransport``
        per origin, direct or through its proxy). `plan` names the probe sending now and the
        requests it declared (enforced with ``settings.strict``). Raises `ClientSetupError` when
        the client cannot be built.
        """
        self.target = target
        self.settings = settings
        self.lag = lag
        self.clock = clock
        self.timeout_s = float(settings.timeout_s)
        self.deadline_at = settings.deadline_at
        self.max_requests = int(settings.max_requests)
        self.max_body_bytes = int(settings.max_body_bytes)
        self.on_request = on_request
        self.history: list[RequestTiming] = []

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
        self._ssl_context = ssl_context(settings.insecure, settings.ca_bundle)
        connect_s = min(self.timeout_s, 10.0)
        self.route, network = origin_transports(target.base_url, list(settings.other_origins),
                                                verify=self._ssl_context, trust_env=settings.trust_env,
                                                credentials=carries_credentials(target))
        if transport is None:
            transport = network
        else:
            network.close()  # built only to check the route (a proxy the client cannot use fails here)
        self._budget = BudgetTransport(
            DeadlineTransport(TimingTransport(transport, clock), timeout_s=self.timeout_s, clock=clock,
                              deadline_at=self.deadline_at),
            max_requests=self.max_requests, clock=clock, time_left=self.time_left,
            before_send=before_send, plan=plan, strict=settings.strict)
        stack = RetryTransport(self._budget, clock=clock, timeout_s=self.timeout_s, discard=self._discard)
        try:
            self._client = httpx.Client(
                # Latin-1, as HTTP/1.1 carries header values (httpx would encode str values as ASCII).
                headers={name.encode("ascii"): value.encode("latin-1") for name, value in headers.items()},
                timeout=httpx.Timeout(self.timeout_s, connect=connect_s),
                follow_redirects=False,
                transport=stack,
                trust_env=settings.trust_env,
            )
            # Warm the request-building path (URL parsing, header encoding) without sending anything.
            self._client.build_request("POST", self._url("/", False), content=b"{}")
        except (httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
            raise ClientSetupError(self.redactor.text(f"cannot build the HTTP client: {exc}")) from None

    @classmethod
    def for_run(
        cls,
        target: Target,
        options: Options,
        *,
        max_requests: int | None = None,
        deadline_at: float | None = None,
        strict: bool = False,
        on_request: Callable[[RequestTiming], None] | None = None,
        before_send: Callable[[], None] | None = None,
        lag: LagSampler | None = None,
        plan: Callable[[], tuple[str, int] | None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> ProbeClient:
        """The client of a run with these options (`ClientSettings.of`), with the run's hooks.

        Used by the CLI's preflight (``max_requests=1``, to fail fast on a client that cannot be
        built) and by `Context.client`.
        """
        return cls(target, ClientSettings.of(options, max_requests=max_requests, deadline_at=deadline_at,
                                             strict=strict),
                   on_request=on_request, before_send=before_send, lag=lag, plan=plan, transport=transport)

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
        return self._budget.sent

    @property
    def budget_left(self) -> int:
        """Requests that may still be sent."""
        return self._budget.left

    @property
    def requests_by_probe(self) -> dict[str, int]:
        """Requests each probe sent (retries aside), when the client knows the sending probe."""
        return dict(self._budget.per_probe)

    def time_left(self) -> float | None:
        """Seconds left before the run's deadline (None without one; never negative)."""
        if self.deadline_at is None:
            return None
        return max(0.0, self.deadline_at - self.clock.now())

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
        content = None if body is None else json.dumps(body).encode()
        url = path if absolute else self._url(path, root)
        extra_headers = {"Content-Type": "application/json"} if content is not None else {}
        if mode == "sse":
            extra_headers["Accept"] = "text/event-stream"
        # Ids for the server's logs and traces, fresh per request (a retry gets its own: RetryTransport);
        # a user's own --header wins.
        ids = new_ids()
        extra_headers.update({k: v for k, v in ids.headers().items() if k.lower() not in self._user_headers})
        request = self._client.build_request(method, url, content=content, headers=extra_headers,
                                             extensions={_MODE: mode, LABEL: f"{method} {path}", IDS: ids})
        if anonymous:
            for name in self._credential_headers:
                request.headers.pop(name, None)
        try:
            response = self._client.send(request, stream=True)
        except (BudgetExhausted, PlanExceeded):
            raise  # nothing was sent
        except Exception as exc:  # never let endpoint trouble escape as an exception
            return self._record(request, None, exc)
        return self._record(request, response, None)

    def _discard(self, request: httpx.Request, response: httpx.Response | None, exc: Exception | None) -> None:
        """An attempt that is not the answer (it is retried): recorded like any other."""
        self._record(request, response, exc, discarded=True)

    def _record(self, request: httpx.Request, response: httpx.Response | None,
                exc: BaseException | None, *, discarded: bool = False) -> tuple[RequestTiming, Any]:
        """The `RequestTiming` of the request's current attempt (and its payload); into `history`."""
        mode = str(request.extensions.get(_MODE, "json"))
        retry = request.extensions.get(RETRY)
        attempt = attempt_of(request) or Attempt(self.clock, t0=self.clock.now(), wall0=self.clock.wall())
        # The URL path as sent ("/v1/models"), without a query string that could hold a secret.
        timing = RequestTiming(method=request.method, path=request.url.path, streamed=(mode == "sse"),
                               retried=isinstance(retry, Retry))
        timing.request_id = request.headers.get("x-request-id", "")
        timing.traceparent = request.headers.get("traceparent", "")
        payload: Any = None
        t0 = attempt.t0
        try:
            timing.started_at = attempt.wall0
            if exc is not None:
                timing.error, timing.error_detail = self._failure(exc, attempt)
            # The clock starts where the request reaches the network (TCP connect, or its first
            # header byte on a pooled connection), not before httpx's own Python work (pool
            # lookup, ~0.2 ms), which curl does not pay and which is no part of the endpoint.
            net = min((attempt.marks[k] for k in NETWORK_START if k in attempt.marks), default=t0)
            timing.started_at += net - t0
            t0 = net
            if response is not None:
                payload = self._handle_response(response, timing, t0, attempt, mode)
        except Exception as err:  # never let endpoint trouble escape as an exception
            timing.error = ErrorKind.OTHER
            timing.error_detail = f"{type(err).__name__}: {err}"
        finally:
            end = self.clock.now()
            if response is not None:
                if timing.error == ErrorKind.STREAM_CUT:  # a broken answer: never reuse its connection
                    drop_connection(response)
                try:
                    response.close()
                except Exception:  # closing a broken connection is not news
                    pass
            self._fill_phases(timing, attempt.marks, t0)
            if timing.total_ms is None and t0:
                timing.total_ms = ms(end - t0)
            if self.lag is not None and t0:
                timing.client_lag_ms = round(self.lag.worst_between(t0, end), 3)
            if isinstance(retry, Retry) and retry.reason == "backoff" and timing.status in _BACKOFF_STATUSES:
                timing.error_detail = (f"{timing.error_detail} (also after waiting {retry.wait_s:g} s as "
                                       f"Retry-After asked; first answer: HTTP {retry.first_status})")
            if not timing.ok:
                blame(timing, exc, run_deadline=attempt.run_deadline and attempt.expired(),
                      stale=discarded and timing.status is None, proxied=self.route.proxy is not None)
            timing.error_detail = self.redactor.text(timing.error_detail)[:500]
            timing.text = self.redactor.text(timing.text)
            self.history.append(timing)
        if self.on_request is not None:
            self.on_request(timing)
        return timing, payload

    def _failure(self, exc: BaseException, attempt: Attempt) -> tuple[str, str]:
        """The error kind and detail of a request that raised (`attempt.cut`: its deadline passed)."""
        if attempt.cut:
            return ErrorKind.READ_TIMEOUT, self._timeout_detail(attempt)
        if isinstance(exc, httpx.HTTPError):
            return classify(exc)
        return ErrorKind.OTHER, f"{type(exc).__name__}: {exc}"

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
        attempt: Attempt,
        mode: str,
    ) -> Any:
        now = self.clock.now()
        hdr_t = attempt.marks.get("http11.receive_response_headers.complete", now)
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
            data, _ = self._read_all(response, attempt, limit=ERROR_BODY_READ_BYTES, truncate=True)
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
            timing.total_ms = ms(self.clock.now() - t0)
            return None

        if mode == "sse" and ctype == "application/json":
            # The server ignored stream=true and answered with one JSON document.
            timing.streamed = False
            mode = "completion"
        if mode == "sse" and ctype == "text/html":
            data, _ = self._read_all(response, attempt, limit=ERROR_BODY_READ_BYTES, truncate=True)
            timing.error = ErrorKind.BAD_BODY
            timing.error_detail = self.redactor.text(
                f"expected an event stream, got {ctype} (a proxy or login page?): {snippet(data, self.redactor)}"
            )[:300]
            timing.total_ms = ms(self.clock.now() - t0)
            return None
        if mode == "sse":
            self._read_stream(response, timing, t0, attempt, ctype)
            return None

        data, problem = self._read_all(response, attempt, limit=self.max_body_bytes)
        timing.total_ms = ms(self.clock.now() - t0)
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

    def _chunks(self, response: httpx.Response, attempt: Attempt, limit: int) -> Iterator[tuple[bytes, float]]:
        """Body chunks with their arrival time; `BodyStop` on the wall deadline or the size limit."""
        total = 0
        for data in response.iter_bytes():
            now = self.clock.now()
            total += len(data)
            if now > attempt.deadline:  # the deadline may be shortened after [DONE]
                raise BodyStop(ErrorKind.READ_TIMEOUT, self._timeout_detail(attempt))
            if total > limit:
                raise BodyStop(ErrorKind.TOO_LARGE, f"response body larger than {limit} bytes")
            yield data, now

    def _timeout_detail(self, attempt: Attempt) -> str:
        if attempt.run_deadline:
            return "no complete response before the run's deadline (--deadline)"
        return f"no complete response within {self.timeout_s:g} s"

    def _cut(self, exc: httpx.HTTPError, attempt: Attempt) -> tuple[str, str]:
        """A transport error while reading a body: the watchdog at the deadline, or the other side."""
        if attempt.cut:
            return ErrorKind.READ_TIMEOUT, self._timeout_detail(attempt)
        return classify(exc)

    def _read_all(
        self, response: httpx.Response, attempt: Attempt, *, limit: int, truncate: bool = False
    ) -> tuple[bytes, tuple[str, str] | None]:
        """Read a whole body; with `truncate`, stop quietly at `limit` (for error bodies)."""
        parts: list[bytes] = []
        size = 0
        try:
            for data, _ in self._chunks(response, attempt, limit if not truncate else 1 << 62):
                parts.append(data)
                size += len(data)
                if truncate and size >= limit:
                    break
        except BodyStop as stop:
            return b"".join(parts), (stop.kind, stop.detail)
        except httpx.HTTPError as exc:
            kind, detail = self._cut(exc, attempt)
            return b"".join(parts), (kind, "while reading the body: " + detail)
        return b"".join(parts)[: limit if truncate else None], None

    def _read_stream(
        self, response: httpx.Response, timing: RequestTiming, t0: float, attempt: Attempt, ctype: str
    ) -> None:
        def on_done(at: float) -> None:
            # Wait briefly for the end of the body, which keeps the connection reusable.
            attempt.shorten(at + DONE_GRACE_S)

        def cut(exc: httpx.HTTPError) -> tuple[str, str]:
            kind, detail = self._cut(exc, attempt)
            if kind == ErrorKind.PROTOCOL:
                kind = ErrorKind.STREAM_CUT
            return kind, "while streaming: " + detail

        read_stream(self._chunks(response, attempt, self.max_body_bytes), timing, t0, ctype, self.redactor,
                    now=self.clock.now, on_done=on_done, cut=cut)
        timing.bytes_received = response.num_bytes_downloaded
