"""What can stop a request, and how a failed request is named.

`BudgetExhausted` and `DeadlineReached` are raised *before* sending (the run's request and time
budgets); `PlanExceeded` when, in strict mode, a probe sends more requests than its declared
plan (a bug in the probe, never the endpoint's trouble). `classify` maps what httpx, httpcore
and the OS raised to an `ErrorKind` and a one-line detail.
"""

from __future__ import annotations

import errno
import socket
import ssl
import time
from collections.abc import Iterator

import httpx

from llmdoctor.measurements.timing import ErrorKind, FailedBy, RequestTiming

__all__ = ["BodyStop", "BudgetExhausted", "DeadlineReached", "PlanExceeded", "blame", "classify", "client_failure",
           "gateway_failure", "parse_retry_after"]


class BudgetExhausted(Exception):
    """The run's request budget (``--max-requests``) is spent; nothing was sent."""


class DeadlineReached(BudgetExhausted):
    """The run's deadline (``--deadline``) has passed; nothing was sent.

    A subclass of `BudgetExhausted`: time is the other budget, and every probe that stops
    cleanly on a spent request budget stops the same way on a spent time budget.
    """


class PlanExceeded(Exception):
    """Strict mode: a probe is about to send more requests than its declared plan; nothing was sent.

    Not a `BudgetExhausted`: no probe may stop on it quietly, the run (the test) fails.
    """


class BodyStop(Exception):
    """Stop reading a body with this error kind and detail (the wall deadline, the size limit)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


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


def chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and its causes and contexts, each once."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


_DNS_WORDS = ("name or service not known", "name resolution", "nodename nor servname",
              "no address associated", "getaddrinfo")


def classify(exc: BaseException) -> tuple[str, str]:
    """Map an httpx/httpcore/OS exception to an `ErrorKind` and a one-line detail."""
    links = list(chain(exc))
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout):
        return ErrorKind.CONNECT_TIMEOUT, f"connect timed out: {msg}"
    if isinstance(exc, httpx.WriteTimeout):
        return ErrorKind.READ_TIMEOUT, f"sending the request timed out: {msg}"
    if isinstance(exc, httpx.TimeoutException):
        return ErrorKind.READ_TIMEOUT, f"read timed out: {msg}"
    if any(isinstance(e, ssl.SSLError | ssl.CertificateError) for e in links):
        return ErrorKind.TLS, f"TLS error: {msg}"
    if isinstance(exc, httpx.ConnectError):
        if any(isinstance(e, ConnectionRefusedError) for e in links) or any(
            getattr(e, "errno", None) == errno.ECONNREFUSED for e in links
        ):
            return ErrorKind.REFUSED, f"connection refused: {msg}"
        if any(isinstance(e, socket.gaierror) for e in links) or any(s in msg.lower() for s in _DNS_WORDS):
            return ErrorKind.DNS, f"name resolution failed: {msg}"
        return ErrorKind.OTHER, f"connect failed: {msg}"
    if isinstance(exc, httpx.ProtocolError | httpx.ReadError | httpx.WriteError):
        return ErrorKind.PROTOCOL, f"{type(exc).__name__}: {msg}"
    return ErrorKind.OTHER, f"{type(exc).__name__}: {msg}"


#: OS errors that are this machine running out of something, not the endpoint failing.
_CLIENT_ERRNOS = {
    errno.EMFILE: "too many open files (EMFILE: the open-file limit, ulimit -n)",
    errno.ENFILE: "too many open files in the system (ENFILE)",
    errno.EADDRNOTAVAIL: "no free local port (EADDRNOTAVAIL: ephemeral ports exhausted)",
    errno.ENOBUFS: "no buffer space (ENOBUFS)",
    errno.ENOMEM: "out of memory (ENOMEM)",
}
_CLIENT_WORDS = {"[errno 24]": errno.EMFILE, "too many open files": errno.EMFILE,
                 "[errno 99]": errno.EADDRNOTAVAIL, "cannot assign requested address": errno.EADDRNOTAVAIL}


def client_failure(exc: BaseException) -> str | None:
    """What ran out on this machine when `exc` is this client's own failure (None: it is not).

    EMFILE/ENFILE (open files), EADDRNOTAVAIL (ephemeral ports), ENOBUFS/ENOMEM, anywhere in the
    chain (httpcore wraps the `OSError` in a `ConnectError`); a wait for this client's own
    connection pool (`httpx.PoolTimeout`).
    """
    for e in chain(exc):
        code = getattr(e, "errno", None)
        if code in _CLIENT_ERRNOS:
            return _CLIENT_ERRNOS[code]
        if isinstance(e, httpx.PoolTimeout):
            return "no connection free in its own pool (pool timeout)"
    text = str(exc).lower()
    for word, code in _CLIENT_WORDS.items():
        if word in text:
            return _CLIENT_ERRNOS[code]
    return None


#: ``Server`` header words of proxies, gateways and balancers (never a model server's).
GATEWAY_SERVERS = ("nginx", "haproxy", "envoy", "caddy", "traefik", "cloudflare", "awselb", "apache", "varnish",
                   "squid", "tinyproxy", "kong", "istio", "openresty", "litellm")
_CUT = (ErrorKind.PROTOCOL, ErrorKind.STREAM_CUT)


def gateway_failure(timing: RequestTiming) -> bool:
    """Whether a failed request's answer shows a gateway failing it, not the model server.

    An HTML error page (a proxy's, a balancer's or a login page, never an API's JSON), or a cut or
    reset answer whose headers came through a proxy (``Via``, or a ``Server`` naming one).
    """
    headers = timing.response_headers
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "text/html" and (timing.status is None or timing.status >= 400 or timing.error == ErrorKind.BAD_BODY):
        return True
    server = headers.get("server", "").lower()
    proxied = "via" in headers or any(word in server for word in GATEWAY_SERVERS)
    return timing.error in _CUT and proxied


def blame(timing: RequestTiming, exc: BaseException | None, *, run_deadline: bool, stale: bool,
          proxied: bool) -> None:
    """Set who failed `timing` (`FailedBy`): this client, the path to the server, or the server.

    `exc`: what the request raised, if it did; `run_deadline`: the run's own deadline
    (``--deadline``) cut it; `stale`: a pooled connection dropped between two requests (retried);
    `proxied`: it went to a proxy from the environment, which is what failed when nothing answered.
    """
    phrase = client_failure(exc) if exc is not None else None
    if phrase is not None:
        timing.failed_by = FailedBy.CLIENT
        timing.error_detail = f"this client: {phrase}: {timing.error_detail}"
    elif run_deadline and timing.error == ErrorKind.READ_TIMEOUT:
        timing.failed_by = FailedBy.CLIENT
    elif stale:
        timing.failed_by = FailedBy.PATH
        timing.error_detail = f"a pooled connection was dropped in between: {timing.error_detail}"
    elif timing.error == ErrorKind.DNS or (timing.status is None and proxied) or gateway_failure(timing):
        timing.failed_by = FailedBy.PATH
    else:
        timing.failed_by = FailedBy.SERVER
