"""The probe client's layers, the httpx way: `httpx.BaseTransport` wrappers stacked over an injected transport.

From the client down, one concern per layer (each sees an `httpx.Request`, returns an
`httpx.Response` or raises):

- `RetryTransport`: a pooled keep-alive connection the server closed while idle is retried once
  on a new one; a 429/503 with a short ``Retry-After`` is waited out and retried once per run;
- `BudgetTransport`: the run's time and request budgets (`DeadlineReached`, `BudgetExhausted`,
  both raised *before* sending), a shared rate limit (`before_send`), and in strict mode each
  probe's declared plan (`PlanExceeded`);
- `DeadlineTransport`: each request's wall-clock deadline (``timeout_s``, at most the time left
  to the run): it caps the request's ``timeout`` extension, and a `Watchdog` shuts the
  connection down when the deadline passes while the response is still coming (httpx's
  timeouts are per read: a server dripping a byte a second would otherwise never time out);
- `TimingTransport`: stamps the attempt with the injected `Clock` (when it was sent, httpcore's
  trace events) and keeps the connection's network stream for the watchdog;
- the injected transport (an ``httpx.HTTPTransport``, direct or through a proxy; a mock in tests).

Every sending of a request is one `Attempt`, kept in the request's extensions under `ATTEMPT`.
"""

from __future__ import annotations

import math
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from llmdoctor.measurements.timing import ErrorKind
from llmdoctor.probes.clock import Clock
from llmdoctor.probes.errors import BudgetExhausted, DeadlineReached, PlanExceeded, classify, parse_retry_after
from llmdoctor.probes.trace_ids import IDS, RequestIds
from llmdoctor.proxies import Route
from llmdoctor.target import ClientSetupError

__all__ = [
    "ATTEMPT",
    "LABEL",
    "MAX_RETRY_AFTER_S",
    "MIN_REQUEST_S",
    "NETWORK_START",
    "RETRY",
    "Attempt",
    "BudgetTransport",
    "DeadlineTransport",
    "OriginRouter",
    "Retry",
    "RetryTransport",
    "TimingTransport",
    "Watchdog",
    "attempt_of",
    "drop_connection",
    "origin_transports",
]

#: Request extension holding the current `Attempt`.
ATTEMPT = "llmdoctor.attempt"
#: Request extension set by `RetryTransport` on the request it sends again (a `Retry`).
RETRY = "llmdoctor.retry"
#: Request extension naming the request in budget messages ("POST /chat/completions").
LABEL = "llmdoctor.label"
# The request's own timeouts, before `DeadlineTransport` capped them.
_TIMEOUT = "llmdoctor.timeout"
# The longest Retry-After (seconds) the client honours with its one retry; longer: no retry.
MAX_RETRY_AFTER_S = 10.0
# A request is not started with less time than this left before the run's deadline.
MIN_REQUEST_S = 0.05
_BACKOFF_STATUSES = (429, 503)
#: httpcore trace events that mark a request's first contact with the network.
NETWORK_START = ("connection.connect_tcp.started", "http11.send_request_headers.started")
_STREAM_EVENTS = ("connection.connect_tcp.complete", "connection.start_tls.complete")


@dataclass
class Retry:
    """Why a request is sent again: ``stale`` (a dropped idle connection) or ``backoff`` (Retry-After)."""

    reason: str
    wait_s: float = 0.0
    first_status: int | None = None


@dataclass
class Attempt:
    """One sending of a request, as the layers saw it (instants on the client's `Clock`)."""

    clock: Clock
    #: When it was handed to the network layers, and the epoch time then.
    t0: float = 0.0
    wall0: float = 0.0
    #: When it must be over: ``timeout_s`` after `t0`, or the run's deadline if sooner.
    deadline: float = math.inf
    #: Whether `deadline` is the run's (``--deadline``) rather than the request's ``timeout_s``.
    run_deadline: bool = False
    #: httpcore trace events (``connection.connect_tcp.started``, ...) and when each came.
    marks: dict[str, float] = field(default_factory=dict)
    #: The connection's network stream, once known (the watchdog shuts it down).
    stream: Any = None
    #: The watchdog shut the connection down: the deadline passed mid-response.
    cut: bool = False
    on_change: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def reused(self) -> bool:
        """Whether it went out on a pooled connection (no TCP connect of its own)."""
        marks = self.marks
        return "connection.connect_tcp.started" not in marks and "http11.send_request_headers.started" in marks

    def expired(self) -> bool:
        """Whether its deadline has passed."""
        return self.clock.now() > self.deadline

    def shorten(self, at: float) -> None:
        """End it by `at` at the latest (after ``[DONE]``, only a short wait for the end of the body)."""
        self.deadline = min(self.deadline, at)
        if self.on_change is not None:
            self.on_change()

    def shut_down(self) -> None:
        """Shut the connection down (from the watchdog): the blocked read returns at once."""
        stream = self.stream
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        self.cut = True  # before the shutdown: the reader wakes at once and asks why
        try:
            # socket.socket's own shutdown, also for a TLS socket (SSLSocket's drops its SSL object).
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            self.cut = False


def drop_connection(response: httpx.Response) -> None:
    """Shut the connection `response` came on down, so that the pool never sends on it again.

    For an answer that broke although its HTTP framing ended (a 2xx event stream that ends before its
    first event): the server's state on that connection is unknown. llama-cpp-python 0.3.36 raises
    inside such a stream and uvicorn resets the connection a moment later; a next request sent on it
    first would fail as "a pooled connection dropped in between" (the path's), then be retried. Shut
    down, the socket reads as closed and the pool opens a new connection instead.
    """
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:  # already closed by the other side: the pool sees that by itself
            pass


def attempt_of(request: httpx.Request) -> Attempt | None:
    """The request's current `Attempt` (None before it reached the layers)."""
    attempt = request.extensions.get(ATTEMPT)
    return attempt if isinstance(attempt, Attempt) else None


class Watchdog:
    """One thread that shuts down the connection of each attempt still running at its deadline."""

    def __init__(self, clock: Clock, *, poll_s: float = 0.25) -> None:
        self.clock = clock
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._armed: dict[int, Attempt] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, attempt: Attempt) -> None:
        """Watch `attempt` until `disarm`."""
        attempt.on_change = self._poke
        with self._cond:
            self._armed[id(attempt)] = attempt
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="llmdoctor-deadline", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self, attempt: Attempt) -> None:
        """Stop watching `attempt` (before its connection goes back to the pool)."""
        with self._cond:
            self._armed.pop(id(attempt), None)

    def close(self) -> None:
        """Stop the thread."""
        with self._cond:
            self._closed = True
            self._armed.clear()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _poke(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = self.clock.now()
                for key, attempt in list(self._armed.items()):
                    if attempt.deadline <= now:
                        del self._armed[key]
                        attempt.shut_down()
                wait = min((a.deadline - now for a in self._armed.values()), default=None)
                # Waits are capped (`poll_s`) so that an injected clock's jumps are seen too.
                self._cond.wait(None if wait is None else min(max(wait, 0.001), self.poll_s))


class _Disarming(httpx.SyncByteStream):
    """A response body that disarms the watchdog before the connection goes back to the pool."""

    def __init__(self, inner: Any, done: Callable[[], None]) -> None:
        self._inner = inner
        self._done = done

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        self._done()
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class OriginRouter(httpx.BaseTransport):
    """The transport of each origin: `routes` by ``(scheme, host, port)``, `default` for the rest."""

    def __init__(self, default: httpx.BaseTransport,
                 routes: dict[tuple[str, str, int], httpx.BaseTransport] | None = None) -> None:
        self.default = default
        self.routes = dict(routes or {})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` on its origin's transport."""
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        return self.routes.get(key, self.default).handle_request(request)

    def close(self) -> None:
        """Close every transport."""
        for transport in (self.default, *self.routes.values()):
            transport.close()


def origin_transports(base_url: str, others: list[str | None], *, verify: ssl.SSLContext, trust_env: bool,
                      credentials: bool) -> tuple[Route, OriginRouter]:
    """The endpoint's route and transport (direct or through its proxy), and one per other origin.

    `others`: URLs on other origins the run will GET (a metrics exporter); `credentials`:
    whether the endpoint's requests carry some (a proxy may be chosen by that, `proxies.route_for`).
    Raises `ClientSetupError` for a proxy the client cannot use.
    """
    from llmdoctor.proxies import ProxyError, ProxySettings, proxy_transport, route_for

    options: dict[str, Any] = {"verify": verify, "http1": True, "http2": False, "trust_env": trust_env}

    def route(scheme: str, host: str, port: int, creds: bool) -> Route:
        return route_for(scheme, host, port, credentials=creds) if trust_env else Route(None, ProxySettings())

    origin = urlsplit(base_url)
    own = (origin.scheme, origin.hostname or "", origin.port or (443 if origin.scheme == "https" else 80))
    own_route = route(*own, credentials)
    try:
        transport = proxy_transport(own_route, **options)
        routes: dict[tuple[str, str, int], httpx.BaseTransport] = {}
        for url in others:
            if not url or "://" not in url:
                continue  # a path on the endpoint's own origin
            other = urlsplit(url)
            key = (other.scheme, other.hostname or "", other.port or (443 if other.scheme == "https" else 80))
            if key == own or other.scheme not in ("http", "https"):
                continue
            routes[key] = proxy_transport(route(*key, False), **options)
    except ProxyError as exc:
        raise ClientSetupError(str(exc)) from None
    return own_route, OriginRouter(transport, routes)


class TimingTransport(httpx.BaseTransport):
    """Stamps each attempt: when it was sent, every httpcore trace event, the connection's stream."""

    def __init__(self, inner: httpx.BaseTransport, clock: Clock) -> None:
        self.inner = inner
        self.clock = clock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the inner transport, stamping its `Attempt`."""
        attempt = attempt_of(request)
        if attempt is None:
            attempt = Attempt(self.clock)
            request.extensions[ATTEMPT] = attempt
        outer = request.extensions.get("trace")
        clock = self.clock

        def trace(name: str, info: dict[str, Any]) -> None:
            attempt.marks.setdefault(name, clock.now())
            if name in _STREAM_EVENTS and info.get("return_value") is not None:
                attempt.stream = info["return_value"]
            if outer is not None:
                outer(name, info)

        request.extensions["trace"] = trace
        attempt.wall0 = clock.wall()
        attempt.t0 = clock.now()
        try:
            response = self.inner.handle_request(request)
        finally:
            request.extensions["trace"] = outer
            if outer is None:
                del request.extensions["trace"]
        stream = response.extensions.get("network_stream")
        if stream is not None:
            attempt.stream = stream
        return response

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()


class DeadlineTransport(httpx.BaseTransport):
    """Each request ends by ``timeout_s`` after it was sent, or by the run's deadline if sooner."""

    def __init__(self, inner: httpx.BaseTransport, *, timeout_s: float, clock: Clock,
                 deadline_at: float | None = None, watchdog: Watchdog | None = None) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.deadline_at = deadline_at
        self.clock = clock
        self.watchdog = watchdog if watchdog is not None else Watchdog(clock)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` with its timeouts capped at the time left; shut its connection at the deadline."""
        attempt = attempt_of(request)
        if attempt is None:
            attempt = Attempt(self.clock)
            request.extensions[ATTEMPT] = attempt
        now = self.clock.now()
        attempt.deadline = now + self.timeout_s
        if self.deadline_at is not None and self.deadline_at <= attempt.deadline:
            attempt.deadline, attempt.run_deadline = self.deadline_at, True
        left = max(0.0, attempt.deadline - now)
        own = request.extensions.setdefault(_TIMEOUT, dict(request.extensions.get("timeout") or {}))
        request.extensions["timeout"] = {k: left if v is None else min(float(v), left) for k, v in own.items()} or {
            "connect": left, "read": left, "write": left, "pool": left}
        self.watchdog.arm(attempt)
        try:
            response = self.inner.handle_request(request)
        except BaseException:
            self.watchdog.disarm(attempt)
            raise
        response.stream = _Disarming(response.stream, lambda: self.watchdog.disarm(attempt))
        return response

    def close(self) -> None:
        """Stop the watchdog and close the inner transport."""
        self.watchdog.close()
        self.inner.close()


class BudgetTransport(httpx.BaseTransport):
    """The run's budgets, checked before anything is sent: time, requests and (strict) each probe's plan.

    `plan` names the probe now sending and the requests it declared (None: no probe, or no plan);
    in `strict` mode a probe's request beyond its plan raises `PlanExceeded`. Retries
    (`RETRY`) count against the budget, not against the plan.
    """

    def __init__(self, inner: httpx.BaseTransport, *, max_requests: int, clock: Clock,
                 time_left: Callable[[], float | None] = lambda: None,
                 before_send: Callable[[], None] | None = None,
                 plan: Callable[[], tuple[str, int] | None] | None = None, strict: bool = False) -> None:
        self.inner = inner
        self.clock = clock
        self.max_requests = max_requests
        self.time_left = time_left
        self.before_send = before_send
        self.plan = plan
        self.strict = strict
        #: Requests each probe sent, retries aside.
        self.per_probe: dict[str, int] = {}
        self._sent = 0
        self._lock = threading.Lock()

    @property
    def sent(self) -> int:
        """Requests started so far (every one counts, failed or not)."""
        return self._sent

    @property
    def left(self) -> int:
        """Requests that may still be sent."""
        return max(0, self.max_requests - self._sent)

    def can_start(self) -> bool:
        """Whether there is time left to start a request."""
        left = self.time_left()
        return left is None or left >= MIN_REQUEST_S

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Take one request from the budgets (or raise, sending nothing), then send it."""
        what = str(request.extensions.get(LABEL) or f"{request.method} {request.url.path}")
        if not self.can_start():
            raise DeadlineReached(f"the run's deadline has passed; not sending {what}")
        owner = self.plan() if self.plan is not None else None
        with self._lock:
            if self._sent >= self.max_requests:
                raise BudgetExhausted(f"request budget of {self.max_requests} spent; not sending {what}")
            if owner is not None and RETRY not in request.extensions:
                name, declared = owner
                count = self.per_probe.get(name, 0)
                if self.strict and count >= declared:
                    raise PlanExceeded(f"probe {name} sends {what} beyond its declared plan of {declared} "
                                       "request(s) (probes/catalog.py): declare it, or send fewer")
                self.per_probe[name] = count + 1
            self._sent += 1
        if self.before_send is not None:
            self.before_send()
        request.extensions[ATTEMPT] = Attempt(self.clock)
        return self.inner.handle_request(request)

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()


def _ids_of_retry(request: httpx.Request) -> None:
    """Give the retry of `request` ids of its own (`RequestIds.for_attempt`), where the ids it carried are
    the client's: a header the user set (``--header X-Request-Id: ...``) is sent again as it was."""
    ids = request.extensions.get(IDS)
    if not isinstance(ids, RequestIds):
        return
    sent, again = ids.headers(), ids.for_attempt(2).headers()
    for name, value in sent.items():
        if request.headers.get(name) == value:
            request.headers[name] = again[name]


class RetryTransport(httpx.BaseTransport):
    """Retries once what every HTTP client retries, and waits out one short ``Retry-After`` per run.

    `discard(request, response, exc)` is told of the attempt that is not the answer (the client
    records it: both attempts stay in its history and both count). Never without
    ``Retry-After``: the doctor reports rate limiting instead of hammering.
    """

    def __init__(self, inner: BudgetTransport, *, clock: Clock, timeout_s: float,
                 discard: Callable[[httpx.Request, httpx.Response | None, Exception | None], None]) -> None:
        self.inner = inner
        self.clock = clock
        self.timeout_s = timeout_s
        self.discard = discard
        self._backed_off = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request`; send it once more after a dropped idle connection or a short Retry-After."""
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError as exc:
            attempt = attempt_of(request)
            if (attempt is not None and attempt.reused and not attempt.cut and RETRY not in request.extensions
                    and classify(exc)[0] == ErrorKind.PROTOCOL and self.inner.left > 0 and self.inner.can_start()):
                # A pooled keep-alive connection that the server closed while it was idle (the
                # classic race when both sides use a ~5 s keep-alive): retried on a new connection.
                self.discard(request, None, exc)
                request.extensions[RETRY] = Retry("stale")
                _ids_of_retry(request)
                return self.inner.handle_request(request)
            raise
        if response.status_code in _BACKOFF_STATUSES and not self._backed_off and RETRY not in request.extensions:
            wait = self.backoff(response)
            if wait is not None:
                self._backed_off = True  # one back-off per run: a server that keeps refusing is reported
                self.discard(request, response, None)
                self.clock.sleep(wait)
                request.extensions[RETRY] = Retry("backoff", wait, response.status_code)
                _ids_of_retry(request)
                return self.inner.handle_request(request)
        return response

    def backoff(self, response: httpx.Response) -> float | None:
        """Seconds to wait before the one retry of a 429/503, or None for no retry.

        Only with a ``Retry-After`` of at most `MAX_RETRY_AFTER_S`, budget left, and time left
        before the run's deadline for the wait plus the request itself.
        """
        wait = parse_retry_after(response.headers.get("retry-after"))
        if wait is None or wait > MAX_RETRY_AFTER_S or self.inner.left <= 0:
            return None
        left = self.inner.time_left()
        if left is not None and wait + max(MIN_REQUEST_S, min(self.timeout_s, 1.0)) > left:
            return None
        return wait

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()
