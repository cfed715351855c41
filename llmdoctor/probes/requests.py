"""Probe ``requests``: the application's own request bodies, read from ``--request`` files.

A local probe (it reads files, never the endpoint), so it also runs when
replaying recorded measurements: the case fixtures of the input and parameter
checks are request files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.inputs.request_files import RequestFileError, RequestInfo, load_requests
from llmdoctor.probes.catalog import REQUESTS

__all__ = ["RequestSet", "read_requests"]


@dataclass
class RequestSet:
    """Every request of the ``--request`` files, normalised (sizes and kinds, no texts)."""

    files: list[str] = field(default_factory=list)
    requests: list[RequestInfo] = field(default_factory=list)

    @property
    def chat(self) -> list[RequestInfo]:
        """The chat-completions requests."""
        return [r for r in self.requests if r.kind == "chat"]

    def describe(self, requests: list[RequestInfo]) -> str:
        """`where` of a subset: "file:line" for one request, else "N of M requests"."""
        if len(self.requests) == 1 and requests:
            return requests[0].source
        first = f" (first: {requests[0].source})" if requests else ""
        return f"{len(requests)} of {len(self.requests)} requests{first}"


def read_requests(ctx: Context) -> RequestSet:
    """Read and normalise ``Options.request_files``."""
    paths = ctx.options.workload.request_files
    off = REQUESTS.off_reason(ctx.options)
    if off:
        raise ProbeUnavailable(off)
    try:
        requests = load_requests(paths)
    except RequestFileError as exc:  # the CLI validates first; this guards library use
        raise ProbeUnavailable(f"bad request file: {exc}") from None
    if not requests:
        raise ProbeUnavailable("the request files hold no requests")
    return RequestSet(files=list(paths), requests=requests)
