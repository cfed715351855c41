"""Every request of the run as an outcome record (`RequestOutcome`), tallied per probe and for the run.

The data of the ``request_outcomes`` probe (`llmdoctor.probes.outcomes`): which probe sent each
request, its status or error class, who failed it, and the headers that explain a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmdoctor.measurements.timing import FailedBy, Outcome

if TYPE_CHECKING:
    from llmdoctor.measurements.timing import RequestTiming

__all__ = ["RATE_LIMIT_PREFIXES", "ProbeTally", "RequestLedger", "RequestOutcome"]


#: Response headers that describe a rate limit (OpenAI's ``x-ratelimit-*``, the IETF draft's
#: ``ratelimit-*``, GitHub-style ``x-rate-limit-*``).
RATE_LIMIT_PREFIXES = ("x-ratelimit-", "ratelimit", "x-rate-limit-")


DETAIL_CHARS = 160


@dataclass
class RequestOutcome:
    """One request of the run: who sent it, how it ended, and the headers that explain a refusal."""

    probe: str
    method: str
    path: str
    started_at: float
    outcome: str
    status: int | None = None
    error: str | None = None
    retried: bool = False
    ttfb_ms: float | None = None
    total_ms: float | None = None
    detail: str = ""
    content_type: str = ""
    server: str = ""
    retry_after: str | None = None
    rate_limit: dict[str, str] = field(default_factory=dict)
    peer: str = ""
    client_lag_ms: float | None = None
    #: Why this request failed by our own doing (our probe did not fit the window); "" otherwise.
    misfit: str = ""
    #: The ``X-Request-Id`` and ``traceparent`` it carried, to find it in the server's logs and traces.
    request_id: str = ""
    traceparent: str = ""
    #: Who failed it (`FailedBy`: ``client``, ``path`` or ``server``); None when it did not fail.
    failed_by: str | None = None

    @property
    def ok(self) -> bool:
        """Answered with a usable 2xx (an empty generation does not count)."""
        return self.outcome == Outcome.OK

    @property
    def who(self) -> str | None:
        """Who failed it (None: it did not fail): our probe's misfit is this client's, the rest as classified
        (an older record without a class: the server's, as the tallies always counted it)."""
        if self.ok:
            return None
        return FailedBy.CLIENT if self.misfit else self.failed_by or FailedBy.SERVER

    @property
    def generation(self) -> bool:
        """Whether it was a generation request (chat or text completion)."""
        return self.method == "POST" and self.path.rstrip("/").endswith("/completions")

    @property
    def html(self) -> bool:
        """Whether the answer was an HTML page (a proxy's or a login page), not the API's JSON."""
        return self.content_type == "text/html" or "<html" in self.detail.lower() or "<title" in self.detail.lower()

    @property
    def label(self) -> str:
        """``HTTP 429``, ``read timeout``, ``empty answer``, ``cut stream`` ..."""
        if self.outcome == Outcome.EMPTY:
            return "empty answer"
        if self.outcome == Outcome.TRUNCATED:
            return "cut stream"
        if self.status is not None and not 200 <= self.status < 300:
            return f"HTTP {self.status}"
        return (self.error or self.outcome).replace("_", " ")

    @classmethod
    def of(cls, t: RequestTiming) -> RequestOutcome:
        """The outcome record of one timed request (its text is already redacted by the client)."""
        headers = t.response_headers
        return cls(
            probe=t.probe, method=t.method, path=t.path, started_at=t.started_at, outcome=t.outcome,
            status=t.status, error=t.error, retried=t.retried, ttfb_ms=t.ttfb_ms, total_ms=t.total_ms,
            detail=t.error_detail[:DETAIL_CHARS] if not t.ok else "",
            content_type=headers.get("content-type", "").split(";")[0].strip().lower(),
            server=headers.get("server", "")[:80],
            retry_after=headers.get("retry-after"),
            rate_limit={k: v[:80] for k, v in headers.items() if k.startswith(RATE_LIMIT_PREFIXES)},
            peer=t.peer, client_lag_ms=t.client_lag_ms, misfit=t.misfit,
            request_id=t.request_id, traceparent=t.traceparent, failed_by=_failed_by(t),
        )


def _failed_by(t: RequestTiming) -> str | None:
    """Who failed `t`: as the client said; our probe that did not fit is this client's; an empty answer the server's."""
    if t.outcome == Outcome.OK:
        return None
    if t.misfit:
        return FailedBy.CLIENT
    return t.failed_by or FailedBy.SERVER


@dataclass
class ProbeTally:
    """How the requests of one probe (or of the run) ended."""

    probe: str
    sent: int = 0
    ok: int = 0
    retried: int = 0
    empty: int = 0
    truncated: int = 0
    #: Failures by label ("HTTP 429": 3).
    failures: dict[str, int] = field(default_factory=dict)
    #: Failures by who failed them (`FailedBy`: "client": 11).
    failed_by: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Requests that did not end with a usable answer."""
        return self.sent - self.ok

    @property
    def success_ratio(self) -> float | None:
        """Share of the requests that succeeded (None when none was sent)."""
        return self.ok / self.sent if self.sent else None

    def add(self, r: RequestOutcome) -> None:
        """Count one request."""
        self.sent += 1
        self.ok += r.ok
        self.retried += r.retried
        self.empty += r.outcome == Outcome.EMPTY
        self.truncated += r.outcome == Outcome.TRUNCATED
        if not r.ok:
            self.failures[r.label] = self.failures.get(r.label, 0) + 1
            who = r.who or FailedBy.SERVER
            self.failed_by[who] = self.failed_by.get(who, 0) + 1

    def failures_text(self) -> str:
        """``"3 × HTTP 429, 1 × empty answer"`` ("" when nothing failed)."""
        return ", ".join(f"{n} × {label}" for label, n in
                         sorted(self.failures.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class RequestLedger:
    """Every request of the run, in the order sent."""

    requests: list[RequestOutcome] = field(default_factory=list)

    @property
    def generations(self) -> list[RequestOutcome]:
        """The generation requests, in the order they started (requests sent at once finish in any order)."""
        return sorted((r for r in self.requests if r.generation), key=lambda r: r.started_at)

    def by_probe(self) -> list[ProbeTally]:
        """One tally per probe, in the order each first sent."""
        tallies: dict[str, ProbeTally] = {}
        for r in self.requests:
            name = r.probe or "other"
            tallies.setdefault(name, ProbeTally(name)).add(r)
        return list(tallies.values())

    def overall(self, *, generation_only: bool = False) -> ProbeTally:
        """The run's tally (of its generation requests only, with `generation_only`)."""
        tally = ProbeTally("generation" if generation_only else "all")
        for r in (self.generations if generation_only else self.requests):
            tally.add(r)
        return tally
