"""Reading failed requests: which ones count, their pattern, and who answered a 503.

Shared by LD001 (the first request) and LD002 (the requests after it); no I/O.

- `counts_as_trouble`: a refusal, a server error, a timeout, a cut or empty answer. A 400/404/422
  is the server rejecting what the doctor asked (a parameter it does not know, an optional route it
  does not have), which the probes handle; it is not the endpoint failing. Nor is a request this
  client failed itself (`client_failures`: too many open files, no free local port, its own
  deadline), which the client marks (`RequestOutcome.failed_by`).
- `failure_pattern`: every Nth request, bursts, or a pace (refused when sent too soon after the
  last accepted one: a rate limit), from the order and start times of the requests.
- `who_answered_503`: a 503 is "the model is loading" only when the answer says so; an HTML page
  (nginx, haproxy and load balancers answer with one), an answer far faster than the model's, or
  a pattern that follows the pacing of the requests is a gateway limiting in front of the model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.measurements.ledger import RequestOutcome
from llmdoctor.measurements.timing import FailedBy

__all__ = ["FailurePattern", "LOADING_WORDS", "client_failures", "client_reasons", "counts_as_trouble",
           "failure_pattern", "ordinal", "sequential", "signs_of_503", "who_answered_503"]

#: Words of a "the model is not ready" answer (llama.cpp "Loading model", TGI/vLLM start-up).
LOADING_WORDS = ("loading", "not ready", "starting", "warming up", "initializing", "initialising")
#: Client errors that mean "not this request" rather than "the endpoint failed".
_REJECTED = frozenset({400, 404, 405, 409, 411, 413, 414, 415, 422})
#: An error answered this much faster than the model's own answers (share of their median TTFB)
#: came from something in front of the model.
INSTANT_SHARE = 0.2
INSTANT_MIN_MS = 5.0


def counts_as_trouble(r: RequestOutcome) -> bool:
    """Whether a request ended in endpoint trouble (not a request the server merely declined, nor one
    of our probes that did not fit the window: `RequestOutcome.misfit`, nor one this client failed
    itself: `RequestOutcome.failed_by`)."""
    return not r.ok and r.status not in _REJECTED and not r.misfit and r.failed_by != FailedBy.CLIENT


def client_failures(requests: Sequence[RequestOutcome]) -> list[RequestOutcome]:
    """The requests this client failed itself (too many open files, no free port, its deadline)."""
    return [r for r in requests if not r.ok and r.failed_by == FailedBy.CLIENT and not r.misfit]


def client_reasons(failed: Sequence[RequestOutcome]) -> str:
    """What ran out, from the client's own words: ``too many open files (EMFILE: …)`` ×N, joined."""
    counts: dict[str, int] = {}
    for r in failed:
        reason = r.detail.split("this client: ", 1)[1].split(": ", 1)[0] if "this client: " in r.detail else r.label
        counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(f"{reason} ×{n}" if len(counts) > 1 else reason for reason, n in counts.items())


def ordinal(n: int) -> str:
    """``2nd``, ``3rd``, ``11th``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class FailurePattern:
    """How failures were spread over the requests: `kind` and a phrase for people."""

    kind: str  # all | every_nth | pace | bursts | scattered | none
    text: str
    #: every_nth: N; pace: the interval (s) after the last accepted request below which requests were refused.
    value: float | None = None
    #: Every refused request came sooner after the last accepted one than any accepted request did.
    paced: bool = False


def _every_nth(failed: Sequence[bool | None]) -> int | None:
    """N when the failures fall on every Nth position from the first (None: a request whose place is unknown)."""
    positions = [i for i, f in enumerate(failed) if f]
    if len(positions) < 2:
        return None
    for n in range(2, len(failed) // 2 + 1):
        r = positions[0] % n
        if all(f is None or f == (i % n == r) for i, f in enumerate(failed) if i >= positions[0]):
            return n
    return None


def _pace(requests: Sequence[RequestOutcome], failed: Sequence[bool]) -> tuple[float, float] | None:
    """(longest interval refused, shortest accepted): each request's start after the last accepted one."""
    last_ok: float | None = None
    refused: list[float] = []
    accepted: list[float] = []
    for r, f in zip(requests, failed):
        if last_ok is not None:
            (refused if f else accepted).append(r.started_at - last_ok)
        if not f:
            last_ok = r.started_at
    if len(refused) < 2 or not accepted or max(refused) >= min(accepted):
        return None
    return max(refused), min(accepted)


def _runs(failed: Sequence[bool]) -> list[int]:
    runs, current = [], 0
    for f in failed:
        if f:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


def sequential(requests: Sequence[RequestOutcome]) -> list[RequestOutcome]:
    """The requests that ran alone (in start order): of requests in flight together the order is unknown."""
    ordered = sorted(requests, key=lambda r: r.started_at)
    ends = [r.started_at + (r.total_ms or 0.0) / 1000.0 for r in ordered]
    alone = []
    for i, r in enumerate(ordered):
        overlaps_before = i > 0 and max(ends[:i]) > r.started_at
        overlaps_after = i + 1 < len(ordered) and ends[i] > ordered[i + 1].started_at
        if not (overlaps_before or overlaps_after):
            alone.append(r)
    return alone


def failure_pattern(requests: Sequence[RequestOutcome]) -> FailurePattern:
    """The pattern of the troubled requests among `requests`, in the order they started.

    Requests in flight together (see `sequential`) keep their places in the count of an every-Nth
    pattern without having to match it (which of them the server saw first is unknown); the pace
    and the bursts are read from the requests that ran alone.
    """
    ordered = sorted(requests, key=lambda r: r.started_at)
    alone_ids = {id(r) for r in sequential(ordered)}
    places: list[bool | None] = [counts_as_trouble(r) if id(r) in alone_ids else None for r in ordered]
    requests = [r for r in ordered if id(r) in alone_ids]
    failed = [counts_as_trouble(r) for r in requests]
    n_failed = sum(failed)
    if not n_failed:
        return FailurePattern("none", "none failed")
    if n_failed == len(failed):
        return FailurePattern("all", "every request")
    nth = _every_nth(places)
    pace = _pace(requests, failed)
    paced = ""
    if pace is not None:
        refused, accepted = pace
        paced = (f"refused when sent within {refused:.2f} s of the last accepted request, accepted "
                 f"{accepted:.2f} s or more after it (a limit of about one request per {accepted:.1f} s)")
    if nth is not None and nth <= 4:
        text = f"every {ordinal(nth)} request" + (f"; {paced}" if paced else "")
        return FailurePattern("every_nth", text, nth, paced=bool(paced))
    if pace is not None:
        return FailurePattern("pace", paced, pace[1], paced=True)
    if nth is not None:
        return FailurePattern("every_nth", f"every {ordinal(nth)} request", nth)
    runs = _runs(failed)
    if max(runs) >= 2:
        sizes = f"{min(runs)}–{max(runs)}" if min(runs) != max(runs) else str(max(runs))
        count = f"{len(runs)} burst{'' if len(runs) == 1 else 's'}"
        return FailurePattern("bursts", f"in {count} of {sizes} requests in a row", max(runs))
    return FailurePattern("scattered", "scattered, no pattern")


def _ok_ttfb(requests: Sequence[RequestOutcome]) -> float | None:
    values = [r.ttfb_ms for r in requests if r.ok and r.ttfb_ms is not None]
    return statistics.median(values) if values else None


def who_answered_503(r: RequestOutcome, requests: Sequence[RequestOutcome],
                     pattern: FailurePattern | None = None) -> tuple[str, str]:
    """(``loading`` | ``gateway`` | ``overload``, the evidence) for a 503 answer `r` among `requests`."""
    kind, signs = signs_of_503(r, requests, pattern)
    return kind, "; ".join(signs.values())


def signs_of_503(r: RequestOutcome, requests: Sequence[RequestOutcome],
                 pattern: FailurePattern | None = None) -> tuple[str, dict[str, str]]:
    """Who answered a 503, and the signs of it by kind (``loading``, ``html``, ``instant``, ``paced``, ``json``)."""
    detail = r.detail.lower()
    if any(word in detail for word in LOADING_WORDS):
        return "loading", {"loading": f"the answer says the model is not ready ({r.detail[:80]!r})"}
    signs: dict[str, str] = {}
    if r.html:
        served = f" from {r.server}" if r.server else ""
        signs["html"] = f"an HTML error page{served}, not the API's JSON"
    ok_ttfb = _ok_ttfb(requests)
    if r.ttfb_ms is not None and ok_ttfb is not None and r.ttfb_ms <= max(INSTANT_MIN_MS, INSTANT_SHARE * ok_ttfb):
        signs["instant"] = f"answered in {r.ttfb_ms:,.1f} ms where the model's answers took {ok_ttfb:,.0f} ms"
    if pattern is not None and pattern.paced:
        signs["paced"] = "refusals that follow the pacing of the requests"
    if signs:
        return "gateway", signs
    return "overload", {"json": "a 503 without a loading message: the server is overloaded or restarting"}
