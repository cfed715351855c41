"""Requests whose time measures this client's own stall, not the server: the answer was waiting.

A small request is handed to the kernel in well under a millisecond; its first token cannot follow
within a few milliseconds of it on any real server (vLLM on this CPU: 4 ms to its headers, 14 ms to
the first token when idle). When this client's host is starved, though, the thread that sends can
come back from its send seconds late, and then find the whole answer already waiting. Measured
2026-12-03 against a real vLLM 0.32 (``--max-num-seqs 1``, two background streams, two cores
saturated): httpcore's ``send_request_body.complete`` at 954 ms, the response headers 0.2 ms and the
first token 0.4 ms after it; in a CI run two of five baseline requests had sent at 7,142 and 6,808 ms
and their first token 1.4 and 1.3 ms later, while vLLM's own queue histogram put 622 ms in its queue.

Such a request's time to first token is then an upper bound, no measurement: the server was done
before the client looked, so its part is anything up to that. A small bound still says something
(that request did not wait long), a large one only how long this client stalled; a mean over our
requests that takes it in measures us. `client_bound` names such a request; `server_bound` keeps
the others and those client-bound ones no slower than the fastest of the others (they show the
server was fast), and sets the rest aside, unless every request is client-bound (then all are kept:
nothing better is known).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmdoctor.measurements.timing import RequestTiming

__all__ = ["ANSWER_WAITING_MS", "SEND_STALL_MS", "client_bound", "server_bound"]

#: Sending a request (after any connection set-up) took at least this long (ms) ...
SEND_STALL_MS = 20.0
#: ... and its first token (or, unstreamed, its headers) came at most this long (ms) after the send
#: completed: the answer was there before the client came back.
ANSWER_WAITING_MS = 5.0


def client_bound(t: RequestTiming) -> bool:
    """The request's time measures this client's stall: a slow send, and the answer at once after it."""
    if t.sent_ms is None:
        return False
    setup = t.setup_ms if not t.reused_connection else 0.0
    answered = t.ttft_ms if t.ttft_ms is not None else t.ttfb_ms
    if answered is None:
        return False
    return t.sent_ms - setup >= SEND_STALL_MS and answered - t.sent_ms <= ANSWER_WAITING_MS


def server_bound(samples: Sequence[RequestTiming]) -> tuple[list[RequestTiming], int]:
    """The requests of `samples` whose time says something about the server, and how many were set aside.

    Kept: every request that is not `client_bound`, and a client-bound one whose time to first token
    (else total) is no longer than the fastest of those. When every request is client-bound none is
    set aside: nothing better is known then.
    """
    timed = [t for t in samples if not client_bound(t)]
    if not timed:
        return list(samples), 0
    fastest = min(_time(t) for t in timed)
    kept = [t for t in samples if not client_bound(t) or _time(t) <= fastest]
    return kept, len(samples) - len(kept)


def _time(t: RequestTiming) -> float:
    return t.ttft_ms or t.total_ms or 0.0
