"""The ids every probe request carries, so an operator can find the doctor's requests in the server's logs and traces.

- ``X-Request-Id``: a random version-4 UUID as 32 hex digits, whose last two digits are the attempt
  (``01``; a retry's ``02``). It must parse as a UUID: llama-cpp-python's server (0.3.36) checks the
  header with starlette-context's ``RequestIdPlugin`` (0.3.6, ``validate=True``) and answers anything
  else with a bare HTTP 400 (no body) before the request reaches the model. vLLM (0.32,
  ``OpenAIServing._base_request_id``) takes it as the request's own id (``chatcmpl-<id>`` in its logs
  and in the answer's ``id``) and echoes it in the response with ``--enable-request-id-headers``;
  nginx, Envoy and most gateways log or forward it.
- ``traceparent`` (W3C Trace Context, version ``00``): ``00-<32 hex trace id>-<16 hex parent id>-01``,
  random per request, the sampled flag set, so a server or gateway that traces (vLLM with
  ``--otlp-traces-endpoint``, an OpenTelemetry-instrumented proxy) records our requests under that
  trace id.

Both are random per request (`secrets`), never derived from anything of the user's; a user's own
``--header X-Request-Id: ...`` wins over ours.

A request the client sends again (`llmdoctor.probes.transports.RetryTransport`: a dropped idle
connection, one short ``Retry-After``) is a second request to the server, so it carries ids of its
own (`RequestIds.for_attempt`): the first id with its attempt digits ``01`` made ``02`` (still a UUID;
searching the server's log for the id's first 30 digits finds every attempt; the ``-2`` suffix used
before made llama-cpp-python refuse every retry), and the same trace id with a new parent id, as W3C
Trace Context has a retry be a new span of the same trace. The JSON lists each attempt with its number.
"""

from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass

__all__ = ["IDS", "ID_DIGITS", "REQUEST_ID_HEADER", "TRACEPARENT_HEADER", "RequestIds", "new_ids", "valid_traceparent"]

REQUEST_ID_HEADER = "X-Request-Id"
TRACEPARENT_HEADER = "traceparent"
#: Request extension holding the `RequestIds` the client generated for a request (the user's own are not).
IDS = "llmdoctor.ids"
#: Hex digits of our ``X-Request-Id`` (a UUID without its dashes).
ID_DIGITS = 32
_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


@dataclass(frozen=True)
class RequestIds:
    """The ids one request is sent with."""

    request_id: str
    traceparent: str

    @property
    def trace_id(self) -> str:
        """The trace id inside `traceparent` (what a tracing backend is searched by)."""
        return self.traceparent.split("-")[1]

    def headers(self) -> dict[str, str]:
        """The headers to send."""
        return {REQUEST_ID_HEADER: self.request_id, TRACEPARENT_HEADER: self.traceparent}

    def for_attempt(self, attempt: int) -> RequestIds:
        """The ids of the `attempt`-th sending of the same request (1: these; 2: its retry).

        The request id's last two hex digits become the attempt's (a search for its first 30 digits
        finds them all; it stays a UUID); an id of the user's that is not ours is left as it is. The
        trace id stays, the parent id is new (each attempt is its own span of one trace).
        """
        if attempt <= 1:
            return self
        rid = self.request_id
        if len(rid) == ID_DIGITS and rid.endswith(f"{1:02x}"):
            rid = f"{rid[:-2]}{attempt:02x}"
        return RequestIds(rid, f"00-{self.trace_id}-{_nonzero_hex(8)}-01")


def _nonzero_hex(nbytes: int) -> str:
    while True:  # an all-zero id is invalid in Trace Context (a 2**-64 chance at worst)
        value = secrets.token_hex(nbytes)
        if value.strip("0"):
            return value


def new_ids() -> RequestIds:
    """Fresh random ids for one request: a version-4 UUID ending in attempt ``01``, a new trace."""
    rid = uuid.UUID(bytes=secrets.token_bytes(16), version=4).hex
    return RequestIds(f"{rid[:-2]}{1:02x}", f"00-{_nonzero_hex(16)}-{_nonzero_hex(8)}-01")


def valid_traceparent(value: str) -> bool:
    """Whether `value` is a valid version-00 W3C ``traceparent`` (lowercase hex, ids not all zero)."""
    return bool(_TRACEPARENT.match(value))
