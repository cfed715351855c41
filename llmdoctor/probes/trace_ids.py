"""The ids every probe request carries, so an operator can find the doctor's requests in the server's logs and traces.

- ``X-Request-Id``: 32 random hex digits. vLLM (0.32, ``OpenAIServing._base_request_id``) takes it as
  the request's own id (``chatcmpl-<id>`` in its logs and in the answer's ``id``) and echoes it in the
  response with ``--enable-request-id-headers``; nginx, Envoy and most gateways log or forward it.
- ``traceparent`` (W3C Trace Context, version ``00``): ``00-<32 hex trace id>-<16 hex parent id>-01``,
  random per request, the sampled flag set, so a server or gateway that traces (vLLM with
  ``--otlp-traces-endpoint``, an OpenTelemetry-instrumented proxy) records our requests under that
  trace id.

Both are random per request (`secrets`), never derived from anything of the user's; a user's own
``--header X-Request-Id: ...`` wins over ours.

A request the client sends again (`llmdoctor.probes.transports.RetryTransport`: a dropped idle
connection, one short ``Retry-After``) is a second request to the server, so it carries ids of its
own (`RequestIds.for_attempt`): the first id with ``-2`` appended, so that searching the server's log
for the first id finds every attempt, and the same trace id with a new parent id, as W3C Trace
Context has a retry be a new span of the same trace. The JSON lists each attempt with its number.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

__all__ = ["IDS", "REQUEST_ID_HEADER", "TRACEPARENT_HEADER", "RequestIds", "new_ids", "valid_traceparent"]

REQUEST_ID_HEADER = "X-Request-Id"
TRACEPARENT_HEADER = "traceparent"
#: Request extension holding the `RequestIds` the client generated for a request (the user's own are not).
IDS = "llmdoctor.ids"
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

        The request id gets ``-<attempt>`` appended (a search for the first id finds them all); the
        trace id stays, the parent id is new (each attempt is its own span of one trace).
        """
        if attempt <= 1:
            return self
        return RequestIds(f"{self.request_id}-{attempt}", f"00-{self.trace_id}-{_nonzero_hex(8)}-01")


def _nonzero_hex(nbytes: int) -> str:
    while True:  # an all-zero id is invalid in Trace Context (a 2**-64 chance at worst)
        value = secrets.token_hex(nbytes)
        if value.strip("0"):
            return value


def new_ids() -> RequestIds:
    """Fresh random ids for one request."""
    return RequestIds(secrets.token_hex(16), f"00-{_nonzero_hex(16)}-{_nonzero_hex(8)}-01")


def valid_traceparent(value: str) -> bool:
    """Whether `value` is a valid version-00 W3C ``traceparent`` (lowercase hex, ids not all zero)."""
    return bool(_TRACEPARENT.match(value))
